"""Admitting a job: the queue must not be too far behind, the tenant's limits must allow it; then
the job is stored and queued, and nothing of it is left behind if any step refuses.

Global admission looks at the age of the oldest task waiting for the job's class (interactive, or
bulk entry and segment tasks): past ``TTSQ_ADMISSION_MAX_AGE_*_S`` the queue is already behind by
that much, and a new job is refused with 503 and a ``Retry-After`` rather than growing it without
bound.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from typing import Final

import redis
from kombu.exceptions import (  # type: ignore[attr-defined]  # BatchPublishError: kombu 5.7, newer than its stubs
    BatchPublishError,
    OperationalError,
)

from api.metrics import oldest_age_s
from api.state import AppState
from ttsq.batches import BatchRecord
from ttsq.broker import entry_queue, segments_queue
from ttsq.constants import SYNTHESIZE_TASK
from ttsq.errors import QueueBehind, QueueUnavailable, StoreUnavailable
from ttsq.jobs import JobRecord, Priority
from ttsq.quotas import Charge, usage_day
from ttsq.tenants import Tenant

log = logging.getLogger(__name__)

PUBLISH_PIPELINE: Final = 1000
"""Redis commands sent in one round trip when a batch's entry tasks are queued (two per item: the
message and its ``task-sent`` event), so 10,000 items take 20 round trips instead of 20,000."""


def queue_age_s(state: AppState, priority: Priority) -> float:
    """Age of the oldest task waiting for work of ``priority`` (producers LPUSH: the tail is oldest)."""
    queues = {entry_queue(state.settings.queue, priority), segments_queue(state.settings.queue, priority)}
    tails = [state.redis.lindex(queue, -1) for queue in sorted(queues)]
    now = time.time()
    return max(oldest_age_s(tail, now) for tail in tails)


def check_queue(state: AppState, priority: Priority) -> None:
    settings = state.settings
    limit = (
        settings.admission_max_age_interactive_s
        if priority is Priority.INTERACTIVE
        else settings.admission_max_age_bulk_s
    )
    age = queue_age_s(state, priority)
    if age > limit:
        message = f"the {priority.value} queue is {age:.0f} s behind (limit {limit:.0f} s); retry later"
        raise QueueBehind(message, max(1, math.ceil(min(age - limit, 60))))


@contextlib.contextmanager
def _admitted(state: AppState, tenant: Tenant, records: list[JobRecord], priority: Priority) -> Iterator[None]:
    """Check the queue and admit ``records`` at once against the tenant's limits (charging their
    sum), then run the block; if the block fails, the admission is given back."""
    charge = Charge(sum(r.characters for r in records), sum(r.reserved_audio_ms for r in records))
    ids = [record.id for record in records]
    created_at = records[0].created_at
    try:
        check_queue(state, priority)
        state.quotas.admit_many(tenant.id, ids, charge, tenant.limits, created_at)
    except redis.RedisError as e:
        raise StoreUnavailable(f"job store unavailable: {e}") from e
    try:
        yield
    except BaseException:
        try:
            state.quotas.release_many(tenant.id, ids, charge, usage_day(created_at))
        except redis.RedisError:  # Redis is the outage: nothing was stored
            log.warning("job %s…: could not release its admission", ids[0])
        raise


def admit_and_submit(state: AppState, tenant: Tenant, record: JobRecord, text: str) -> None:
    """Check the queue and the tenant's limits, charge the tenant, store the job and queue it."""
    with _admitted(state, tenant, [record], record.priority):
        _store_and_queue(state, record, text)


def _store_and_queue(state: AppState, record: JobRecord, text: str) -> None:
    try:
        state.jobs.create(record, text)
    except redis.RedisError as e:
        raise StoreUnavailable(f"job store unavailable: {e}") from e
    queue = entry_queue(state.settings.queue, record.priority)
    try:
        state.producer.send_task(SYNTHESIZE_TASK, args=[record.id], task_id=record.id, queue=queue)
    except (OperationalError, redis.RedisError) as e:
        try:
            state.jobs.delete(record)
        except redis.RedisError:
            # Stored, and now impossible to take back: the job is accepted (the sweeper queues a
            # job that no message names), so the client gets 202, not a 503 whose retry would
            # make a second job.
            log.warning("job %s: stored but not queued (%s); the sweeper will queue it", record.id, e)
        else:
            raise QueueUnavailable(f"job queue unavailable: {e}") from e
    state.metrics.submitted.labels(record.voice, record.priority.value).inc()
    log.info(
        "job %s queued: tenant=%s voice=%s format=%s chars=%d priority=%s",
        record.id, record.tenant, record.voice, record.format, record.characters, record.priority.value,
    )  # fmt: skip


def admit_and_submit_batch(
    state: AppState, tenant: Tenant, batch: BatchRecord, items: list[tuple[JobRecord, str]]
) -> None:
    """Admit a batch whole (its items' characters and estimated audio in one charge, each item
    counting against the active-jobs limit) or refuse it whole; then store and queue every item.
    If the store or the queue fails part way, everything is removed again: items already queued
    find no record and are dropped by the worker."""
    with _admitted(state, tenant, [record for record, _ in items], Priority.BULK):
        _store_and_queue_batch(state, batch, items)


def _store_and_queue_batch(state: AppState, batch: BatchRecord, items: list[tuple[JobRecord, str]]) -> None:
    try:
        state.batches.create(batch, [record.id for record, _ in items])
        state.jobs.create_many(items)
    except redis.RedisError as e:
        _forget_batch(state, batch, items)
        raise StoreUnavailable(f"job store unavailable: {e}") from e
    queue = entry_queue(state.settings.queue, Priority.BULK)
    try:
        # kombu's publish batch pipelines the sends through one producer; a failed flush raises
        # BatchPublishError (some chunks may be queued: they find no record once it is forgotten).
        with state.producer.producer_or_acquire() as producer, producer.batch(PUBLISH_PIPELINE):
            for record, _ in items:
                state.producer.send_task(
                    SYNTHESIZE_TASK, args=[record.id], task_id=record.id, queue=queue, producer=producer
                )
    except (OperationalError, BatchPublishError, redis.RedisError) as e:
        _forget_batch(state, batch, items)
        raise QueueUnavailable(f"job queue unavailable: {e}") from e
    for record, _ in items:
        state.metrics.submitted.labels(record.voice, record.priority.value).inc()
    log.info("batch %s queued: tenant=%s items=%d chars=%d", batch.id, batch.tenant, batch.total, batch.characters)


def _forget_batch(state: AppState, batch: BatchRecord, items: list[tuple[JobRecord, str]]) -> None:
    try:
        for record, _ in items:
            state.jobs.delete(record)
        state.batches.delete(batch)
    except redis.RedisError:
        log.warning("batch %s: could not remove what was stored of it", batch.id)
