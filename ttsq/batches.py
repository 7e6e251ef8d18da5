"""Batches: many jobs submitted, admitted, followed and canceled as one.

A batch is a JSON record under ``ttsq:batch:<id>``, the list of its item job ids in item order
(``:items``) and a hash of counters (``:counts``), all with the job TTL. Each item is an ordinary
job with ``batch_id`` and ``ref`` set. When an item reaches its terminal status, the same
transaction moves the counters (``JobStore._write``), so they are exact whatever is delivered
twice; the write that finishes the last item tells its caller, which sends ``ttsq.finish_batch``:
:func:`finish_batch` writes the manifest to the object store and marks the batch finished (that
write queues the batch's webhook event, if it has a receiver). The same task then makes the bundles
the batch asked for (:mod:`ttsq.bundling`); the webhook does not wait for them.
Until its manifest is written and its bundles settled, the batch is listed in
``ttsq:batches:active``, where the sweeper finds a batch whose finishing task was lost
(:mod:`ttsq.batch_sweep`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, cast

import redis
from pydantic import BaseModel
from redis.lock import Lock

from ttsq.batch_bundles import BundleKind, BundleState, BundleStatus
from ttsq.constants import (
    ACTIVE_BATCHES_KEY,
    OBJECT_EXPIRY_KEY,
    batch_claim_key,
    batch_counts_key,
    batch_items_key,
    batch_key,
    batch_manifest_key,
    tenant_batches_key,
)
from ttsq.errors import BatchNotFound
from ttsq.job_record import JobRecord, JobStatus, WebhookDelivery, expiry_of, utcnow
from ttsq.job_store import JobStore, newest_page
from ttsq.storage import ObjectStore
from ttsq.webhook_schedule import EventKind, EventRef, lane_of, schedule_in


def new_batch_id() -> str:
    return str(uuid.uuid4())


class BatchStatus(StrEnum):
    """``running`` until every item is finished, then ``completed``; ``canceled`` once canceled."""

    RUNNING = "running"
    COMPLETED = "completed"
    CANCELED = "canceled"


BATCH_EVENTS: Final = {BatchStatus.COMPLETED: "batch.completed", BatchStatus.CANCELED: "batch.canceled"}
"""The webhook event announcing each way a batch ends."""

READ_CHUNK: Final = 500
"""Item records read per Redis call when a whole batch is walked (manifest, cancel)."""


class BatchRecord(BaseModel):
    """Everything ttsq keeps about a batch besides its items and counters."""

    id: str
    tenant: str
    status: BatchStatus = BatchStatus.RUNNING
    total: int
    """Number of items (jobs)."""
    characters: int
    """Characters of every item together."""
    created_at: datetime
    finished_at: datetime | None = None
    """When the manifest was written (every item finished)."""
    canceled_at: datetime | None = None
    manifest_key: str | None = None
    webhook_url: str | None = None
    webhook: WebhookDelivery | None = None
    """Set when the batch finishes, if it has a ``webhook_url``."""
    ttl_s: int | None = None
    """How long the batch (and each item) is kept after it finishes; None: ``TTSQ_JOB_TTL_S`` from creation."""
    title: str | None = None
    """The book's title, if the client gave one: the m4b bundle's title tag and its download name."""
    bundles: dict[BundleKind, BundleState] = {}
    """The bundles asked for (``pending`` from creation), each as the service worker settled it."""

    @property
    def settled(self) -> bool:
        """Whether nothing is left to do: the manifest written and no bundle pending."""
        pending = any(state.status is BundleStatus.PENDING for state in self.bundles.values())
        return self.manifest_key is not None and not pending


@dataclass(frozen=True)
class BatchCounts:
    """A batch's counters: items finished by status, and the work they account for."""

    total: int
    succeeded: int
    failed: int
    canceled: int
    chars_done: int
    segments_done: int

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.canceled


class BatchStore:
    """Batch records, item lists and counters in Redis, with the job TTL on every key."""

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s

    def create(self, record: BatchRecord, job_ids: list[str]) -> None:
        """Write the record, its item list and zeroed counters, and list it as its tenant's and as
        active (until its manifest is written)."""
        created = record.created_at.timestamp()
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(batch_key(record.id), record.model_dump_json(), ex=self._ttl_s)
            pipe.rpush(batch_items_key(record.id), *job_ids)
            pipe.expire(batch_items_key(record.id), self._ttl_s)
            pipe.hset(batch_counts_key(record.id), mapping={"total": record.total, "finished": 0})
            pipe.expire(batch_counts_key(record.id), self._ttl_s)
            pipe.zadd(tenant_batches_key(record.tenant), {record.id: created})
            pipe.zadd(ACTIVE_BATCHES_KEY, {record.id: created})
            pipe.execute()

    def delete(self, record: BatchRecord) -> None:
        """Remove a batch whose jobs were never queued."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(batch_key(record.id), batch_items_key(record.id), batch_counts_key(record.id))
            pipe.zrem(tenant_batches_key(record.tenant), record.id)
            pipe.zrem(ACTIVE_BATCHES_KEY, record.id)
            pipe.execute()

    def active_ids(self, created_before: float) -> list[str]:
        """Ids of batches without a manifest created before the given Unix time, oldest first."""
        raw = cast(list[bytes], self._redis.zrangebyscore(ACTIVE_BATCHES_KEY, "-inf", created_before))
        return [member.decode() for member in raw]

    def forget_active(self, batch_ids: list[str]) -> None:
        """Drop active-set entries of batches that are finished or whose record expired."""
        if batch_ids:
            self._redis.zrem(ACTIVE_BATCHES_KEY, *batch_ids)

    def finished_items(self, batch_ids: list[str]) -> list[int]:
        """How many items of each batch are finished (its ``finished`` counter), in one round trip."""
        with self._redis.pipeline(transaction=False) as pipe:
            for batch_id in batch_ids:
                pipe.hget(batch_counts_key(batch_id), "finished")
            return [int(value or 0) for value in pipe.execute()]

    def exists(self, batch_id: str) -> bool:
        return bool(self._redis.exists(batch_key(batch_id)))

    def get(self, batch_id: str) -> BatchRecord:
        raw = self._redis.get(batch_key(batch_id))
        if raw is None:
            raise BatchNotFound(batch_id)
        return BatchRecord.model_validate_json(raw)

    def many(self, batch_ids: list[str]) -> list[BatchRecord | None]:
        raws = self._redis.mget([batch_key(b) for b in batch_ids]) if batch_ids else []
        return [None if raw is None else BatchRecord.model_validate_json(raw) for raw in raws]

    def counts(self, batch_id: str) -> BatchCounts:
        raw = cast(dict[bytes, bytes], self._redis.hgetall(batch_counts_key(batch_id)))
        values = {k.decode(): int(v) for k, v in raw.items()}
        fields = ("total", "succeeded", "failed", "canceled", "chars_done", "segments_done")
        return BatchCounts(**{name: values.get(name, 0) for name in fields})

    def item_ids(self, batch_id: str, start: int, limit: int) -> list[str]:
        """Up to ``limit`` item job ids from item ``start`` on, in item order."""
        raw = cast(list[bytes], self._redis.lrange(batch_items_key(batch_id), start, start + limit - 1))
        return [member.decode() for member in raw]

    def all_items(self, batch_id: str, jobs: JobStore) -> Iterator[tuple[str, JobRecord | None]]:
        """Every item's job id and record (None once expired), in item order, read in chunks."""
        start = 0
        while ids := self.item_ids(batch_id, start, READ_CHUNK):
            yield from zip(ids, jobs.many(ids), strict=True)
            start += len(ids)

    def update(
        self,
        batch_id: str,
        allowed_from: tuple[BatchStatus, ...],
        changes_of: Callable[[BatchRecord], Mapping[str, Any]],
    ) -> BatchRecord | None:
        """Change the record atomically if its status is in ``allowed_from``; None otherwise. The
        write that settles it (its manifest, and its last pending bundle) takes it out of the active
        set too, and the one that sets its webhook queues that event for delivery
        (``ttsq.webhook_schedule``)."""
        key = batch_key(batch_id)
        outcome: list[BatchRecord | None] = [None]

        def apply(pipe: redis.client.Pipeline) -> None:
            raw = pipe.get(key)
            if raw is None:
                raise BatchNotFound(batch_id)
            record = BatchRecord.model_validate_json(raw)
            outcome[0] = None
            if record.status not in allowed_from:
                return
            updated = BatchRecord.model_validate({**record.model_dump(), **changes_of(record)})
            pipe.multi()
            pipe.set(key, updated.model_dump_json(), keepttl=True)
            if updated.settled:
                pipe.zrem(ACTIVE_BATCHES_KEY, batch_id)
            if updated.webhook is not None and record.webhook is None and updated.webhook_url:
                lane = lane_of(updated.tenant, updated.webhook_url)
                schedule_in(pipe, EventRef(EventKind.BATCH, batch_id), lane, utcnow().timestamp())
            outcome[0] = updated

        self._redis.transaction(apply, key)
        return outcome[0]

    def tenant_page(self, tenant: str, after: tuple[float, str] | None, limit: int) -> list[tuple[str, float]]:
        """A page of the tenant's batch ids with their creation times, newest first."""
        return newest_page(self._redis, tenant_batches_key(tenant), self._ttl_s, after, limit)

    def schedule_object_expiry(self, record: BatchRecord, key: str) -> None:
        """The cleanup task deletes the object (manifest, bundle) when the batch's records expire (its
        own lifetime counted from when it finished: now, for the manifest written as it finishes)."""
        expiry = expiry_of(record.created_at, record.finished_at, record.ttl_s, self._ttl_s)
        self._redis.zadd(OBJECT_EXPIRY_KEY, {key: expiry})

    def keep_until_its_lifetime_ends(self, record: BatchRecord) -> None:
        """A finished batch that asked for its own lifetime: its keys go then, not at the default."""
        if record.ttl_s is None:
            return
        expiry = math.ceil(expiry_of(record.created_at, record.finished_at, record.ttl_s, self._ttl_s))
        with self._redis.pipeline(transaction=True) as pipe:
            for key in (batch_key(record.id), batch_items_key(record.id), batch_counts_key(record.id)):
                pipe.expireat(key, expiry)
            pipe.execute()

    def claimed(self, batch_ids: list[str], step: str) -> list[bool]:
        """Whether each batch's ``step`` is claimed now (:meth:`step_lock`), in one round trip."""
        with self._redis.pipeline(transaction=False) as pipe:
            for batch_id in batch_ids:
                pipe.exists(batch_claim_key(batch_id, step))
            return [bool(found) for found in pipe.execute()]

    def step_lock(self, batch_id: str, step: str, ttl_s: int) -> Lock:
        """The lock one task holds while it runs one step of a batch (``finish``, ``webhook``); not
        thread-local, so the service worker's lease thread can renew it (``workers.leases``)."""
        key = batch_claim_key(batch_id, step)
        lock: Lock = self._redis.lock(key, timeout=ttl_s, blocking=False, thread_local=False)
        return lock


def manifest(record: BatchRecord, items: Iterator[tuple[str, JobRecord | None]]) -> dict[str, Any]:
    """The manifest: per item its ref, job id, status, object key, duration and error; and totals."""
    entries: list[dict[str, Any]] = []
    by_status = {status.value: 0 for status in JobStatus}
    audio_s = 0.0
    for index, (job_id, job) in enumerate(items):
        status = job.status.value if job is not None else "expired"
        by_status[status] = by_status.get(status, 0) + 1
        result = job.result if job is not None else None
        audio_s += result.duration_s if result is not None else 0.0
        entries.append(
            {
                "ref": job.ref if job is not None and job.ref is not None else str(index),
                "job_id": job_id,
                "status": status,
                "key": result.key if result is not None else None,
                "duration_s": result.duration_s if result is not None else None,
                "marks_key": result.marks_key if result is not None else None,
                "subtitles_key": result.subtitles_key if result is not None else None,
                "srt_key": result.srt_key if result is not None else None,
                "error": job.error.model_dump() if job is not None and job.error is not None else None,
            }
        )
    totals = {"items": len(entries), **{k: v for k, v in by_status.items() if v}, "audio_s": round(audio_s, 3)}
    totals["characters"] = record.characters
    return {
        "batch_id": record.id,
        "status": record.status.value if record.status is BatchStatus.CANCELED else BatchStatus.COMPLETED.value,
        "created_at": record.created_at.isoformat(),
        "totals": totals,
        "items": entries,
    }


def finish_batch(
    batch_id: str, batches: BatchStore, jobs: JobStore, objects: ObjectStore, attempt: str
) -> BatchRecord | None:
    """Write the manifest of a batch whose items are all finished and mark it finished (a running
    batch becomes ``completed``; a canceled one stays so). Returns the batch if this call finished
    it, None if it was finished already or still has unfinished items (nothing done).

    The manifest goes under ``attempt``'s own key, and only the first write of a manifest key into
    the record counts: a late duplicate (its service worker paused past the finish claim) writes its
    own manifest, loses, and deletes that one, never the winner's, and sends no second webhook."""
    record = batches.get(batch_id)
    if record.manifest_key is not None:
        return None
    counts = batches.counts(batch_id)
    if counts.finished < counts.total:
        return None
    body = manifest(record, batches.all_items(batch_id, jobs))
    key = batch_manifest_key(record.tenant, batch_id, attempt)
    body["finished_at"] = utcnow().isoformat()
    batches.schedule_object_expiry(record, key)
    objects.put(key, json.dumps(body, indent=1).encode(), "application/json")

    def changes(current: BatchRecord) -> dict[str, Any]:
        if current.manifest_key is not None:  # another attempt finished it meanwhile
            return {}
        status = current.status if current.status is BatchStatus.CANCELED else BatchStatus.COMPLETED
        hook = WebhookDelivery(event=BATCH_EVENTS[status]) if current.webhook_url else None
        return {"status": status, "finished_at": utcnow(), "manifest_key": key, "webhook": hook}

    finished = batches.update(batch_id, (BatchStatus.RUNNING, BatchStatus.CANCELED), changes)
    if finished is None or finished.manifest_key != key:
        objects.delete_many([key])
        return None
    batches.keep_until_its_lifetime_ends(finished)
    return finished


def cancel_batch(batch_id: str, batches: BatchStore, jobs: JobStore, cancel: Callable[[str], object]) -> BatchRecord:
    """Mark a running batch canceled and cancel each of its unfinished items with ``cancel``
    (finished items keep their audio); a finished batch is left as it is."""
    now = utcnow()
    canceled = batches.update(
        batch_id, (BatchStatus.RUNNING,), lambda _: {"status": BatchStatus.CANCELED, "canceled_at": now}
    )
    if canceled is None:
        return batches.get(batch_id)
    for job_id, job in list(batches.all_items(batch_id, jobs)):
        if job is not None and not job.status.terminal:
            cancel(job_id)
    return batches.get(batch_id)
