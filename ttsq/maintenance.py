"""Upkeep: jobs that never get stuck, and objects that do not outlive their jobs.

**Sweeper.** Every step of a job travels as a message that stays in Redis until the step is done:
in a queue while it waits, in kombu's ``unacked`` hash while a worker holds it (tasks acknowledge
late, and a step sends its follow-up before it is acknowledged). A job that is queued or running
while no message anywhere names it and no task claims any of its steps has lost its work: a Redis
crash that dropped a write, a message acknowledged after a failed retry. The service worker that
holds the sweeping lease (``workers.sweeping``) sweeps every ``sweep_interval_s`` (2 s): it lists the
active jobs older than ``sweep_grace_s`` (5 s), reads every queue and held message once, and takes a
job for stuck when it is missing at two looks at least :data:`~ttsq.constants.SWEEP_CONFIRM_S`
apart (a message moving from a queue to a worker is briefly in neither) and no step of it is claimed.
A stuck job's missing work is queued again, as its record says it must exist: its entry task if it
was never planned, its unfinished segments, or its assembly. Every step is safe to repeat. After
``max_requeues`` it is failed as ``stalled``. A re-queue is counted in a write fenced by the sweeping
lease (``ttsq.leader``), so a sweeper frozen past its lease never spends a job's budget on what it saw
before. Each sweep also sends the finishing task of a batch again when its items are all finished
but that task was lost (:mod:`ttsq.batch_sweep`).

**Cleanup.** Objects of jobs whose records expired are deleted (their keys wait in a sorted set
scored by expiry), and temporary parts under ``tmp/`` older than the part TTL (a job that died
mid-way) too. ``ttsq beat`` sends it every ``cleanup_interval_s``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, cast

import redis

from ttsq.batch_sweep import BatchSweeper, BatchSweepReport
from ttsq.broker import TaskPublisher, ids_in_messages, synthesis_queues
from ttsq.constants import OBJECT_EXPIRY_KEY, SWEEP_CONFIRM_S, SWEEP_SUSPECTS_KEY
from ttsq.errors import ServiceError, Stalled
from ttsq.job_record import JobError, JobRecord, JobStatus
from ttsq.leader import Fence
from ttsq.lifecycle import Lifecycle, fail_job
from ttsq.storage import ObjectStore
from ttsq.stores import Stores

log = logging.getLogger(__name__)

"""Hash: job id → when a sweep first found no message naming it."""

UNACKED_KEY: Final = "unacked"
"""kombu's hash of messages held by synthesis workers (``ttsq.broker.transport_options``)."""

TMP_PREFIX: Final = "tmp/"


@dataclass
class SweepReport:
    looked_at: int = 0
    suspected: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    batches: BatchSweepReport = field(default_factory=BatchSweepReport)


class Sweeper:
    def __init__(self, stores: Stores, lc: Lifecycle, send: TaskPublisher) -> None:
        settings = self._settings = stores.settings
        self._redis = stores.redis
        self._jobs = stores.jobs
        self._segments = stores.segments
        self._lifecycle = lc
        self._send = send
        self._batches = BatchSweeper(stores.redis, stores.batches, send.finish_batch, settings.sweep_grace_s)

    def sweep(self, now: float | None = None, fence: Fence | None = None) -> SweepReport:
        """One look; with ``fence`` (the sweeping lease's term) every re-queue is counted only while
        that term holds, and :class:`~ttsq.leader.LeaseLost` ends the sweep otherwise."""
        now = time.time() if now is None else now
        report = SweepReport()
        self._sweep_jobs(now, report, fence)
        report.batches = self._batches.sweep(now)
        return report

    def _sweep_jobs(self, now: float, report: SweepReport, fence: Fence | None) -> None:
        candidates = self._jobs.active_ids(created_before=now - self._settings.sweep_grace_s)
        if not candidates:
            self._redis.delete(SWEEP_SUSPECTS_KEY)
            return
        present = ids_in_messages(self._redis, synthesis_queues(self._redis, self._settings.queue), UNACKED_KEY)
        suspects = {
            k.decode(): float(v) for k, v in cast(dict[bytes, bytes], self._redis.hgetall(SWEEP_SUSPECTS_KEY)).items()
        }
        for job_id in candidates:
            report.looked_at += 1
            if job_id in present:
                continue
            first_seen = suspects.get(job_id)
            if first_seen is None or now - first_seen < SWEEP_CONFIRM_S:
                self._redis.hsetnx(SWEEP_SUSPECTS_KEY, job_id, now)
                report.suspected.append(job_id)
                continue
            self._redis.hdel(SWEEP_SUSPECTS_KEY, job_id)
            self._recover(job_id, report, now, fence)
        gone = set(suspects) - set(candidates) | (set(suspects) & present)
        if gone:
            self._redis.hdel(SWEEP_SUSPECTS_KEY, *gone)

    def _recover(self, job_id: str, report: SweepReport, now: float, fence: Fence | None) -> None:
        try:
            record = self._jobs.get(job_id)
        except ServiceError:
            self._jobs.forget_active(job_id)  # its record expired
            return
        if record.status.terminal:
            self._jobs.forget_active(job_id, record.tenant)
            return
        if self._jobs.claims_held(record):
            # A step's claim outlived its task (Redis went down before it could be released, and
            # came back with it): a re-queued step would only skip. It expires within the step
            # lease; until then the job stays suspected, and no re-queue is spent.
            report.suspected.append(job_id)
            self._redis.hsetnx(SWEEP_SUSPECTS_KEY, job_id, now)
            return
        # Every vanishing is counted first, in the write the sweeping lease fences: a sweeper that lost
        # its lease neither re-queues nor fails a job on what it saw before.
        counted = self._jobs.update_by(job_id, (record.status,), lambda r: {"requeues": r.requeues + 1}, fence)
        if counted is None:  # it moved on meanwhile
            return
        if counted.requeues > self._settings.max_requeues:
            message = f"the job's work vanished {counted.requeues} times (worker or Redis failures)"
            fail_job(job_id, JobError(code=Stalled.code, message=message), self._lifecycle)
            log.warning("job %s failed: stalled after %d re-queues", job_id, counted.requeues - 1)
            report.failed.append(job_id)
            return
        what = self._requeue(record)
        log.warning("job %s had no work in any queue: re-queued %s", job_id, what)
        report.requeued.append(job_id)

    def _requeue(self, record: JobRecord) -> str:
        """Send the job's missing work again: entry, unfinished segments, or assembly."""
        job_id, level, total = record.id, record.priority, record.progress.segments_total
        if record.status is JobStatus.QUEUED or total is None or self._segments.segment(job_id, 0) is None:
            self._send.entry(job_id, level)
            return "its entry task"
        done = self._segments.done_indexes(job_id)
        missing = [index for index in range(total) if index not in done]
        if not missing:
            self._send.assembly(job_id, level)
            return "its assembly"
        self._send.segments(job_id, missing, level)
        return f"{len(missing)} segments"


@dataclass
class CleanupReport:
    expired_objects: int = 0
    stale_parts: int = 0


def cleanup(client: redis.Redis, objects: ObjectStore, part_ttl_s: int, now: float | None = None) -> CleanupReport:
    """Delete objects whose jobs expired and temporary parts older than ``part_ttl_s``."""
    now = time.time() if now is None else now
    report = CleanupReport()
    while True:
        due = [k.decode() for k in cast(list[bytes], client.zrangebyscore(OBJECT_EXPIRY_KEY, "-inf", now, 0, 1000))]
        if not due:
            break
        objects.delete_many(due)
        client.zrem(OBJECT_EXPIRY_KEY, *due)
        report.expired_objects += len(due)
    cutoff = datetime.fromtimestamp(now - part_ttl_s, UTC)
    stale = [key for key, modified in objects.list_dated(TMP_PREFIX) if modified < cutoff]
    if stale:
        objects.delete_many(stale)
    report.stale_parts = len(stale)
    if report.expired_objects or report.stale_parts:
        log.info("cleanup: %d expired objects, %d stale parts deleted", report.expired_objects, report.stale_parts)
    return report
