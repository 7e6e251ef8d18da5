"""Whether this synthesis worker can do the work now: checked before it consumes, and every few
seconds after, so that a worker with unusable settings takes no job that a healthy one could run.

What the worker needs and what it checks: its object store (``ObjectStore.check``, a HEAD of the
bucket, which missing, partial or wrong credentials and a missing bucket all fail; then
``ObjectStore.check_writes``, an empty object written under ``tmp/``, which keys that may read but
not write fail) and its engine (both batcher threads run). Redis needs no check of its own: it is
the broker, so a worker that cannot reach it (or is refused by it) takes no message anyway, and its
heartbeat lapses.

Only what is this worker's own makes it *unable*: a refusal (``StorageRefused``: the store says no
to these settings) or an engine that stopped. An outage (``StorageUnavailable``: no answer, 5xx,
throttling) is every worker's alike, so stopping would only move the wait elsewhere: the worker
stays able and its tasks retry with backoff as before (``workers.tasks``).

While unable the worker takes no message: its consumer cancels its queues (on the consumer's own
loop, as Celery's ``cancel_consumer`` does), the interactive slot pauses, a task that starts anyway
(a message taken just before) gives its message back, the heartbeat leaves (``/readyz``) and its
own ``/readyz`` answers 503. When the check passes again, it consumes its queues again, in their
first order. If every worker is unable, jobs wait in their queues and ``/readyz`` says no worker is
alive until one is fixed; none fails.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ttsq.constants import WORKER_CHECK_KEY_TEMPLATE
from ttsq.errors import StorageRefused, StorageUnavailable

if TYPE_CHECKING:
    from ttsq.storage import ObjectStore

log = logging.getLogger(__name__)

UNABLE_RECHECK_S: Final = 3.0
"""How often a worker that cannot do the work checks again (while it can, every
``TTSQ_WORKER__CHECK_INTERVAL_S``): it takes messages within this of being fixed. A check is two
requests through boto3, whose CPU every 3 s (a HEAD alone) cost a loaded worker's 8-client
throughput 10-20 %."""
NOT_CHECKED: Final = "not checked yet"
"""The reason before the first check: a worker takes nothing until it has checked."""

Check = Callable[[], str | None]
"""One round of checks: the reason this worker cannot do the work, or None when it can."""


def check_store(objects: ObjectStore, worker: str) -> None:
    """Raise a storage error unless the store answers ``worker``'s settings and takes its writes."""
    objects.check()
    objects.check_writes(WORKER_CHECK_KEY_TEMPLATE.format(worker=worker))


def store_and_engine(objects: ObjectStore, worker: str, engine_healthy: Callable[[], bool]) -> Check:
    """The worker's check: its engine runs and its store accepts its settings (an outage passes)."""

    def check() -> str | None:
        if not engine_healthy():
            return "the synthesis engine stopped (a batcher thread died)"
        try:
            check_store(objects, worker)
        except StorageRefused as e:
            return f"{e} (check this worker's TTSQ_S3__* settings)"
        except StorageUnavailable as e:  # every worker's outage: tasks retry it with backoff
            log.debug("fitness check: %s", e)
        return None

    return check


class Fitness:
    """This process's verdict, renewed by a thread every ``TTSQ_WORKER__CHECK_INTERVAL_S``;
    listeners hear each change (``True``: able again)."""

    def __init__(self) -> None:
        self._reason: str | None = NOT_CHECKED
        self._guard = threading.Lock()
        self._listeners: list[Callable[[bool], None]] = []
        self._check: Check | None = None
        self._interval_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def able(self) -> bool:
        return self._reason is None

    @property
    def reason(self) -> str | None:
        """Why this worker cannot do the work (logged; it holds no secret), or None."""
        return self._reason

    def listen(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)

    def check_now(self) -> bool:
        """Run the check at once (before consuming, or after a task met a refusal); True if able."""
        if self._check is None:
            return self.able
        try:
            reason = self._check()
        except Exception as e:  # a check that breaks must not stop the thread; it says why
            log.exception("fitness check failed")
            reason = f"the fitness check failed: {e!r}"
        self._set(reason)
        return reason is None

    def start(self, check: Check, interval_s: float) -> None:
        """Check at once, then every ``interval_s`` on a thread of its own."""
        self._check = check
        self._interval_s = interval_s
        self.check_now()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ttsq-fitness", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s if self.able else min(self._interval_s, UNABLE_RECHECK_S)):
            self.check_now()

    def _set(self, reason: str | None) -> None:
        with self._guard:
            before, self._reason = self._reason, reason
        if before == reason:
            return
        if reason is None:
            log.info("this worker can do the work: taking messages")
        else:
            log.error("this worker cannot do the work, so it takes no messages until it can: %s", reason)
        if (before is None) != (reason is None):
            for listener in self._listeners:
                listener(reason is None)


FITNESS: Final = Fitness()
"""This process's fitness: checked by the thread that ``workers.tasks`` starts, read by the tasks,
the interactive slot, the heartbeat and the probes (one per worker process, as ``metrics.PROBES``)."""


class ConsumerGate:
    """Stops and restarts the consumption of the worker's queues, on the consumer's own loop."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self._queues = list(consumer.app.amqp.queues.consume_from)
        """The queues as first consumed: their order is their priority (interactive first)."""

    def __call__(self, able: bool) -> None:
        """A listener of :class:`Fitness`: called from its thread, done by the consumer's loop."""
        self._consumer.call_soon(self.sync)

    def sync(self) -> None:
        """Consume the queues while :data:`FITNESS` is able, none while not. Call on the consumer's
        thread. It reads the verdict when it runs, so calls queued in any order end right."""
        tasks = self._consumer.task_consumer
        if FITNESS.able:
            for name in self._queues:  # in their first order
                if not tasks.consuming_from(name):
                    self._consumer.add_task_queue(name)
            return
        for name in self._queues:  # Celery's cancel_consumer: a restarted consumer keeps to it
            if tasks.consuming_from(name):
                self._consumer.cancel_task_queue(name)
