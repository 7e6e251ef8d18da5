"""A batch's finishing task, run by the service worker (``workers.service``: no model): see
:func:`ttsq.batches.finish_batch`, then :func:`ttsq.bundling.make_bundles`. It is sent by whichever
process wrote the terminal status of the batch's last item; a duplicate finds the claim held, or the
manifest written and the bundles settled, and does nothing. The write that finishes the batch queues
its webhook event (``ttsq.webhook_schedule``), so the webhook never waits for the bundles."""

from __future__ import annotations

import logging

import redis

from ttsq.batches import finish_batch
from ttsq.bundling import make_bundles
from ttsq.constants import FINISH_BATCH_TASK
from ttsq.errors import BatchNotFound
from workers.exclusive import exclusive
from workers.service import SERVICE, app
from workers.steps import new_attempt_id

log = logging.getLogger(__name__)


@app.task(
    name=FINISH_BATCH_TASK,
    ignore_result=True,
    autoretry_for=(redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError),  # read-only: a demoted master
    retry_backoff=2,
    retry_jitter=True,
)
def finish(batch_id: str) -> None:
    """Write the batch's manifest and mark it finished (its webhook event, if any, queued with it),
    then make the bundles it asked for."""
    process = SERVICE.get()
    stores = process.stores
    claim = stores.batches.step_lock(batch_id, "finish", process.settings.step_lease_s)
    with exclusive(claim, f"batch {batch_id}: finish") as mine:
        if not mine:
            return
        try:
            # The claim lives a step lease past its last renewal (every second while this runs), so
            # a killed or frozen service worker's batch is finished by another within seconds.
            with process.leases.holding(claim):
                attempt = new_attempt_id()  # the manifest's and the bundles' prefix: this attempt's own
                finished = finish_batch(batch_id, stores.batches, stores.jobs, stores.objects, attempt)
                if finished is not None:
                    log.info("batch %s %s: manifest %s", batch_id, finished.status.value, finished.manifest_key)
                make_bundles(batch_id, stores.batches, stores.jobs, stores.objects, attempt)
        except BatchNotFound:
            log.warning("batch %s has no record (expired); nothing to finish", batch_id)
            return
