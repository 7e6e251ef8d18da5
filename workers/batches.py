"""A batch's finishing task, run by the service worker (``workers.webhooks``' app: no model): see
:func:`ttsq.batches.finish_batch`. It is sent by whichever process wrote the terminal status of the
batch's last item; a duplicate finds the claim held, or the manifest written, and does nothing. The
write that finishes the batch queues its webhook event (``ttsq.webhook_schedule``)."""

from __future__ import annotations

import contextlib
import logging

import redis
from redis.exceptions import LockError

from ttsq.batches import finish_batch
from ttsq.constants import FINISH_BATCH_TASK
from ttsq.errors import BatchNotFound
from workers.steps import new_attempt_id
from workers.webhooks import _settings, app, webhook_context

log = logging.getLogger(__name__)

FINISH_LEASE_S = 600
"""How long the finish claim lives: writing the manifest of a 10,000-item batch takes seconds."""


@app.task(
    name=FINISH_BATCH_TASK,
    ignore_result=True,
    autoretry_for=(redis.ConnectionError, redis.TimeoutError),
    retry_backoff=2,
    retry_jitter=True,
    max_retries=_settings.task_max_retries,
)
def finish(batch_id: str) -> None:
    """Write the batch's manifest and mark it finished (its webhook event, if any, queued with it)."""
    ctx = webhook_context()
    lock = ctx.batches.step_lock(batch_id, "finish", FINISH_LEASE_S)
    if not lock.acquire():
        log.info("batch %s: already being finished; dropping this duplicate", batch_id)
        return
    try:
        finished = finish_batch(batch_id, ctx.batches, ctx.jobs, ctx.objects, new_attempt_id())
    except BatchNotFound:
        log.warning("batch %s has no record (expired); nothing to finish", batch_id)
        return
    finally:
        with contextlib.suppress(LockError):
            lock.release()
    if finished is None:
        return
    log.info("batch %s %s: manifest %s", batch_id, finished.status.value, finished.manifest_key)
