"""The job store in Redis.

A job is a JSON record (``ttsq.job_record``) under ``ttsq:job:<id>`` and its text under
``ttsq:job:<id>:text``, both with the job TTL. Status changes go through :meth:`JobStore.transition`,
a WATCH/MULTI read-modify-write that only moves a job from the statuses the caller allows, so a
redelivered or late task cannot resurrect a finished or canceled job; each change is announced on
the job's channel in the same transaction (:mod:`ttsq.events`). One step of a job (its entry, a
segment, its assembly) runs in one task at a time, under :meth:`JobStore.step_lock`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

import redis
from redis.lock import Lock

from ttsq import job_stats
from ttsq.constants import (
    ACTIVE_JOBS_KEY,
    OBJECT_EXPIRY_KEY,
    OBJECT_STEPS,
    batch_counts_key,
    job_claim_key,
    job_events_channel,
    job_key,
    job_step_started_at_key,
    job_step_starts_key,
    job_text_key,
    segment_step,
    tenant_active_key,
    tenant_jobs_key,
)
from ttsq.errors import JobNotFound
from ttsq.events import status_message
from ttsq.job_record import (
    JobRecord,
    JobStatus,
    expiry_of,
    utcnow,
)
from ttsq.leader import Fence
from ttsq.quotas import settle_in, usage_day
from ttsq.webhook_schedule import EventKind, EventRef, lane_of, schedule_in


@dataclass(frozen=True)
class StepStart:
    """A step's start as :meth:`JobStore.step_started_reading` recorded and read it."""

    runs: int
    """Started attempts of the step that have not ended, this one included."""
    record: JobRecord | None
    """The job's record (None: it has none, expired or deleted)."""
    text: str | None
    """The job's text (None if gone: a finished job's may be)."""


_SCHEDULE_WHILE_HELD = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
for i = 4, #ARGV do redis.call('ZADD', KEYS[2], ARGV[3], ARGV[i]) end
return 1
"""
"""Renews a step's claim (as redis-py's lock does) and schedules objects for cleanup, if the claim is
still the caller's; else does nothing."""


def _seconds_since(moment: datetime, now: datetime | None = None) -> float:
    return max(0.0, ((now or utcnow()) - moment).total_seconds())


_RUN_IF_UNCHANGED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local results = {}
local at = 3
for n = 1, tonumber(ARGV[2]) do
  local count = tonumber(ARGV[at])
  results[n] = redis.call(unpack(ARGV, at + 1, at + count))
  at = at + count + 1
end
return results
"""
"""Runs the commands flattened in ARGV (count, then each command's length and words) if KEYS[1]
still holds ARGV[1], and answers their replies; false if it does not. The service uses one Redis (no
cluster), so the keys the commands touch need not be declared."""

_SCRIPT_COMMANDS: Final = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


def _written(updated: JobRecord | None, results: list[Any], batch_position: int | None) -> JobRecord | None:
    """``updated`` as written, told whether its write finished its batch (``completes_batch``)."""
    if batch_position is not None and updated is not None:
        finished, total = results[batch_position], results[batch_position + 1]
        updated._completes_batch = total is not None and int(finished) == int(total)
    return updated


def _count_finish(pipe: redis.client.Pipeline, record: JobRecord) -> None:
    """Cluster figures of a job that just reached its terminal status (same transaction)."""
    job_stats.count_finished(pipe, record.status.value, record.error.code if record.error else None)
    if record.status is JobStatus.SUCCEEDED:
        latency = _seconds_since(record.created_at, record.finished_at)
        job_stats.observe(pipe, job_stats.JOB_LATENCY, record.priority.value, latency)
        if (record.progress.segments_total or 1) == 1:  # its only segment's audio is the result
            job_stats.observe(pipe, job_stats.FIRST_AUDIO, record.priority.value, latency)


def _settle(pipe: redis.client.Pipeline, record: JobRecord, ttl_s: int) -> None:
    """A job that just finished leaves the active sets, its day is charged the audio it delivered
    instead of its reservation, its object is scheduled for deletion when the job expires, and its
    webhook event, if it has one, is queued for delivery (``ttsq.webhook_schedule``)."""
    if record.webhook is not None and record.webhook_url:
        due = (record.finished_at or utcnow()).timestamp()
        schedule_in(pipe, EventRef(EventKind.JOB, record.id), lane_of(record.tenant, record.webhook_url), due)
    pipe.zrem(ACTIVE_JOBS_KEY, record.id)
    pipe.zrem(tenant_active_key(record.tenant), record.id)
    delivered_ms = round((record.progress.audio_s or 0) * 1000) if record.status is JobStatus.SUCCEEDED else 0
    settle_in(pipe, record.tenant, usage_day(record.created_at), record.voice, record.reserved_audio_ms, delivered_ms)
    expiry = expiry_of(record.created_at, record.finished_at, record.ttl_s, ttl_s)
    if record.result is not None:
        pipe.zadd(OBJECT_EXPIRY_KEY, dict.fromkeys(record.result.keys(), expiry))
    if record.ttl_s is not None:  # its own lifetime, from now
        pipe.expireat(job_key(record.id), math.ceil(expiry))
        pipe.expireat(job_text_key(record.id), math.ceil(expiry))


def _count_batch_item(pipe: redis.client.Pipeline, record: JobRecord) -> int:
    """A batch item just finished: move its batch's counters (same transaction, so each job counts
    once however often its last step is delivered). Returns the position of the ``finished`` count
    in the transaction's results; the next result is the batch's ``total``."""
    assert record.batch_id is not None
    key = batch_counts_key(record.batch_id)
    pipe.hincrby(key, record.status.value, 1)
    pipe.hincrby(key, "chars_done", record.characters)
    pipe.hincrby(key, "segments_done", record.progress.segments_done)
    position = len(pipe.command_stack)
    pipe.hincrby(key, "finished", 1)
    pipe.hget(key, "total")
    return position


def newest_page(
    client: redis.Redis, key: str, ttl_s: int, after: tuple[float, str] | None, limit: int
) -> list[tuple[str, float]]:
    """Up to ``limit`` members of a sorted set scored by creation time, newest first, after the
    ``(time, id)`` of the previous page's last one; members older than ``ttl_s`` are dropped."""
    client.zremrangebyscore(key, "-inf", f"({utcnow().timestamp() - ttl_s}")
    top: float | str = "+inf" if after is None else after[0]
    page: list[tuple[str, float]] = []
    offset = 0
    while len(page) < limit:
        raw = cast(
            list[tuple[bytes, float]],
            client.zrevrangebyscore(key, top, "-inf", start=offset, num=limit, withscores=True),
        )
        if not raw:
            break
        offset += len(raw)
        for member, score in raw:
            entry = (member.decode(), float(score))
            if after is None or entry[1] < after[0] or entry[0] < after[1]:
                page.append(entry)
    return page[:limit]


class JobStore:
    """Job records in Redis, with a TTL on every key."""

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._run_if_unchanged = client.register_script(_RUN_IF_UNCHANGED)
        self._schedule_while_held = client.register_script(_SCHEDULE_WHILE_HELD)

    def create(self, record: JobRecord, text: str) -> None:
        """Write record and text together, and list the job as active and as its tenant's; all or
        nothing. (The tenant's active set was joined at admission, ``ttsq.quotas``.)"""
        created = record.created_at.timestamp()
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(job_key(record.id), record.model_dump_json(), ex=self._ttl_s)
            pipe.set(job_text_key(record.id), text.encode("utf-8"), ex=self._ttl_s)
            pipe.zadd(ACTIVE_JOBS_KEY, {record.id: created})
            pipe.zadd(tenant_jobs_key(record.tenant), {record.id: created})
            pipe.execute()

    def create_many(self, records: list[tuple[JobRecord, str]], chunk: int = 500) -> None:
        """Write many jobs as :meth:`create` does, ``chunk`` per transaction (a batch's items)."""
        for start in range(0, len(records), chunk):
            with self._redis.pipeline(transaction=True) as pipe:
                for record, text in records[start : start + chunk]:
                    created = record.created_at.timestamp()
                    pipe.set(job_key(record.id), record.model_dump_json(), ex=self._ttl_s)
                    pipe.set(job_text_key(record.id), text.encode("utf-8"), ex=self._ttl_s)
                    pipe.zadd(ACTIVE_JOBS_KEY, {record.id: created})
                    pipe.zadd(tenant_jobs_key(record.tenant), {record.id: created})
                pipe.execute()

    def delete(self, record: JobRecord) -> None:
        """Remove a job that was never queued, with its index entries."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(job_key(record.id), job_text_key(record.id))
            pipe.zrem(ACTIVE_JOBS_KEY, record.id)
            pipe.zrem(tenant_jobs_key(record.tenant), record.id)
            pipe.execute()

    def active_ids(self, created_before: float) -> list[str]:
        """Ids of queued and running jobs created before the given Unix time, oldest first."""
        raw = cast(list[bytes], self._redis.zrangebyscore(ACTIVE_JOBS_KEY, "-inf", created_before))
        return [member.decode() for member in raw]

    def forget_active(self, job_id: str, tenant: str | None = None) -> None:
        """Drop an active-set entry whose record is gone (expired)."""
        self._redis.zrem(ACTIVE_JOBS_KEY, job_id)
        if tenant is not None:
            self._redis.zrem(tenant_active_key(tenant), job_id)

    def tenant_page(self, tenant: str, after: tuple[float, str] | None, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` of the tenant's job ids with their creation times, newest first, starting
        after the ``(time, id)`` of the last one of the previous page (Redis orders equal times by id,
        descending). Entries of expired jobs are dropped on the way."""
        return newest_page(self._redis, tenant_jobs_key(tenant), self._ttl_s, after, limit)

    def forget_object(self, *keys: str) -> None:
        """The objects are deleted already: the cleanup task need not."""
        self._redis.zrem(OBJECT_EXPIRY_KEY, *keys)

    def many(self, job_ids: list[str]) -> list[JobRecord | None]:
        raws = self._redis.mget([job_key(job_id) for job_id in job_ids]) if job_ids else []
        return [None if raw is None else JobRecord.model_validate_json(raw) for raw in raws]

    def exists(self, job_id: str) -> bool:
        return bool(self._redis.exists(job_key(job_id)))

    def get(self, job_id: str) -> JobRecord:
        raw = self._redis.get(job_key(job_id))
        if raw is None:
            raise JobNotFound(job_id)
        return _record_of(raw)

    def text(self, job_id: str) -> str:
        raw = self._redis.get(job_text_key(job_id))
        if raw is None:
            raise JobNotFound(job_id)
        return _text_of(raw)

    def get_with_text(self, job_id: str) -> tuple[JobRecord, str | None]:
        """The record and the text (None if gone: a finished job's may be) in one round trip: what
        a job's entry step reads first."""
        raw_record, raw_text = self._redis.mget([job_key(job_id), job_text_key(job_id)])
        if raw_record is None:
            raise JobNotFound(job_id)
        return _record_of(raw_record), None if raw_text is None else _text_of(raw_text)

    def transition(
        self, job_id: str, allowed_from: Collection[JobStatus], to: JobStatus, changes: Mapping[str, Any]
    ) -> JobRecord | None:
        """Move the job to ``to`` if its status is in ``allowed_from``, setting ``changes``.

        Returns the updated record, or ``None`` if the job was in another status (nothing written).
        """
        return self.transition_by(job_id, allowed_from, to, lambda _: changes)

    def transition_by(
        self,
        job_id: str,
        allowed_from: Collection[JobStatus],
        to: JobStatus,
        changes_of: Callable[[JobRecord], Mapping[str, Any]],
        known: JobRecord | None = None,
    ) -> JobRecord | None:
        """Like :meth:`transition`, with changes computed from the current record (e.g. to count
        attempts) inside the same atomic read-modify-write. ``known``: the record as the caller last
        read or wrote it; if the job is still stored exactly so, the write takes one round trip
        (else it reads the record and tries again as without it)."""
        return self._write(job_id, allowed_from, lambda record: {**changes_of(record), "status": to}, known=known)

    def update_by(
        self,
        job_id: str,
        allowed_from: Collection[JobStatus],
        changes_of: Callable[[JobRecord], Mapping[str, Any]],
        fence: Fence | None = None,
    ) -> JobRecord | None:
        """Change fields other than the status (e.g. webhook delivery), atomically, if the job's
        status is in ``allowed_from``; with ``fence``, only while its term holds (else
        :class:`~ttsq.leader.LeaseLost`), checked in the same transaction."""
        return self._write(job_id, allowed_from, changes_of, fence)

    def _write(
        self,
        job_id: str,
        allowed_from: Collection[JobStatus],
        changes_of: Callable[[JobRecord], Mapping[str, Any]],
        fence: Fence | None = None,
        known: JobRecord | None = None,
    ) -> JobRecord | None:
        if known is not None and known.stored is not None and fence is None and known.status in allowed_from:
            written = self._write_if_unchanged(known, known.stored, changes_of)
            if written is not None:
                return written
        key = job_key(job_id)
        outcome: list[JobRecord | None] = [None]
        batch_position: list[int | None] = [None]

        def apply(pipe: redis.client.Pipeline) -> None:
            if fence is not None:
                fence.check(pipe)
            raw = pipe.get(key)
            if raw is None:
                raise JobNotFound(job_id)
            record = JobRecord.model_validate_json(raw)
            if record.status not in allowed_from:
                outcome[0] = None
                batch_position[0] = None
                return
            updated = JobRecord.model_validate({**record.model_dump(), **changes_of(record)})
            pipe.multi()
            batch_position[0] = self._queue_write(pipe, record, updated)
            outcome[0] = updated

        watched = (key,) if fence is None else (key, fence.key)
        results = cast(list[Any], self._redis.transaction(apply, *watched))
        return _written(outcome[0], results, batch_position[0])

    def _queue_write(self, pipe: redis.client.Pipeline, record: JobRecord, updated: JobRecord) -> int | None:
        """Queue the commands that replace ``record`` with ``updated``: the record, its event, and
        for a job that just finished, the counts it settles. Returns where the batch's counts are
        in the results (``_count_batch_item``), if the job is a batch item that just finished."""
        payload = updated.model_dump_json()
        updated.as_stored(payload.encode())
        pipe.set(job_key(updated.id), payload, keepttl=True)
        carried = payload if updated.status.terminal else None
        pipe.publish(job_events_channel(updated.id), status_message(updated.status, carried))
        if not updated.status.terminal or record.status.terminal:
            return None
        _count_finish(pipe, updated)
        _settle(pipe, updated, self._ttl_s)
        return _count_batch_item(pipe, updated) if updated.batch_id is not None else None

    def _write_if_unchanged(
        self, known: JobRecord, stored: bytes, changes_of: Callable[[JobRecord], Mapping[str, Any]]
    ) -> JobRecord | None:
        """The write of :meth:`_write` in one script, which runs it only if the job is still stored
        as ``stored``: the record ``known`` that changes are computed from is then the current one,
        as a watched read would have found it. None if it changed (or the write has a script of its
        own to run, which a script cannot call): the caller then reads and writes as usual."""
        updated = JobRecord.model_validate({**known.model_dump(), **changes_of(known)})
        with self._redis.pipeline(transaction=True) as collected:  # only collects the commands
            position = self._queue_write(collected, known, updated)
            commands = [args for args, _options in collected.command_stack]
            collected.reset()
        if any(str(command[0]).upper() in _SCRIPT_COMMANDS for command in commands):
            return None
        flat: list[Any] = []
        for command in commands:
            flat += [len(command), *command]
        results = self._run_if_unchanged(keys=[job_key(known.id)], args=[stored, len(commands), *flat])
        if results is None:
            return None
        return _written(updated, cast(list[Any], results), position)

    def count_first_audio(self, record: JobRecord) -> None:
        """The job's first segment has audio: add its wait to the time-to-first-audio histogram."""
        with self._redis.pipeline(transaction=True) as pipe:
            job_stats.observe(pipe, job_stats.FIRST_AUDIO, record.priority.value, _seconds_since(record.created_at))
            pipe.execute()

    def claims_held(self, record: JobRecord) -> bool:
        """Whether any step of the job is claimed now (``step_lock``): its entry, assembly or one of
        its planned segments."""
        steps = [*OBJECT_STEPS, *(segment_step(n) for n in range(record.progress.segments_total or 0))]
        keys = [job_claim_key(record.id, step) for step in steps]
        return any(self._redis.exists(*keys[start : start + 1000]) for start in range(0, len(keys), 1000))

    def step_started(self, job_id: str, step: str, attempt: str) -> int:
        """Record that ``attempt`` started ``step``; returns how many started attempts of the step
        have not ended (this one included): those that did not end died with their worker."""
        with self._redis.pipeline(transaction=True) as pipe:
            self._count_start(pipe, job_id, step, attempt)
            return int(pipe.execute()[-1])

    def step_started_reading(self, job_id: str, step: str, attempt: str) -> StepStart:
        """:meth:`step_started`, reading the job's record and text in the same round trip: what a
        job's entry step reads first (a short answer waits on each trip before its model call)."""
        with self._redis.pipeline(transaction=True) as pipe:
            self._count_start(pipe, job_id, step, attempt)
            pipe.get(job_key(job_id))
            pipe.get(job_text_key(job_id))
            *_, started, raw_record, raw_text = pipe.execute()
        record = None if raw_record is None else _record_of(raw_record)
        return StepStart(int(started), record, None if raw_text is None else _text_of(raw_text))

    def _count_start(self, pipe: redis.client.Pipeline, job_id: str, step: str, attempt: str) -> None:
        key, started_at = job_step_starts_key(job_id, step), job_step_started_at_key(job_id, step)
        pipe.hset(started_at, attempt, time.time())
        pipe.expire(started_at, self._ttl_s)
        pipe.sadd(key, attempt)
        pipe.expire(key, self._ttl_s)
        pipe.scard(key)

    def step_ended(self, job_id: str, step: str, attempt: str) -> None:
        """``attempt`` ended (done, failed, retried later or skipped): it was no crash."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.srem(job_step_starts_key(job_id, step), attempt)
            pipe.hdel(job_step_started_at_key(job_id, step), attempt)
            pipe.execute()

    def take_died(self, job_id: str, step: str, attempt: str) -> dict[str, float]:
        """When each other unended run of ``step`` started, for the runs not taken before: the runs
        that died with their worker since the step last ran, for ``attempt`` (holding the step's
        claim) to report once. They stay counted among the step's starts (:meth:`step_started`)."""
        key = job_step_started_at_key(job_id, step)
        found = cast(dict[bytes, bytes], self._redis.hgetall(key))
        died = {name.decode(): float(at) for name, at in found.items() if name.decode() != attempt}
        if died:
            self._redis.hdel(key, *died)
        return died

    def step_attempts(self, job_id: str, step: str) -> set[str]:
        """The attempts of ``step`` that started and have not ended: the one asking, runs still going
        (a late duplicate), and those that died with their worker."""
        return {member.decode() for member in cast(set[bytes], self._redis.smembers(job_step_starts_key(job_id, step)))}

    def schedule_objects(self, record: JobRecord, keys: Collection[str]) -> None:
        """Objects a step is about to store: the cleanup task deletes them when the job expires, even
        if the step dies before its success write names them or before it can delete them itself."""
        if keys:
            self._redis.zadd(OBJECT_EXPIRY_KEY, dict.fromkeys(keys, self._objects_expire_at(record)))

    def schedule_objects_while_held(self, record: JobRecord, keys: Collection[str], claim: Lock) -> bool:
        """Renew ``claim`` and :meth:`schedule_objects` in one round trip (a short answer waits on it
        between its model call and its upload); False, with nothing done, if ``claim`` is no longer
        this run's (``workers.steps.StepRun.ensure_current`` then decides what happens)."""
        token = claim.local.token
        if token is None or claim.timeout is None:
            return False
        args = [token, int(claim.timeout * 1000), self._objects_expire_at(record), *keys]
        return bool(self._schedule_while_held(keys=[claim.name, OBJECT_EXPIRY_KEY], args=args))

    def _objects_expire_at(self, record: JobRecord) -> float:
        """When the cleanup task deletes the job's objects: when the job itself expires."""
        return record.created_at.timestamp() + self._ttl_s

    def step_lock(self, job_id: str, step: str, ttl_s: int) -> Lock:
        """The lock one task holds while it runs one step of a job (``entry``, ``segment:<n>``,
        ``assemble``), so a duplicate delivery never runs beside the original. It expires after
        ``ttl_s`` (the step lease, renewed while the step runs by ``workers.leases``), so a task
        redelivered after its worker died finds it free. Take it with ``acquire(blocking=False)``."""
        # Not thread-local: the worker's lease thread renews the claims its task threads hold.
        lock: Lock = self._redis.lock(job_claim_key(job_id, step), timeout=ttl_s, blocking=False, thread_local=False)
        return lock


def _record_of(raw: bytes | str) -> JobRecord:
    """A job's record as Redis answered it, remembering its JSON (``JobRecord.stored``)."""
    stored = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return JobRecord.model_validate_json(stored).as_stored(stored)


def _text_of(raw: bytes | str) -> str:
    """A job's text as Redis answered it."""
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
