"""Waiting on jobs without polling: one pub/sub connection per API process, shared by every waiter.

The hub subscribes once to every job's channel (``ttsq:events:job:*``) and hands each message to
the waiters of that job, so a thousand open long polls or event streams cost a thousand small
asyncio queues, no threads and no Redis commands while nothing happens. If the connection drops,
the hub reconnects and tells every waiter to re-read its job (``resync``), since messages sent
meanwhile are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from redis.exceptions import RedisError

from ttsq.constants import JOB_EVENTS_PATTERN, job_events_channel
from ttsq.events import EventKind, JobEvent, parse_event
from ttsq.job_record import JobRecord, JobStatus
from ttsq.redis_clients import async_redis_client
from ttsq.settings import Settings

log = logging.getLogger(__name__)

RECONNECT_DELAY_S: Final = 1.0

HUB_CONNECT_TIMEOUT_S: Final = 2.0
HUB_HEALTH_CHECK_INTERVAL_S: Final = 15
"""The subscription waits without a read timeout (it is quiet while nothing happens); a connection idle
this long is checked with a PING before use, so a dead one is noticed and replaced."""

RESYNC_S: Final = 30.0
"""A waiter re-reads its job at least this often, even if no event came (a lost message costs a
late answer, never a stuck one)."""
_RESYNC: Final = JobEvent(kind=EventKind.RESYNC)


def worth_a_read(heard: list[JobEvent | None], parts: bool = False) -> bool:
    """Whether what a waiter heard can change its answer, so that it reads the job again: a wait
    that ran out or a resync (events may have been missed), a status that ends the job or one not
    known here, or, for a reader of parts (``parts``), a segment counted. A ``running`` status only
    says that a worker took the job: reading the record then was a thread hop and Redis round trips
    on the cores where the job's inference call had just begun (issue 38)."""
    for event in heard:
        if event is None or event.kind is EventKind.RESYNC:
            return True
        if event.kind is EventKind.SEGMENT:
            if parts:
                return True
            continue
        status = _known_status(event.status)
        if status is None or status.terminal:
            return True
    return False


def ended_record(heard: list[JobEvent | None]) -> JobRecord | None:
    """The record the newest event heard carried, if that event is the job's terminal status (its
    write's own copy, ``ttsq.events``): a waiter answers from it without reading the job again.
    None if anything else came last."""
    last = heard[-1] if heard else None
    if last is None or last.kind is not EventKind.STATUS or last.record is None:
        return None
    status = _known_status(last.status)
    if status is None or not status.terminal:
        return None
    try:
        return JobRecord.model_validate_json(last.record)
    except ValueError:
        return None


def _known_status(value: str | None) -> JobStatus | None:
    try:
        return JobStatus(value) if value is not None else None
    except ValueError:
        return None


class Subscription:
    """The events of one job for one waiter, in arrival order."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._queue: asyncio.Queue[JobEvent] = asyncio.Queue()

    def put(self, event: JobEvent) -> None:
        self._queue.put_nowait(event)

    async def next(self, timeout_s: float) -> JobEvent | None:
        """The next event, or None if none came within ``timeout_s``."""
        try:
            return await asyncio.wait_for(self._queue.get(), timeout_s)
        except TimeoutError:
            return None

    def drain(self) -> list[JobEvent]:
        """Events already waiting, so a burst costs one read of the job, not one per event."""
        events = []
        while not self._queue.empty():
            events.append(self._queue.get_nowait())
        return events


class EventHub:
    """Fans job events out from Redis to this process's waiters."""

    def __init__(self, settings: Settings) -> None:
        self._client = async_redis_client(
            settings, None, HUB_CONNECT_TIMEOUT_S, health_check_interval=HUB_HEALTH_CHECK_INTERVAL_S
        )
        self._waiters: dict[str, set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self, timeout_s: float = 5.0) -> None:
        """Start listening; returns once subscribed (or after ``timeout_s`` if Redis is down, in
        which case the hub keeps retrying and waiters fall back to their timeouts)."""
        self._task = asyncio.create_task(self._listen(), name="ttsq-event-hub")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.aclose()

    @property
    def waiters(self) -> int:
        return sum(len(subs) for subs in self._waiters.values())

    @contextlib.asynccontextmanager
    async def subscribe(self, job_id: str) -> AsyncIterator[Subscription]:
        """Events of ``job_id`` from now on; enter it *before* reading the job, so that no change
        between the read and the first wait is missed."""
        subscription = Subscription(job_id)
        self._waiters.setdefault(job_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            subs = self._waiters.get(job_id)
            if subs is not None:
                subs.discard(subscription)
                if not subs:
                    del self._waiters[job_id]

    async def _listen(self) -> None:
        while True:
            try:
                await self._pump()
            except (RedisError, OSError) as e:
                log.warning("job event listener lost Redis (%s); reconnecting", type(e).__name__)
            self._ready.clear()
            await asyncio.sleep(RECONNECT_DELAY_S)

    async def _pump(self) -> None:
        async with self._client.pubsub() as pubsub:
            await pubsub.psubscribe(JOB_EVENTS_PATTERN)
            self._ready.set()
            self._broadcast_resync()  # whatever happened while disconnected was not heard
            async for message in pubsub.listen():
                if message.get("type") == "pmessage":
                    self._dispatch(message["channel"], message["data"])

    def _dispatch(self, channel: bytes | str, data: bytes | str) -> None:
        name = channel.decode() if isinstance(channel, bytes) else channel
        job_id = name.rsplit(":", 1)[-1]
        subs = self._waiters.get(job_id)
        if not subs or name != job_events_channel(job_id):
            return
        event = parse_event(data)
        if event is not None:
            for subscription in subs:
                subscription.put(event)

    def _broadcast_resync(self) -> None:
        for subs in self._waiters.values():
            for subscription in subs:
                subscription.put(_RESYNC)
