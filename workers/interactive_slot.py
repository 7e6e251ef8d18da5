"""A task slot for interactive work only, in every synthesis worker: same process, same model.

The worker's task threads (``--concurrency``) each hold one message; while all hold bulk segments,
an interactive message would wait for one of them to finish. This consumer bootstep (Celery's way
of adding consumers to a worker, ``celery.bootsteps``) takes interactive messages on a channel of
its own, prefetch 1, and runs them on a thread of its own, so one is always free for them; the task
threads keep taking interactive work too, whichever is free first.

Messages go through Celery's own machinery, as the task threads' do: the task strategy (events,
revocations, retries' ETAs, reserved requests), :class:`celery.worker.request.Request` (late
acknowledgement, ``task_reject_on_worker_lost``, failures) and a one-thread Celery pool; only the
pool and the prefetch count are the slot's own. So the leases (``workers.leases``), which renew the
reserved and active requests of the process, hold the slot's message as any other. On a lost
connection the consumer restarts every step, and this one takes a new channel on the new
connection; at shutdown it stops taking messages first, finishes the one it runs, then closes its
channel, which gives back a message it had taken and not started.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, cast

from celery import bootsteps
from celery.concurrency.thread import TaskPool
from celery.exceptions import TaskRevokedError
from celery.worker.consumer import Consumer
from kombu.common import QoS, ignore_errors

from ttsq.constants import interactive_queue
from ttsq.settings import get_settings

log = logging.getLogger(__name__)

SLOT_PREFETCH = 1
"""Messages the slot holds at once: the one it runs (more would wait behind it)."""


class _EagerQoS(QoS):
    """The channel's prefetch count, applied at once: a message with an ETA (a retry's countdown)
    raises it while it waits, so the slot can take the next message meanwhile. (The consumer's own
    count is applied by its loop, which knows nothing of this channel.)"""

    def increment_eventually(self, n: int = 1) -> int:
        value: int = super().increment_eventually(n)
        self.update()
        return value

    def decrement_eventually(self, n: int = 1) -> int:
        value: int = super().decrement_eventually(n)
        self.update()
        return value


class _SlotConsumer:
    """The worker's consumer as Celery's task strategy sees it, but for the slot: requests run on the
    slot's pool and count against the slot's channel. Everything else (host name, events, revoked
    ids, timer, error handlers) is the consumer's own."""

    def __init__(self, consumer: Consumer, pool: TaskPool, qos: QoS) -> None:
        self._consumer = consumer
        self.pool = pool
        self.qos = qos
        self.strategies: dict[str, Any] = {}
        self._maximum_prefetch_restored = True  # the prefetch reduction after a reconnect is the consumer's

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def on_task_request(self, request: Any) -> None:
        """What ``WorkController._process_task`` does, on the slot's pool."""
        with contextlib.suppress(TaskRevokedError):  # the request has dealt with its revoked message
            request.execute_using_pool(self.pool)

    def apply_eta_task(self, request: Any) -> None:
        """Celery's own, run on this object: a retry whose countdown ended runs in the slot."""
        Consumer.apply_eta_task(cast(Consumer, self), request)

    def create_task_handler(self) -> Callable[[Any], None]:
        """Celery's own message handler, with the slot's strategies."""
        handler: Callable[[Any], None] = Consumer.create_task_handler(cast(Consumer, self))
        return handler


class InteractiveSlot(bootsteps.StartStopStep):
    """Consumer bootstep: a consumer of the interactive queue on its own channel and thread."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Consumer, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._pool: TaskPool | None = None
        self._consumer: Any = None
        self._channel: Any = None

    def include_if(self, parent: Consumer) -> bool:
        return get_settings().worker.interactive_slot

    def start(self, parent: Consumer) -> None:
        queue = interactive_queue(get_settings().queue)
        queues = parent.app.amqp.queues
        if queue not in queues.consume_from:
            log.info("interactive slot off: this worker does not take %s", queue)
            return
        if self._pool is None:
            self._pool = TaskPool(limit=1)
            self._pool.start()
        assert parent.connection is not None  # the Connection step started first
        self._channel = parent.connection.channel()
        qos = _EagerQoS(self._channel.basic_qos, SLOT_PREFETCH)
        qos.update()
        slot = _SlotConsumer(parent, self._pool, qos)
        slot.strategies.update({name: task.start_strategy(parent.app, slot) for name, task in parent.app.tasks.items()})
        self._consumer = parent.app.amqp.TaskConsumer(
            self._channel, queues=[queues[queue]], on_decode_error=parent.on_decode_error
        )
        self._consumer.on_message = slot.create_task_handler()
        self._consumer.consume()
        log.info("interactive slot consuming %s", queue)

    def stop(self, parent: Consumer) -> None:
        """Take no more messages (a restart after a lost connection, or the start of a shutdown);
        the channel stays open, for the running task's acknowledgement."""
        if self._consumer is not None:
            ignore_errors(cast(Any, parent), self._consumer.cancel)
            self._consumer = None

    def shutdown(self, parent: Consumer) -> None:
        """Finish the running task, then close the channel (giving back a message not started)."""
        self.stop(parent)
        if self._pool is not None:
            self._pool.stop()
            self._pool = None
        if self._channel is not None:
            ignore_errors(cast(Any, parent), self._channel.close)
            self._channel = None
