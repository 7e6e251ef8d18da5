"""The service worker's Celery app, a peer of the synthesis worker's (``workers.app``): it loads no
model and runs the cleanup (sent by ``ttsq beat`` from this app) and batches' finishing tasks, on
queue ``maintenance``, with the webhook dispatcher (``workers.webhooks``) and the sweep loop
(``workers.sweeping``: one service worker sweeps at a time, by a lease) beside its consumer. Its task
modules: ``workers.maintenance`` and ``workers.batches``.

Its held messages wait under kombu keys of their own, with the synthesis workers' short visibility
timeout (``visibility_timeout_s``, 8 s): a lease keeper (``workers.leases``) renews them every second
from a thread of its own, with the batches' finish claims, so a long cleanup is never handed to a
second worker while this one lives, and a killed or frozen one's messages come back within seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery, bootsteps
from celery.utils.dispatch import Signal
from celery.worker import WorkController

from ttsq.broker import LazyConfig, celery_config, transport_options, unacked_index_key
from ttsq.celery_signals import Handler
from ttsq.constants import CLEANUP_TASK, MAINTENANCE_QUEUE, SERVICE_UNACKED_PREFIX
from ttsq.redis_clients import redis_client
from ttsq.settings import Settings, get_settings
from ttsq.stores import CONNECT_TIMEOUT_S, WORKER_SOCKET_TIMEOUT_S, Stores
from workers.leases import LeaseKeeper
from workers.process_scope import ProcessScope
from workers.sweeping import SweepLeadership
from workers.webhooks import WebhookDispatch
from workers.worker_start import WorkerStart

log = logging.getLogger(__name__)

TASK_MODULES = ["workers.maintenance", "workers.batches"]


def service_config(settings: Settings) -> dict[str, Any]:
    """The shared configuration with this worker's held messages under kombu keys of their own (see
    ``ttsq.broker.transport_options``), renewed by its own lease keeper (:attr:`ServiceProcess.leases`)."""
    options = transport_options(settings, settings.visibility_timeout_s, SERVICE_UNACKED_PREFIX)
    return {
        **celery_config(settings),
        "imports": TASK_MODULES,
        "task_default_queue": MAINTENANCE_QUEUE,
        "broker_transport_options": options,
        "beat_schedule": beat_schedule(settings),
    }


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """What ``ttsq beat`` sends: the cleanup (sweeps need no beat: ``workers.sweeping``); a run that
    would start after its next one is due is dropped (``expires``) rather than piling up behind a
    stopped service worker."""
    interval = settings.cleanup_interval_s
    options = {"queue": MAINTENANCE_QUEUE, "expires": interval}
    return {CLEANUP_TASK: {"task": CLEANUP_TASK, "schedule": interval, "options": options}}


app = Celery(
    "ttsq-service",
    config_source=LazyConfig(lambda: service_config(get_settings())),
    set_as_current=False,
    log="workers.log_context:ProcessLogging",
)


@dataclass(frozen=True)
class ServiceProcess:
    """What the service worker's tasks and threads share, built once as the worker is built."""

    settings: Settings
    stores: Stores
    """The stores of this process's tasks."""
    leases: LeaseKeeper
    """Renews this process's held messages and batches' finish claims (``workers.leases``), on a
    connection of its own so that a renewal never waits behind a task's calls."""

    @classmethod
    def build(cls, settings: Settings) -> ServiceProcess:
        client = redis_client(settings, 5, CONNECT_TIMEOUT_S)
        leases = LeaseKeeper(client, settings.step_lease_s, unacked_index_key(SERVICE_UNACKED_PREFIX))
        return cls(settings, Stores.connect(settings, WORKER_SOCKET_TIMEOUT_S), leases)


SERVICE: ProcessScope[ServiceProcess] = ProcessScope("the service worker's process")
"""This process's :class:`ServiceProcess`, once its start step built it."""


class HeldMessageLeases(bootsteps.StartStopStep):
    """Renews this worker's held messages and finish claims while the worker runs."""

    def start(self, parent: WorkController) -> None:
        SERVICE.get().leases.start()

    def stop(self, parent: WorkController) -> None:
        SERVICE.get().leases.stop()

    def shutdown(self, parent: WorkController) -> None:
        self.stop(parent)


class ServiceWorkerStart(WorkerStart):
    """The service worker's job id handlers, connected as it is built, and its
    :class:`ServiceProcess`, built then for its other steps and its tasks."""

    def handlers(self, settings: Settings) -> Sequence[tuple[Signal, Handler]]:
        SERVICE.start(lambda: ServiceProcess.build(settings))
        return ()


app.steps["worker"].update({ServiceWorkerStart, WebhookDispatch, SweepLeadership, HeldMessageLeases})
