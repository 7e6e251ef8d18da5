"""A streamed job's audio read part by part as the workers count its segments done: what the speech
endpoint and the protocol facades send while later segments are still being synthesised."""

from __future__ import annotations

import time
from typing import Final

import numpy as np
from fastapi.concurrency import run_in_threadpool

from api.errors import ApiError
from api.state import AppState
from api.waiting import RESYNC_S, Subscription, worth_a_read
from ttsq.job_record import JobRecord, JobStatus
from ttsq.parts import PartRef, counted_parts

PART_TIMEOUT_S: Final = 120.0
"""Longest wait for the next segment's audio before the reader gives up (504); a segment takes
seconds, so this only fires when no worker takes the job. Module-level so tests can shorten it."""


class PartReader:
    """A streamed job's parts in order, as the workers count them done; deletes them once read."""

    def __init__(self, state: AppState, job_id: str) -> None:
        self._state = state
        self.job_id = job_id
        self.voice = ""
        self.total: int | None = None
        self._next = 0
        self._context = state.hub.subscribe(job_id)
        self._events: Subscription | None = None

    async def open(self) -> None:
        self._events = await self._context.__aenter__()

    async def close(self) -> None:
        await self._context.__aexit__(None, None, None)
        await run_in_threadpool(self._release)

    def _release(self) -> None:
        """Delete the parts if the worker is done with them too; else leave that to the worker
        (the flag is set before the status is read, so one of the two always sees the other)."""
        record, done = self._state.stores.segments.record_and_winners(self.job_id, mark_streamed=True)
        if record.status.terminal and self.total:
            self._state.stores.parts.delete(counted_parts(self.job_id, done))

    async def next_part(self) -> np.ndarray:
        """The next part, waiting for it; raises if the job failed before it came."""
        pcm = await self.next_part_or_end()
        if pcm is None:
            raise ApiError(500, "stream_ended", f"job {self.job_id} finished without audio")
        return pcm

    async def next_part_or_end(self) -> np.ndarray | None:
        """The next part, or None once every part was read; 504 if it takes longer than
        ``PART_TIMEOUT_S`` (no worker, or a stuck one: the job itself goes on)."""
        assert self._events is not None
        deadline = time.monotonic() + PART_TIMEOUT_S
        while True:
            if time.monotonic() > deadline:
                message = f"no audio for {PART_TIMEOUT_S:.0f} s; the job goes on: GET /v1/jobs/{self.job_id}"
                raise ApiError(504, "speech_timeout", message)
            record, data = await run_in_threadpool(self._look)
            if self.total is not None and self._next >= self.total:
                return None
            if data is not None:
                self._next += 1
                return np.frombuffer(data, dtype=np.int16)
            if record.status is not JobStatus.RUNNING and record.status is not JobStatus.QUEUED:
                _raise_unfinished(record)
            await self._news(deadline)

    async def _news(self, deadline: float) -> None:
        """Wait for an event that may bring this reader news (``worth_a_read``), or for the wait to
        run out."""
        assert self._events is not None
        while True:
            left = deadline - time.monotonic()
            first = await self._events.next(min(RESYNC_S, max(0.0, left)))
            if left <= 0 or worth_a_read([first, *self._events.drain()], parts=True):
                return

    def _look(self) -> tuple[JobRecord, bytes | None]:
        """The record, and the next part's audio if it is counted, in one hop off the event loop
        (each hop is a thread's wake-up on the answer's path). A worker writes the total when it
        claims the job; a part counted while the total is unknown (a worker of the release before,
        which wrote a one-segment job's total only at its success) means a one-segment job."""
        record, done = self._state.stores.segments.record_and_winners(self.job_id)
        self.voice = record.voice
        total = record.progress.segments_total
        self.total = total if total is not None else (1 if done else None)
        attempt = done.get(self._next)
        if attempt is None or self.total is None or self._next >= self.total:
            return record, None
        return record, self._state.stores.parts.get(PartRef(self.job_id, self._next, attempt))


def _raise_unfinished(record: JobRecord) -> None:
    if record.status is JobStatus.SUCCEEDED:  # counted parts vanished (expired): nothing to stream
        raise ApiError(500, "segment_lost", f"job {record.id} succeeded but its parts are gone")
    error = record.error
    code = error.code if error else record.status.value
    message = error.message if error else f"job {record.id} is {record.status.value}"
    raise ApiError(500, code, message)
