"""A small HTTP client of the ttsq API: submit, wait, download, batches. Used by ``ttsq say`` and
``ttsq narrate``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import httpx

from ttsq.constants import MAX_WAIT_S
from ttsq.jobs import JobStatus

BATCH_PAGE: Final = 200
"""Items per ``GET /v1/batches/{id}`` page: the API's largest."""


class ClientError(Exception):
    """The API refused the request, could not be reached, or the job did not succeed; the message
    says why."""


class BatchGone(ClientError):
    """The batch is not on the server (expired after the job TTL, or never this key's)."""


def _raise_for_error(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        detail = f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        detail = response.text[:500]
    raise ClientError(f"HTTP {response.status_code} from {response.request.url}: {detail}")


class TTSQClient:
    """Talks to one ttsq API base URL."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        # Presigned URLs carry their own signature; S3 refuses a request with a second (the API key).
        self._presigned = httpx.Client(timeout=timeout_s)
        self._timeout_s = timeout_s
        self._base_url = base_url

    def __enter__(self) -> TTSQClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()
        self._presigned.close()

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The request, with a connection failure turned into a :class:`ClientError` naming the API."""
        try:
            return self._http.request(method, url, **kwargs)
        except httpx.TransportError as e:
            raise ClientError(f"cannot reach the ttsq API at {self._base_url}: {e or type(e).__name__}") from e

    def submit(self, text: str, **options: Any) -> dict[str, Any]:
        body = {"text": text, **{k: v for k, v in options.items() if v is not None}}
        response = self._send("POST", "/v1/jobs", json=body)
        _raise_for_error(response)
        job: dict[str, Any] = response.json()
        return job

    def submit_batch(self, body: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """``POST /v1/batches``; with ``idempotency_key``, a repeat answers with the first batch."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
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

    def download(self, job_id: str, destination: Path) -> int:
        """Follow the audio redirect to the presigned URL and save the bytes (see :func:`_save`);
        returns their count."""
        response = self._send("GET", f"/v1/jobs/{job_id}/audio", follow_redirects=True)
        _raise_for_error(response)
        return _save(response.content, destination)

    def fetch(self, url: str, destination: Path) -> int:
        """Download a presigned URL of a result (``marks_url``, ``subtitles_url``…) like :meth:`download`."""
        try:
            response = self._presigned.get(url)
        except httpx.TransportError as e:
            raise ClientError(f"cannot download {destination.name}: {e or type(e).__name__}") from e
        _raise_for_error(response)
        return _save(response.content, destination)


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
