"""How the API and the workers talk through Redis: the one Celery configuration, built from a
:class:`~ttsq.settings.Settings`, and the producer that sends tasks by name.

``celeryconfig.py`` (read by the ``celery`` command line), the worker app, the API, bench and tests
all take their configuration from :func:`celery_config`.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, cast
from urllib.parse import quote

import redis
from celery import Celery
from celery.signals import before_task_publish
from kombu.exceptions import OperationalError

from ttsq import broker_transport, tracing
from ttsq.celery_signals import connect_once
from ttsq.constants import (
    ASSEMBLE_TASK,
    FINISH_BATCH_TASK,
    MAINTENANCE_QUEUE,
    MODEL_QUEUE_INFIX,
    MODEL_QUEUES_KEY,
    SEGMENT_TASK,
    SYNTHESIZE_TASK,
    bulk_segments_queue,
    consumed_queues,
    interactive_queue,
    model_queue,
)
from ttsq.errors import QueueUnavailable
from ttsq.job_record import Priority
from ttsq.redis_clients import sentinel_kwargs
from ttsq.settings import Settings

ENQUEUED_AT_HEADER: Final = "ttsq_enqueued_at"
"""Message header: when the task was sent (Unix seconds), so the age of a queue's oldest task can be
read off the queue itself (``ttsq_queue_oldest_age_seconds``, the autoscaling signal)."""

BROKER_CONNECT_TIMEOUT_S = 2
"""A request that finds Redis down answers 503 within seconds instead of hanging."""


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings (lowercase names) for every ttsq process, each with its reason."""
    sentinel = settings.redis_sentinel.enabled
    return {
        "broker_url": broker_url(settings),
        # kombu's Redis transport (its Sentinel transport, with sentinels), except that a channel of a
        # closed connection fails as a lost connection (which Celery retries) instead of an
        # AttributeError (which stopped workers for good after a Redis restart), and that model queues
        # are asked for in voice-affinity order: see ttsq.broker_transport.
        "broker_transport": broker_transport.register_sentinel() if sentinel else broker_transport.register(),
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": BROKER_CONNECT_TIMEOUT_S,
        # Redis redelivers an unacknowledged task after the visibility timeout. It is short, so a dead
        # worker's steps come back within minutes; a live worker renews the messages it holds
        # (workers.leases), so a long step never runs twice.
        "broker_transport_options": transport_options(settings, settings.visibility_timeout_s),
        # Publishing fails fast rather than blocking an API request or a worker thread for long;
        # a worker step that cannot publish is retried by Celery as a whole (ttsq.errors.QueueUnavailable).
        "task_publish_retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.2},
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": settings.queue,
        # Acknowledge after the task ran, and give the message back if the worker process dies, so a
        # crash loses no job; one message in flight per worker slot keeps long jobs from starving others.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # Job state lives in the job record, never in Celery results: no result backend at all, and no
        # result writes per segment. Flower follows tasks through events, which stay on.
        "task_ignore_result": True,
        "task_time_limit": settings.task_time_limit_s,
        "task_soft_time_limit": max(1, settings.task_time_limit_s - 30),
        # Outages are retried by Celery itself (autoretry_for on the tasks), with these bounds.
        "task_annotations": {
            "*": {"max_retries": settings.task_max_retries, "retry_backoff_max": settings.task_retry_backoff_max_s}
        },
        # Only the worker imports the tasks (and with them the model runtime); Flower and the API don't.
        "imports": ["workers.tasks"],
        "worker_send_task_events": True,
        # No "task-sent" events: each was a second Redis publish per message (and a new client
        # object), a job's fan-out of 1,000 segments sent 1,000 of them while holding the worker's
        # interpreter lock (issue 34). Flower shows a task from its "received" on.
        "task_send_sent_event": False,
    }


def broker_url(settings: Settings) -> str:
    """``redis_url``, or with Sentinel every sentinel as kombu's ``sentinel://`` URL, joined by ``;``,
    each carrying the master's password and database (kombu takes them from whichever URL it is on)."""
    sentinel = settings.redis_sentinel
    if not sentinel.enabled:
        return settings.redis_url
    password = sentinel.password.get_secret_value() if sentinel.password is not None else ""
    auth = f":{quote(password, safe='')}@" if password else ""
    netlocs = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in sentinel.addresses)
    return ";".join(f"sentinel://{auth}{netloc}/{sentinel.db}" for netloc in netlocs)


def transport_options(settings: Settings, visibility_timeout_s: int, unacked_prefix: str = "unacked") -> dict[str, Any]:
    """kombu's Redis transport options; ``unacked_prefix`` names the keys where held messages wait
    (an app with another visibility timeout needs keys of its own: any consumer restores any
    message under its keys once it is older than its own timeout). With Sentinel, also the master's
    name and how to ask the sentinels."""
    sentinel = settings.redis_sentinel
    master = {"master_name": sentinel.master, "sentinel_kwargs": sentinel_kwargs(sentinel)} if sentinel.enabled else {}
    return master | {
        "visibility_timeout": visibility_timeout_s,
        "unacked_key": unacked_prefix,
        "unacked_index_key": unacked_index_key(unacked_prefix),
        "unacked_mutex_key": f"{unacked_prefix}_mutex",
        # Sweep for messages of dead workers every 10 s (kombu's default scans only every 100 s), or
        # eight times per timeout where it is shorter (every second at the default 8 s: one ZRANGE
        # under kombu's mutex per worker), so a message is back within a second of its expiry.
        "unacked_restore_interval": min(10, max(1, visibility_timeout_s // 8)),
        "unacked_restore_throttle": 1,
        # Take from the queues in the order the worker lists them (ttsq.constants.consumed_queues),
        # not round robin: interactive work is fetched first whenever a worker slot frees.
        "queue_order_strategy": "priority",
    }


def unacked_index_key(unacked_prefix: str) -> str:
    """kombu's sorted set of the held messages under ``unacked_prefix``, scored by when each was last
    taken or renewed (``workers.leases`` moves the scores of a live worker's messages)."""
    return f"{unacked_prefix}_index"


def entry_queue(queue: str, priority: Priority, model: str | None = None) -> str:
    """Queue of a job's entry task (and, without ``model``, of its assembly): an interactive job's
    goes to its model's interactive queue where ``model`` is given (voice affinity); a bulk job's
    entry plans it and needs no model, so it stays on ``queue``."""
    if priority is Priority.INTERACTIVE:
        return interactive_queue(queue) if model is None else model_queue(queue, model, interactive=True)
    return queue


def segments_queue(queue: str, priority: Priority, model: str | None = None) -> str:
    """Queue of a job's segment tasks: its model's queue of its class where ``model`` is given."""
    if model is not None:
        return model_queue(queue, model, interactive=priority is Priority.INTERACTIVE)
    return interactive_queue(queue) if priority is Priority.INTERACTIVE else bulk_segments_queue(queue)


def register_model_queues(client: redis.Redis, names: Iterable[str]) -> None:
    """Say that this worker reads these model queues (the sweeper looks there for waiting work)."""
    if names := list(names):
        client.sadd(MODEL_QUEUES_KEY, *names)


def synthesis_queues(client: redis.Redis, queue: str) -> list[str]:
    """The queues synthesis work of ``queue`` may wait in: the fixed ones and every model queue a
    worker reads. Work sent to a model queue no worker reads is not counted, so the sweeper sends it
    again to a fixed queue."""
    prefix = f"{queue}{MODEL_QUEUE_INFIX}"
    registered = cast(set[bytes], client.smembers(MODEL_QUEUES_KEY))
    models = sorted(name for name in (m.decode() for m in registered) if name.startswith(prefix))
    return [*consumed_queues(queue), *models]


class TaskPublisher:
    """Sends a job's tasks by name (so any process can, without importing the task module); a
    broker that refuses one raises :class:`QueueUnavailable`, an outage of the sending step."""

    def __init__(self, app: Celery, queue: str) -> None:
        self._app = app
        self._queue = queue

    def entry(self, job_id: str, priority: Priority, model: str | None = None) -> None:
        with _publishing():
            self._app.send_task(SYNTHESIZE_TASK, args=[job_id], queue=entry_queue(self._queue, priority, model))

    def segments(self, job_id: str, indexes: Iterable[int], priority: Priority, model: str | None = None) -> None:
        """One segment task for each index, on the queue of the job's class (and of its model: see
        :func:`segments_queue`)."""
        queue = segments_queue(self._queue, priority, model)
        with _publishing():
            for index in indexes:
                self._app.send_task(SEGMENT_TASK, args=[job_id, index], queue=queue)

    def assembly(self, job_id: str, priority: Priority) -> None:
        """The task that joins a job's parts."""
        with _publishing():
            self._app.send_task(ASSEMBLE_TASK, args=[job_id], queue=entry_queue(self._queue, priority))

    def finish_batch(self, batch_id: str) -> None:
        """The task that writes a batch's manifest once its last item finished (service worker)."""
        with _publishing():
            self._app.send_task(FINISH_BATCH_TASK, args=[batch_id], queue=MAINTENANCE_QUEUE)


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def ids_in_messages(client: redis.Redis, queues: Iterable[str], unacked_key: str) -> set[str]:
    """Every UUID (job and batch ids among them) in the messages waiting in ``queues`` and held
    under ``unacked_key``: a message names its arguments in plain text (``argsrepr``)."""
    found: set[str] = set()
    for queue in queues:
        for message in cast(list[bytes], client.lrange(queue, 0, -1)):
            found.update(m.decode() for m in _UUID.findall(message))
    for message in cast(list[bytes], client.hvals(unacked_key)):
        found.update(m.decode() for m in _UUID.findall(message))
    return found


@contextlib.contextmanager
def _publishing() -> Iterator[None]:
    try:
        yield
    except OperationalError as e:
        raise QueueUnavailable(f"broker did not take the task: {e}") from e


def make_producer(settings: Settings) -> Celery:
    """A Celery client that only sends tasks by name and broadcasts control commands; every task it
    sends is stamped with its send time."""
    connect_once([ENQUEUE_STAMP])
    return Celery("ttsq", config_source=celery_config(settings), set_as_current=False)


def _stamp_enqueue_time(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Every task any ttsq process sends carries its send time (a retry gets a new one) and, sent
    inside a span (a request's, a step's), that span's trace context: the task's step continues it."""
    if headers is not None:
        headers[ENQUEUED_AT_HEADER] = time.time()
        tracing.inject(headers)


ENQUEUE_STAMP: Final = (before_task_publish, _stamp_enqueue_time)
"""Connected by every process that sends tasks, as it starts (:func:`make_producer`, the workers'
start steps)."""


class LazyConfig(Mapping[str, Any]):
    """A Celery configuration built at its first read (when the app is configured, as its process
    starts), not when the module that makes the app is imported: importing reads no setting."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build = build
        self._values: dict[str, Any] | None = None

    @property
    def _config(self) -> dict[str, Any]:
        if self._values is None:
            self._values = self._build()
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._config[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._config)

    def __len__(self) -> int:
        return len(self._config)
