"""A streamed job from its submission to its last part, for every protocol that answers with audio
as it is made: the speech endpoint, the VOICEVOX facade and the Wyoming server.

Submitting and reading Redis happen off the event loop; the part reader is always closed (shielded
from the cancellation that may be ending the request); where the caller says so, a client that left
before its audio was all read (its request cancelled, :class:`ClientGone`) cancels the job, so no
worker keeps speaking for nobody.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi.concurrency import run_in_threadpool

from api.part_reader import PartReader
from api.schemas import JobCreate
from api.state import AppState
from api.submission import Draft, draft_and_submit, submit_job
from ttsq.job_record import JobRecord
from ttsq.lifecycle import cancel_job
from ttsq.tenants import Tenant


class ClientGone(Exception):
    """The client disconnected before its audio was all read."""


class StreamedJob:
    """A submitted streamed job and the reader of its parts."""

    def __init__(self, state: AppState, record: JobRecord) -> None:
        self._state = state
        self.record = record
        self.reader = PartReader(state, record.id)

    @classmethod
    async def submit(cls, state: AppState, tenant: Tenant, draft: Draft) -> StreamedJob:
        """Submit a job drafted earlier (its checks answered before the caller's turn) and subscribe
        to its parts."""
        await run_in_threadpool(submit_job, state, tenant, draft)
        return await cls._opened(state, draft.record)

    @classmethod
    async def draft_and_submit(cls, state: AppState, tenant: Tenant, request: JobCreate, keep: bool) -> StreamedJob:
        """Draft and submit in one thread hop (a short answer's path), then subscribe to its parts."""
        submit = functools.partial(draft_and_submit, state, tenant, request, stream=True, keep=keep)
        draft = await run_in_threadpool(submit)
        return await cls._opened(state, draft.record)

    @classmethod
    async def _opened(cls, state: AppState, record: JobRecord) -> StreamedJob:
        job = cls(state, record)
        await job.reader.open()
        return job

    async def close(self, cancel: bool = False) -> None:
        """Stop reading (and with ``cancel``, cancel the job first), even while being cancelled."""
        with anyio.CancelScope(shield=True):
            if cancel:
                await run_in_threadpool(
                    functools.partial(cancel_job, self.record.id, self._state.lifecycle, purge=False)
                )
            await self.reader.close()

    @asynccontextmanager
    async def reading(self, cancel_if_left: bool) -> AsyncIterator[PartReader]:
        """The part reader for the block, closed after it. With ``cancel_if_left``, leaving the block
        because the client went away (:class:`ClientGone`, or the request's cancellation) cancels the
        job; any other error leaves it to end as it will (it failed, or goes on for a later GET)."""
        left = False
        try:
            yield self.reader
        except (ClientGone, asyncio.CancelledError, anyio.get_cancelled_exc_class()):
            left = cancel_if_left
            raise
        finally:
            await self.close(cancel=left)
