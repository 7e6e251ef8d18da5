"""The service worker's Celery app, a peer of the synthesis worker's (``workers.app``): it loads no
model and runs the maintenance tasks (the sweeper and the cleanup, sent by ``ttsq beat`` from this
app) and batches' finishing tasks, on queue ``maintenance``, with the webhook dispatcher beside its
consumer (``workers.webhooks``). Its task modules: ``workers.maintenance`` and ``workers.batches``.

Its held messages wait under kombu keys of their own, with their own visibility timeout
(``webhook_visibility_timeout_s``), so a long maintenance run is never handed to a second worker.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from celery import Celery

import workers.log_context  # noqa: F401  (importing it connects the log signal handlers)
from ttsq.broker import celery_config, transport_options
from ttsq.constants import CLEANUP_TASK, MAINTENANCE_QUEUE, SERVICE_UNACKED_PREFIX, SWEEP_TASK
from ttsq.settings import Settings, get_settings
from ttsq.stores import WORKER_SOCKET_TIMEOUT_S, Stores
from workers.webhooks import WebhookDispatch

log = logging.getLogger(__name__)

settings = get_settings()

TASK_MODULES = ["workers.maintenance", "workers.batches"]


def service_config(settings: Settings) -> dict[str, Any]:
    """The shared configuration with this worker's own visibility timeout under keys of its own
    (see ``ttsq.broker.transport_options``)."""
    options = transport_options(settings, settings.webhook_visibility_timeout_s, SERVICE_UNACKED_PREFIX)
    return {
        **celery_config(settings),
        "imports": TASK_MODULES,
        "broker_transport_options": options,
        "beat_schedule": beat_schedule(settings),
    }


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """What ``ttsq beat`` sends: the sweeper and the cleanup; a run that would start after its next
    one is due is dropped (``expires``) rather than piling up behind a stopped service worker."""
    every = {SWEEP_TASK: settings.sweep_interval_s, CLEANUP_TASK: settings.cleanup_interval_s}
    return {
        name: {"task": name, "schedule": interval, "options": {"queue": MAINTENANCE_QUEUE, "expires": interval}}
        for name, interval in every.items()
    }


app = Celery("ttsq-service", config_source=service_config(settings), set_as_current=False)
app.conf.task_default_queue = MAINTENANCE_QUEUE
app.steps["worker"].add(WebhookDispatch)


@lru_cache
def service_stores() -> Stores:
    """The stores of this process's tasks, built once."""
    return Stores.connect(settings, WORKER_SOCKET_TIMEOUT_S)
