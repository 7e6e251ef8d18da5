"""The service worker: its own Celery app, loading no model, for the maintenance tasks (the sweeper,
the cleanup, batches' finishing tasks: queue ``maintenance``), with the webhook dispatcher beside
its consumer.

Webhook deliveries are no Celery tasks: the dispatcher (``ttsq.webhook_dispatch``) runs on its own
event loop in a thread of this process, started and stopped with the worker (:class:`WebhookDispatch`),
and takes due events from Redis (``ttsq.webhook_schedule``). A receiver that keeps an attempt
waiting holds a coroutine, never one of the Celery threads, so a sweep or cleanup sent while
thousands of attempts wait starts at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import redis
from celery import Celery, bootsteps
from celery.worker import WorkController

import workers.log_context  # noqa: F401  (importing it connects the log signal handlers)
from ttsq.batches import BatchStore
from ttsq.broker import celery_config, transport_options
from ttsq.constants import CLEANUP_TASK, MAINTENANCE_QUEUE, SERVICE_UNACKED_PREFIX, SWEEP_TASK
from ttsq.jobs import JobStore
from ttsq.progress import SegmentStore
from ttsq.settings import Settings, get_settings
from ttsq.storage import ObjectStore
from ttsq.webhook_dispatch import Dispatcher, DispatcherThread
from ttsq.webhook_events import EventStore
from ttsq.webhook_schedule import DeliverySchedule

log = logging.getLogger(__name__)

_settings = get_settings()

# httpx logs every request at INFO with its URL, and a webhook URL may carry its receiver's secret
# token: only its warnings reach the log.
logging.getLogger("httpx").setLevel(logging.WARNING)

STOP_GRACE_S = 5.0
"""A stopping worker waits for the attempts in flight this long past their deadline."""


def service_config(settings: Settings) -> dict[str, Any]:
    """The shared configuration with this worker's own visibility timeout under keys of its own
    (see ``ttsq.broker.transport_options``)."""
    options = transport_options(settings.webhook_visibility_timeout_s, SERVICE_UNACKED_PREFIX)
    return {
        **celery_config(settings),
        "imports": ["workers.maintenance", "workers.batches"],
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


app = Celery("ttsq-webhooks", config_source=service_config(_settings), set_as_current=False)
app.conf.task_default_queue = MAINTENANCE_QUEUE


@dataclass(frozen=True)
class ServiceContext:
    settings: Settings
    jobs: JobStore
    segments: SegmentStore
    objects: ObjectStore
    batches: BatchStore


@lru_cache
def webhook_context() -> ServiceContext:
    client = redis.Redis.from_url(_settings.redis_url, socket_timeout=30, socket_connect_timeout=5)
    return ServiceContext(
        _settings,
        JobStore(client, _settings.job_ttl_s),
        SegmentStore(client, _settings.job_ttl_s),
        ObjectStore(_settings.s3),
        BatchStore(client, _settings.job_ttl_s),
    )


def make_dispatcher(settings: Settings) -> Dispatcher:
    """The dispatcher, with a Redis connection pool of its own (its store threads and claims)."""
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=30, socket_connect_timeout=5)
    jobs, batches = JobStore(client, settings.job_ttl_s), BatchStore(client, settings.job_ttl_s)
    events = EventStore(jobs, batches, SegmentStore(client, settings.job_ttl_s), ObjectStore(settings.s3))
    return Dispatcher(settings, DeliverySchedule(client), events)


class WebhookDispatch(bootsteps.StartStopStep):
    """Runs the webhook dispatcher while the worker runs: started with it, and stopped with it after
    the attempts in flight end (each within ``webhook_timeout_s``)."""

    def __init__(self, parent: WorkController, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.thread: DispatcherThread | None = None

    def start(self, parent: WorkController) -> None:
        self.thread = DispatcherThread(make_dispatcher(_settings)).start()

    def stop(self, parent: WorkController) -> None:
        if self.thread is not None:
            self.thread.stop(_settings.webhook_timeout_s + STOP_GRACE_S)
            self.thread = None

    def shutdown(self, parent: WorkController) -> None:
        self.stop(parent)


app.steps["worker"].add(WebhookDispatch)
