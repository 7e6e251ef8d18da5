"""The soak's clients, as a careful user's code behaves under faults: every submit carries an
``Idempotency-Key`` and is repeated with it after a 503 (honouring ``Retry-After``), a
``409 idempotency_in_flight`` or no answer at all; a 503 that names a job (``Location`` or a job id in
its body) is noted, and resolved against Redis afterwards. Watchers follow a job over SSE or long
polls, reconnecting through API restarts."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from bench.soak.checks import TERMINAL

MAX_RETRY_WAIT_S: Final = 5.0
"""Longest pause after a 503 or a 409 in flight (``Retry-After`` is honoured up to this)."""
REQUEST_TIMEOUT_S: Final = 30.0
"""A request unanswered this long (a frozen API or Redis) is given up and sent again."""
SPEECH_READ_TIMEOUT_S: Final = 150.0
"""The speech endpoint sends its headers with the first audio, and answers ``504 speech_timeout``
after 120 s without any: a client must wait longer than that, or its retry makes a second job."""
LONG_POLL_S: Final = 30
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Request:
    """One submit of the load and what became of it."""

    kind: str
    """``interactive``, ``bulk``, ``batch``, ``speech``, ``hostile`` or ``canary``."""
    submitted_at: float = field(default_factory=time.time)
    """Wall clock of the first attempt (the servers' clocks are this host's)."""
    key: str = field(default_factory=lambda: f"soak-{uuid.uuid4()}")
    job_id: str | None = None
    """The job (or batch) the answer named."""
    named_by_503: set[str] = field(default_factory=set)
    answer: str = ""
    """``202``, ``200`` (a replay), ``422 <code>``, ``cut`` (a speech stream broken off), ``gave up``."""
    attempts: int = 0
    label: str = ""
    """Which hostile text, or which fault a canary follows."""
    receiver: str | None = None
    watcher: str | None = None
    """``sse`` or ``poll``."""
    saw: str | None = None
    """The final status the watcher saw."""


def error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


def named_ids(response: httpx.Response) -> set[str]:
    """Job ids a refusal names: in its ``Location`` or its body (a submit that may have been stored)."""
    return set(_UUID.findall(response.headers.get("location", "") + " " + response.text))


def retry_wait(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("retry-after", 1)), MAX_RETRY_WAIT_S)
    except ValueError:
        return 1.0


def submit(client: httpx.Client, request: Request, path: str, body: Any, deadline: float, raw: bool = False) -> None:
    """POST until an answer other than 503, 409 in flight or silence, or ``deadline`` (monotonic)."""
    headers = {"Idempotency-Key": request.key}
    if raw:
        headers["content-type"] = "application/json"
    while time.monotonic() < deadline:
        request.attempts += 1
        try:
            if raw:
                response = client.post(path, content=body, headers=headers)
            else:
                response = client.post(path, json=body, headers=headers)
        except httpx.TransportError:
            time.sleep(1)
            continue
        code = error_code(response) if response.status_code >= 400 else ""
        if response.status_code in {200, 202}:
            request.job_id = str(response.json()["id"])
            request.answer = str(response.status_code)
            return
        if response.status_code == 503 or (response.status_code == 409 and code == "idempotency_in_flight"):
            if response.status_code == 503:
                request.named_by_503 |= named_ids(response)
            time.sleep(retry_wait(response))
            continue
        request.answer = f"{response.status_code} {code}"
        return
    request.answer = "gave up"


def speak(client: httpx.Client, request: Request, body: dict[str, Any], deadline: float) -> int:
    """``POST /v1/audio/speech``, read to its end; returns the bytes received. Not idempotent: a
    refusal or silence before the answer's headers is sent again, a stream cut after them is not."""
    while time.monotonic() < deadline:
        request.attempts += 1
        received = 0
        try:
            headers = {"Idempotency-Key": request.key}
            timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=SPEECH_READ_TIMEOUT_S)
            with client.stream("POST", "/v1/audio/speech", json=body, headers=headers, timeout=timeout) as r:
                request.job_id = r.headers.get("x-ttsq-job-id") or request.job_id
                if r.status_code == 200:
                    for chunk in r.iter_bytes():
                        received += len(chunk)
                    request.answer = "200"
                    return received
                r.read()
                if r.status_code == 503:
                    time.sleep(retry_wait(r))
                    continue
                request.answer = f"{r.status_code} {error_code(r)}"
                return received
        except httpx.TransportError:
            if request.job_id is not None:
                request.answer = "cut"
                return received
            time.sleep(1)
    request.answer = "gave up"
    return 0


def follow_sse(client: httpx.Client, job_id: str, deadline: float) -> str | None:
    """The job's terminal status as its event stream tells it, reconnecting after each break."""
    while time.monotonic() < deadline:
        event = ""
        try:
            with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
                if response.status_code == 200:
                    for line in response.iter_lines():
                        if line.startswith("event:"):
                            event = line.partition(":")[2].strip()
                        elif line.startswith("data:") and event in TERMINAL:
                            return event
                else:
                    response.read()
        except httpx.TransportError:
            pass
        time.sleep(1)
    return None


def follow_poll(client: httpx.Client, job_id: str, deadline: float) -> str | None:
    """The job's terminal status through long polls (``?wait=``), asked again after each break."""
    while time.monotonic() < deadline:
        try:
            response = client.get(f"/v1/jobs/{job_id}", params={"wait": LONG_POLL_S}, timeout=LONG_POLL_S + 15)
        except httpx.TransportError:
            time.sleep(1)
            continue
        if response.status_code == 200 and response.json()["status"] in TERMINAL:
            return str(response.json()["status"])
        if response.status_code != 200:
            time.sleep(1)
    return None


def new_client(api_url: str) -> httpx.Client:
    return httpx.Client(base_url=api_url, timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5))
