"""The periodic tasks of the service worker (``workers.service``: no model), as sent by ``ttsq beat``;
see :mod:`ttsq.maintenance` for what they do and why."""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Final

from redis.lock import Lock

from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import CLEANUP_TASK, SWEEP_TASK, maintenance_lock_key
from ttsq.errors import ServiceError
from ttsq.maintenance import TMP_PREFIX, Sweeper, cleanup
from workers.exclusive import exclusive
from workers.service import app, service_stores, settings

log = logging.getLogger(__name__)

TMP_RULE_ID: Final = "ttsq-tmp-parts"


@lru_cache
def sweeper() -> Sweeper:
    stores = service_stores()
    send = TaskPublisher(make_producer(settings), settings.queue)
    return Sweeper(stores, stores.lifecycle(send.finish_batch), send)


def _lock(task: str, ttl_s: float) -> Lock:
    """One run at a time across service workers (several beats, or a slow run overtaken)."""
    lock: Lock = service_stores().redis.lock(maintenance_lock_key(task), timeout=max(10, int(ttl_s)), blocking=False)
    return lock


@app.task(name=SWEEP_TASK, ignore_result=True)
def sweep() -> None:
    with exclusive(_lock("sweep", settings.sweep_interval_s * 5), "sweep") as mine:
        if not mine:
            return
        report = sweeper().sweep()
        if report.requeued or report.failed or report.batches.resent:
            log.warning(
                "sweep: %d re-queued, %d failed as stalled, %d batches' finishing tasks sent again",
                len(report.requeued), len(report.failed), len(report.batches.resent),
            )  # fmt: skip


@lru_cache
def _tmp_lifecycle_rule() -> bool:
    """Once per process: ask the store to expire ``tmp/`` itself too (a backstop if no cleanup
    runs); a store without lifecycle rules is left to the cleanup task alone."""
    days = max(1, math.ceil(settings.part_ttl_s / 86400))
    try:
        service_stores().objects.expire_prefix(TMP_RULE_ID, TMP_PREFIX, days)
    except ServiceError as e:
        log.info("the object store keeps no lifecycle rule for %s (%s); the cleanup task deletes it", TMP_PREFIX, e)
        return False
    return True


@app.task(name=CLEANUP_TASK, ignore_result=True)
def cleanup_store() -> None:
    with exclusive(_lock("cleanup", settings.cleanup_interval_s * 5), "cleanup") as mine:
        if not mine:
            return
        _tmp_lifecycle_rule()
        stores = service_stores()
        cleanup(stores.redis, stores.objects, settings.part_ttl_s)
