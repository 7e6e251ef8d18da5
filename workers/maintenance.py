"""The periodic tasks of the service worker (``workers.service``: no model), as sent by ``ttsq beat``;
see :mod:`ttsq.maintenance` for what they do and why. Sweeps run in the service workers' own loop
(``workers.sweeping``), not here."""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Final

from redis.lock import Lock

from ttsq.constants import CLEANUP_TASK, SWEEP_TASK, maintenance_lock_key
from ttsq.errors import ServiceError
from ttsq.maintenance import TMP_PREFIX, cleanup
from workers.exclusive import exclusive
from workers.service import SERVICE, app

log = logging.getLogger(__name__)

TMP_RULE_ID: Final = "ttsq-tmp-parts"


def _lock(task: str) -> Lock:
    """One run at a time across service workers (several beats, or a slow run overtaken). It lives a
    step lease past its last renewal (``workers.service.ServiceProcess.leases``, every second while the
    run lasts), so a killed or frozen service worker holds up no later run for long."""
    key = maintenance_lock_key(task)
    process = SERVICE.get()
    lock: Lock = process.stores.redis.lock(
        key, timeout=process.settings.step_lease_s, blocking=False, thread_local=False
    )
    return lock


@app.task(name=SWEEP_TASK, ignore_result=True)
def sweep() -> None:
    """Kept for a beat of an earlier version, which still sends it during an upgrade: the leader of
    the sweep loop sweeps every few seconds anyway."""
    log.debug("a sweep task arrived; sweeps run in the sweep loop of the service worker leading it")


@lru_cache
def _tmp_lifecycle_rule() -> bool:
    """Once per process: ask the store to expire ``tmp/`` itself too (a backstop if no cleanup
    runs); a store without lifecycle rules is left to the cleanup task alone."""
    process = SERVICE.get()
    days = max(1, math.ceil(process.settings.part_ttl_s / 86400))
    try:
        process.stores.objects.expire_prefix(TMP_RULE_ID, TMP_PREFIX, days)
    except ServiceError as e:
        log.info("the object store keeps no lifecycle rule for %s (%s); the cleanup task deletes it", TMP_PREFIX, e)
        return False
    return True


@app.task(name=CLEANUP_TASK, ignore_result=True)
def cleanup_store() -> None:
    claim = _lock("cleanup")
    with exclusive(claim, "cleanup") as mine:
        if not mine:
            return
        process = SERVICE.get()
        with process.leases.holding(claim):
            _tmp_lifecycle_rule()
            stores = process.stores
            cleanup(stores.redis, stores.objects, process.settings.part_ttl_s)
