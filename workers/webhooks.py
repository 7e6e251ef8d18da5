"""Webhook deliveries in the service worker: no Celery tasks, but a dispatcher (``ttsq.webhook_dispatch``)
on its own event loop in a thread of the service worker, started and stopped with it
(:class:`WebhookDispatch`), taking due events from Redis (``ttsq.webhook_schedule``). A receiver that
keeps an attempt waiting holds a coroutine, never one of the Celery threads, so a sweep or cleanup sent
while thousands of attempts wait starts at once.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from celery import bootsteps
from celery.worker import WorkController

from ttsq.settings import Settings
from ttsq.stores import WORKER_SOCKET_TIMEOUT_S, Stores
from ttsq.webhook_dispatch import Dispatcher, DispatcherThread
from ttsq.webhook_events import EventStore
from ttsq.webhook_schedule import DeliverySchedule
from workers.worker_start import WORKER_SETTINGS

log = logging.getLogger(__name__)

# httpx logs every request at INFO with its URL, and a webhook URL may carry its receiver's secret
# token: only its warnings reach the log.
logging.getLogger("httpx").setLevel(logging.WARNING)

STOP_GRACE_S: Final = 5.0
"""A stopping worker waits for the attempts in flight this long past their deadline."""


def make_dispatcher(settings: Settings) -> Dispatcher:
    """The dispatcher, with stores (and a Redis connection pool) of its own: its store threads and
    claims never wait behind the Celery threads' calls."""
    stores = Stores.connect(settings, WORKER_SOCKET_TIMEOUT_S)
    events = EventStore(stores.jobs, stores.batches, stores.segments, stores.objects)
    return Dispatcher(settings, DeliverySchedule(stores.redis), events)


class WebhookDispatch(bootsteps.StartStopStep):
    """Runs the webhook dispatcher while the worker runs: started with it, and stopped with it after
    the attempts in flight end (each within ``webhook_timeout_s``)."""

    def __init__(self, parent: WorkController, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.thread: DispatcherThread | None = None

    def start(self, parent: WorkController) -> None:
        self.thread = DispatcherThread(make_dispatcher(WORKER_SETTINGS.get())).start()

    def stop(self, parent: WorkController) -> None:
        if self.thread is not None:
            self.thread.stop(WORKER_SETTINGS.get().webhook_timeout_s + STOP_GRACE_S)
            self.thread = None

    def shutdown(self, parent: WorkController) -> None:
        self.stop(parent)
