"""Machinery of the fault suite (``tests/test_faults.py``): clients that submit bursts as a user's
code would, and the figures each scenario records in ``bench/results/faults-latest.json``. The stack
of real processes is ``bench/fault_stack.py``; what it holds afterwards, ``bench/stack_audit.py``
(both shared with the chaos soak, and named here for the tests that import them from this module).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

import httpx

from bench.corpus import narration, paragraphs, short_messages
from bench.fault_stack import AofRedis, FaultStack, fault_stack
from bench.machine import describe
from bench.stack_audit import (
    JOBS_PREFIX,
    Outcome,
    job_ids_in_redis,
    objects_per_job,
    outcome,
    records,
    tmp_parts,
    wait_terminal,
)

__all__ = [
    "JOBS_PREFIX",
    "AofRedis",
    "Burst",
    "FaultStack",
    "Outcome",
    "fault_stack",
    "job_ids_in_redis",
    "objects_per_job",
    "outcome",
    "prose",
    "record_figures",
    "records",
    "short_texts",
    "tmp_parts",
    "wait_terminal",
]

RESULTS_PATH: Final = Path(__file__).resolve().parents[1] / "bench" / "results" / "faults-latest.json"
MAX_CLIENT_WAIT_S: Final = 5.0
"""Longest pause a client makes on a 503 (it honours ``Retry-After`` up to this)."""


@dataclass
class Burst:
    """Clients submitting texts from threads, as a user's code would: a 503 is retried after its
    ``Retry-After``, under the text's own ``Idempotency-Key`` (the safe path docs/API.md gives for a
    503 that names a job it may have stored), as is ``409 idempotency_in_flight``; a 202, or a 200
    replaying the job of an earlier try, is an accepted job. A transport error (no answer) is retried
    too, and counted, since its request may or may not have been taken."""

    api_url: str
    texts: Sequence[str]
    threads: int
    deadline_s: float = 600.0
    pace_s: float = 0.0
    """Pause of each client after each accepted job (a stream of submissions rather than a burst)."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Request fields besides the text (``priority``...)."""
    accepted: dict[str, float] = field(default_factory=dict)
    """Job id → when the API answered 202 (monotonic)."""
    refusals: Counter[str] = field(default_factory=Counter)
    """``503 <code>`` → how many; each was retried."""
    transport_errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    """Any other answer: its status and body (the text is not retried)."""
    started_at: float = 0.0
    finished_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pending: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Burst:
        for text in self.texts:
            self._pending.put(text)
        self.started_at = time.monotonic()
        self._workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for thread in self._workers:
            thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.accepted)

    def submitting(self) -> bool:
        """Whether some client is still submitting."""
        return any(thread.is_alive() for thread in self._workers)

    def join(self) -> None:
        for thread in self._workers:
            thread.join(max(1.0, self.started_at + self.deadline_s + 60 - time.monotonic()))
        self.finished_at = time.monotonic()
        assert not any(t.is_alive() for t in self._workers), f"submissions unfinished after {self.deadline_s:.0f}s"

    def _run(self) -> None:
        with httpx.Client(base_url=self.api_url, timeout=30) as client:
            while time.monotonic() < self.started_at + self.deadline_s:
                try:
                    text = self._pending.get_nowait()
                except queue.Empty:
                    return
                self._submit(client, text)

    def _submit(self, client: httpx.Client, text: str) -> None:
        key = {"Idempotency-Key": f"burst-{uuid.uuid4()}"}
        while time.monotonic() < self.started_at + self.deadline_s:
            try:
                response = client.post("/v1/jobs", json={"text": text, **self.fields}, headers=key)
            except httpx.TransportError as e:
                with self._lock:
                    self.transport_errors[type(e).__name__] += 1
                time.sleep(1)
                continue
            if response.status_code in (200, 202):  # 200: a retry given the job of an earlier try
                with self._lock:
                    self.accepted[response.json()["id"]] = time.monotonic()
                time.sleep(self.pace_s)
                return
            code = _error_code(response)
            if response.status_code != 503 and code != "idempotency_in_flight":
                with self._lock:
                    self.unexpected.append(f"{response.status_code} {response.text[:300]}")
                return
            with self._lock:
                self.refusals[f"{response.status_code} {code}"] += 1
            time.sleep(min(float(response.headers.get("retry-after", 1)), MAX_CLIENT_WAIT_S))

    def figures(self) -> dict[str, Any]:
        return {
            "submitted_texts": len(self.texts),
            "client_threads": self.threads,
            "accepted_202": len(self.accepted),
            "refused_503": dict(self.refusals),
            "transport_errors": dict(self.transport_errors),
            "unexpected_answers": len(self.unexpected),
            "submission_wall_s": round(self.finished_at - self.started_at, 1),
        }


def _error_code(response: httpx.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def short_texts(count: int) -> list[str]:
    """``count`` one- to two-second messages from the bench corpus, in turn."""
    messages = short_messages()
    return [messages[i % len(messages)] for i in range(count)]


def prose(chars: int) -> str:
    """Continuous prose from the bench corpus (about 46,000 characters), cut at a sentence end at
    most ``chars`` long."""
    cut = "\n\n".join([*paragraphs(), narration()])[:chars]
    return cut[: cut.rfind(".") + 1]


def record_figures(scenario: str, figures: dict[str, Any]) -> None:
    """Print the scenario's figures and merge them into ``bench/results/faults-latest.json``."""
    print(f"\n{scenario}: {json.dumps(figures, indent=2, default=str)}")
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = cast(dict[str, Any], json.loads(RESULTS_PATH.read_text()))
    except (OSError, ValueError):
        result = {}
    result["machine"] = describe()
    result.setdefault("scenarios", {})[scenario] = {"recorded_at": datetime.now(UTC).isoformat(), **figures}
    RESULTS_PATH.write_text(json.dumps(result, indent=2, default=str) + "\n")
