"""A small HTTP client of the ttsq API: submit, wait, download, batches. Used by ``ttsq say`` and
``ttsq narrate``.

An API that has answered once and then stops answering is taken for restarting (``ttsq dev`` starts a
killed API again within seconds; Redis or S3 restarting makes it answer 503): a request that is safe
to repeat (a GET, or a POST with an ``Idempotency-Key``: every submission of this client sends one,
the same on each try) is tried again for up to ``RESTART_GRACE_S``, through connection failures,
503s (after their ``Retry-After``) and ``409 idempotency_in_flight``. So a submission whose answer was
lost (the connection dropped after the API got it, or a 503 naming the job it may have stored) is
answered, in the end, with the one job it made. An API that could never be reached fails the first
request at once.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Final

import httpx

from narration.api_contract import MAX_WAIT_S, JobStatus

BATCH_PAGE: Final = 200
"""Items per ``GET /v1/batches/{id}`` page: the API's largest."""

RESTART_GRACE_S: Final = 60.0
"""How long a request safe to repeat is tried again while an API that answered before does not
answer or answers 503: a restart of the API, Redis or S3 takes seconds."""

RETRY_PAUSE_S: Final = 1.0
"""Pause between two tries; a 503's ``Retry-After`` is honoured up to ``MAX_RETRY_PAUSE_S``."""

MAX_RETRY_PAUSE_S: Final = 5.0


class ClientError(Exception):
    """The API refused the request, could not be reached, or the job did not succeed; the message
    says why. ``status_code``, ``code`` and ``detail`` are the API's answer, when there was one."""

    def __init__(
        self, message: str, status_code: int | None = None, code: str | None = None, detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.detail = detail


class BatchGone(ClientError):
    """The batch is not on the server (expired after the job TTL, or never this key's)."""


def _raise_for_error(response: httpx.Response) -> None:
    if response.is_success:
        return
    code: str | None
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        detail = f"{code}: {message}"
    except (ValueError, KeyError, TypeError):
        code, message = None, response.text[:500]
        detail = message
    raise ClientError(
        f"HTTP {response.status_code} from {response.request.url}: {detail}", response.status_code, code, message
    )


class TTSQClient:
    """Talks to one ttsq API base URL."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        # Presigned URLs carry their own signature; S3 refuses a request with a second (the API key).
        self._presigned = httpx.Client(timeout=timeout_s)
        self._timeout_s = timeout_s
        self._base_url = base_url
        self._answered = False
        """Whether the API has answered any request: only then is a failure taken for a restart."""

    def __enter__(self) -> TTSQClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()
        self._presigned.close()

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The request, tried again while the API restarts (see the module); a connection failure
        that outlasts that becomes a :class:`ClientError` naming the API."""
        return self._retrying(self._http, method, url, f"cannot reach the ttsq API at {self._base_url}", **kwargs)

    def _retrying(self, http: httpx.Client, method: str, url: str, unreachable: str, **kwargs: Any) -> httpx.Response:
        headers = kwargs.get("headers") or {}
        repeatable = method == "GET" or "Idempotency-Key" in headers
        deadline = time.monotonic() + RESTART_GRACE_S
        while True:
            try:
                response = http.request(method, url, **kwargs)
            except httpx.TransportError as e:
                # A request never sent (no connection) may be sent again, whatever its method; one
                # sent to an API that never answered, only if that API was reached.
                never_sent = isinstance(e, httpx.ConnectError)
                reached = self._answered or not never_sent
                may_retry = reached and (repeatable or never_sent)
                if not may_retry or time.monotonic() > deadline:
                    raise ClientError(f"{unreachable}: {e or type(e).__name__}") from e
                time.sleep(RETRY_PAUSE_S)
                continue
            self._answered = True
            if not repeatable or not _passing(response) or time.monotonic() > deadline:
                return response
            time.sleep(_retry_after(response))

    def submit(self, text: str, **options: Any) -> dict[str, Any]:
        """``POST /v1/jobs`` with a fresh ``Idempotency-Key``, so a retry after a lost answer gets
        the same job instead of a second one."""
        body = {"text": text, **{k: v for k, v in options.items() if v is not None}}
        response = self._send("POST", "/v1/jobs", json=body, headers={"Idempotency-Key": fresh_key()})
        _raise_for_error(response)
        job: dict[str, Any] = response.json()
        return job

    def submit_batch(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """``POST /v1/batches`` with ``idempotency_key`` (a fresh one if not given): a repeat with it,
        by this client or a later run, answers with the first batch."""
        headers = {"Idempotency-Key": idempotency_key or fresh_key()}
        response = self._send("POST", "/v1/batches", json=body, headers=headers)
        _raise_for_error(response)
        batch: dict[str, Any] = response.json()
        return batch

    def get_batch(self, batch_id: str) -> dict[str, Any]:
        """The batch with every item (all pages); :class:`BatchGone` if the server has no such batch."""
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": BATCH_PAGE}
        while True:
            response = self._send("GET", f"/v1/batches/{batch_id}", params=params)
            if response.status_code == 404:
                raise BatchGone(f"batch {batch_id} is no longer on the server")
            _raise_for_error(response)
            batch: dict[str, Any] = response.json()
            items.extend(batch["items"])
            if batch["next_cursor"] is None:
                return {**batch, "items": items}
            params["cursor"] = batch["next_cursor"]

    def get(self, job_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        """The job; with ``wait_s``, once it is finished or after that many seconds."""
        params = {"wait": round(wait_s, 3)} if wait_s > 0 else None
        response = self._send("GET", f"/v1/jobs/{job_id}", params=params, timeout=self._timeout_s + wait_s)
        _raise_for_error(response)
        job: dict[str, Any] = response.json()
        return job

    def wait(self, job_id: str, timeout_s: float) -> dict[str, Any]:
        """Wait for the job to finish with the API's long poll (``?wait=``: the server answers the
        moment it finishes); raise :class:`ClientError` unless it succeeded."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            wait_s = max(0.0, min(MAX_WAIT_S, remaining))
            job = self.get(job_id, wait_s)
            if JobStatus(job["status"]).terminal:
                break
            if remaining <= 0:
                raise ClientError(f"job {job_id} still {job['status']} after {timeout_s:.0f}s")
        if job["status"] != JobStatus.SUCCEEDED:
            error = job.get("error") or {}
            raise ClientError(f"job {job_id} {job['status']}: {error.get('code')}: {error.get('message')}")
        return job

    def put_lexicon(self, name: str, document: bytes, content_type: str) -> dict[str, Any]:
        """``PUT /v1/lexicons/{name}``: store or replace it whole (a repeat stores the same again)."""
        response = self._send("PUT", f"/v1/lexicons/{name}", content=document, headers={"Content-Type": content_type})
        _raise_for_error(response)
        summary: dict[str, Any] = response.json()
        return summary

    def get_lexicon(self, name: str) -> bytes:
        """The lexicon's document as stored."""
        response = self._send("GET", f"/v1/lexicons/{name}")
        _raise_for_error(response)
        return response.content

    def list_lexicons(self) -> list[dict[str, Any]]:
        response = self._send("GET", "/v1/lexicons")
        _raise_for_error(response)
        lexicons: list[dict[str, Any]] = response.json()["lexicons"]
        return lexicons

    def delete_lexicon(self, name: str) -> None:
        response = self._send("DELETE", f"/v1/lexicons/{name}")
        _raise_for_error(response)

    def download(self, job_id: str, destination: Path) -> int:
        """Follow the audio redirect to the presigned URL and save the bytes (see :func:`_save`);
        returns their count."""
        response = self._send("GET", f"/v1/jobs/{job_id}/audio", follow_redirects=True)
        _raise_for_error(response)
        return _save(response.content, destination)

    def fetch(self, url: str, destination: Path) -> int:
        """Download a presigned URL of a result (``marks_url``, ``subtitles_url``…) like :meth:`download`."""
        response = self._retrying(self._presigned, "GET", url, f"cannot download {destination.name}")
        _raise_for_error(response)
        return _save(response.content, destination)


def fresh_key() -> str:
    """An ``Idempotency-Key`` for one submission, kept for all its tries."""
    return f"ttsq-client-{uuid.uuid4()}"


def _passing(response: httpx.Response) -> bool:
    """A refusal that a repeat of the same request outlives: 503 (Redis or S3 restarting), and 409
    ``idempotency_in_flight`` (the first try of this submission, cut off by a restart, still holds
    its key until the API takes it for abandoned)."""
    if response.status_code == 503:
        return True
    if response.status_code != 409:
        return False
    try:
        return bool(response.json()["error"]["code"] == "idempotency_in_flight")
    except (ValueError, KeyError, TypeError):
        return False


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", RETRY_PAUSE_S)), 0.0), MAX_RETRY_PAUSE_S)
    except ValueError:
        return RETRY_PAUSE_S


def _save(content: bytes, destination: Path) -> int:
    """Write the bytes under a temporary name, renamed once complete (a partial file never has the
    final name); returns their count."""
    partial = destination.with_name(f".{destination.name}.partial")
    try:
        partial.write_bytes(content)
        partial.replace(destination)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return len(content)
