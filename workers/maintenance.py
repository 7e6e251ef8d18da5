"""The periodic tasks, run by the service worker (``workers.webhooks``' app: no model) as sent by
``ttsq beat``; see :mod:`ttsq.maintenance` for what they do and why."""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import redis
from redis.exceptions import LockError

from ttsq.batches import BatchStore
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import CLEANUP_TASK, SWEEP_TASK, maintenance_lock_key
from ttsq.errors import ServiceError
from ttsq.jobs import JobStore
from ttsq.lifecycle import Lifecycle
from ttsq.maintenance import TMP_PREFIX, Sweeper, cleanup
from ttsq.parts import make_part_store
from ttsq.progress import SegmentStore
from ttsq.settings import get_settings
from ttsq.storage import ObjectStore
from workers.webhooks import app

log = logging.getLogger(__name__)

_settings = get_settings()

TMP_RULE_ID = "ttsq-tmp-parts"


@lru_cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(_settings.redis_url, socket_timeout=30, socket_connect_timeout=5)


@lru_cache
def _objects() -> ObjectStore:
    return ObjectStore(_settings.s3)


@lru_cache
def sweeper() -> Sweeper:
    client = _client()
    jobs = JobStore(client, _settings.job_ttl_s)
    segments = SegmentStore(client, _settings.job_ttl_s)
    parts = make_part_store(_settings, client, _objects())
    send = TaskPublisher(make_producer(_settings), _settings.queue)
    lifecycle = Lifecycle(jobs, segments, parts, _objects(), send.finish_batch)
    batches = BatchStore(client, _settings.job_ttl_s)
    return Sweeper(_settings, client, jobs, segments, lifecycle, send, batches)


def _alone(name: str, ttl_s: float) -> redis.lock.Lock:
    """One run at a time across service workers (several beats, or a slow run overtaken)."""
    lock: redis.lock.Lock = _client().lock(maintenance_lock_key(name), timeout=max(10, int(ttl_s)), blocking=False)
    return lock


@app.task(name=SWEEP_TASK, ignore_result=True)
def sweep() -> None:
    lock = _alone("sweep", _settings.sweep_interval_s * 5)
    if not lock.acquire():
        return
    try:
        report = sweeper().sweep()
        if report.requeued or report.failed or report.batches.resent:
            log.warning(
                "sweep: %d re-queued, %d failed as stalled, %d batches' finishing tasks sent again",
                len(report.requeued), len(report.failed), len(report.batches.resent),
            )  # fmt: skip
    finally:
        try:
            lock.release()
        except LockError:
            log.warning("sweep outlived its lock")


@lru_cache
def _tmp_lifecycle_rule() -> bool:
    """Once per process: ask the store to expire ``tmp/`` itself too (a backstop if no cleanup
    runs); a store without lifecycle rules is left to the cleanup task alone."""
    days = max(1, math.ceil(_settings.part_ttl_s / 86400))
    try:
        _objects().expire_prefix(TMP_RULE_ID, TMP_PREFIX, days)
    except ServiceError as e:
        log.info("the object store keeps no lifecycle rule for %s (%s); the cleanup task deletes it", TMP_PREFIX, e)
        return False
    return True


@app.task(name=CLEANUP_TASK, ignore_result=True)
def cleanup_store() -> None:
    lock = _alone("cleanup", _settings.cleanup_interval_s * 5)
    if not lock.acquire():
        return
    try:
        _tmp_lifecycle_rule()
        cleanup(_client(), _objects(), _settings.part_ttl_s)
    finally:
        try:
            lock.release()
        except LockError:
            log.warning("cleanup outlived its lock")
