"""A task slot for interactive work only, in every synthesis worker: same process, same model.

The worker's task threads (``--concurrency``) each hold one message; while all hold bulk segments,
an interactive message would wait for one of them to finish. This consumer bootstep (Celery's way
of adding consumers to a worker, ``celery.bootsteps``) takes interactive messages, prefetch 1, and
runs them on a thread of its own, so one is always free for them; the task threads keep taking
interactive work too, whichever is free first.

The slot has a broker connection and a drain thread of its own. On the consumer's connection its
channel joined the consumer's poller, whose wait on the slot's blocking read (BRPOP, one second)
held back the consumer's next message after each acknowledgement: bulk throughput fell to 0.53x.
Its own drain thread reconnects on a lost connection as the consumer does (a Redis restart).

Messages go through Celery's own machinery, as the task threads' do: the task strategy (events,
revocations, retries' ETAs, reserved requests), :class:`celery.worker.request.Request` (late
acknowledgement, ``task_reject_on_worker_lost``, failures) and a one-thread Celery pool; only the
pool, the timer of ETAs, the prefetch count and the making of acknowledgements are the slot's own
(Celery's consumer queues them for the worker's main loop; until that loop came round, the slot, its
one message unacknowledged, took no next one: up to a second). So the leases
(``workers.leases``), which renew the reserved and active requests of the process, hold the slot's
message as any other. At shutdown the slot stops taking messages first, finishes the one it runs
(which acknowledges on the slot's still open connection), then closes its connection, which gives
back a message it had taken and not started.

From the moment the slot hands a message to its thread until the task ends, the engine's interactive
lane counts it as coming (``DynamicBatcher.expect``): the bulk batcher starts no call and, with
``TTSQ_WORKER__PREEMPT_BULK``, stops the one running, so the task's own reading and planning have
the cores too, not only its inference call.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, cast

from celery import bootsteps
from celery.concurrency.thread import TaskPool
from celery.exceptions import TaskRevokedError
from celery.utils.timer2 import Timer
from celery.worker.consumer import Consumer
from kombu import Connection
from kombu.common import QoS, ignore_errors
from kombu.exceptions import OperationalError

from ttsq.constants import INTERACTIVE_QUEUE_SUFFIX, interactive_queue, is_model_queue
from workers.fitness import FITNESS
from workers.synthesis_process import SYNTHESIS
from workers.worker_start import WORKER_SETTINGS

log = logging.getLogger(__name__)

SLOT_PREFETCH: Final = 1
"""Messages the slot holds at once: the one it runs (more would wait behind it)."""

DRAIN_TIMEOUT_S: Final = 1.0
"""Longest one wait for a message; the drain thread checks for a stop or a pause between waits."""

BUSY_RECHECK_S: Final = 1.0
"""Longest wait, while the slot's message runs, before checking again: the end of the task wakes
the drain thread at once (this bounds only a missed wake-up)."""

RECONNECT_DELAYS_S: Final = (0.5, 1.0, 2.0, 4.0)
"""Waits between attempts to reach the broker again after a lost connection; the last repeats."""


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


class _SlotPool(TaskPool):
    """Celery's thread pool, one thread, that says when a task has ended (after its acknowledgement,
    which Celery's callback makes before the future is done)."""

    def __init__(self, on_done: Callable[[], None], announce: Callable[[], Callable[[], None]]) -> None:
        """``announce``: called as a task is handed to the thread; what it returns, when it ends."""
        super().__init__(limit=1)
        self._on_done = on_done
        self._announce = announce

    def on_apply(self, *args: Any, **kwargs: Any) -> Any:
        ended = self._announce()
        try:
            result = super().on_apply(*args, **kwargs)
        except BaseException:
            ended()
            raise
        future: Future[Any] = result.f

        def done(_: Future[Any]) -> None:
            ended()
            self._on_done()

        future.add_done_callback(done)
        return result


class _SlotConsumer:
    """The worker's consumer as Celery's task strategy sees it, but for the slot: requests run on the
    slot's pool, count against the slot's channel and wait for their ETA on the slot's timer.
    Everything else (host name, events, revoked ids, error handlers) is the consumer's own."""

    def __init__(
        self, consumer: Consumer, pool: TaskPool, qos: QoS, timer: Timer, defer: Callable[[Callable[[], Any]], None]
    ) -> None:
        self._consumer = consumer
        self.pool = pool
        self.qos = qos
        self.timer = timer
        self._defer = defer
        self.strategies: dict[str, Any] = {}
        self._maximum_prefetch_restored = True  # the prefetch reduction after a reconnect is the consumer's

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def call_soon_ack(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """A message's acknowledgement or rejection, made by the slot's drain thread (the consumer's
        would wait for the worker's main loop, and until it came the slot took no next message)."""
        pending = functools.partial(callback, *args, **kwargs)
        self._defer(pending)
        return pending

    call_soon = call_soon_ack

    def on_task_request(self, request: Any) -> None:
        """What ``WorkController._process_task`` does, on the slot's pool."""
        # A revoked request has dealt with its message; a pool stopped at shutdown leaves it
        # unacknowledged, given back when the connection closes.
        with contextlib.suppress(TaskRevokedError, RuntimeError):
            request.execute_using_pool(self.pool)

    def apply_eta_task(self, request: Any) -> None:
        """Celery's own, run on this object: a retry whose countdown ended runs in the slot."""
        Consumer.apply_eta_task(cast(Consumer, self), request)

    def update_strategies(self) -> None:
        """Celery's task strategies, built on this object (again after a consumer restart: they hold
        its event dispatcher)."""
        app = self._consumer.app
        self.strategies.update({name: task.start_strategy(app, self) for name, task in app.tasks.items()})

    def create_task_handler(self) -> Callable[[Any], None]:
        """Celery's own message handler, with the slot's strategies."""
        handler: Callable[[Any], None] = Consumer.create_task_handler(cast(Consumer, self))
        return handler


class _Drain:
    """The slot's connection and the thread that reads it: consumes the interactive queue while
    neither paused nor stopped and the worker is able (``workers.fitness``), reconnecting after a
    lost connection."""

    def __init__(self, parent: Consumer, queues: list[Any]) -> None:
        self._parent = parent
        self._queues = queues
        self._stopping = threading.Event()
        self._running = threading.Event()  # set while the worker's consumer runs: take messages
        self._wake = threading.Event()  # the slot's task ended, or an acknowledgement is pending
        self._pending: deque[Callable[[], Any]] = deque()  # acknowledgements, made by the drain thread
        self._lock = threading.Lock()  # the connection, between the drain thread and close()
        self._connection: Connection | None = None
        self._failures = 0  # connection attempts failed in a row
        self.timer = Timer()
        self.pool = _SlotPool(self._wake.set, _interactive_coming)
        self.pool.start()
        self._slot: _SlotConsumer | None = None
        self._thread = threading.Thread(target=self._run, name="interactive-slot", daemon=True)
        FITNESS.listen(lambda _: self._wake.set())  # take messages, or stop taking them, at once

    def start(self) -> None:
        self._thread.start()

    def resume(self) -> None:
        """Take messages (the consumer started, or started again with a new event dispatcher)."""
        if self._slot is not None:
            self._slot.update_strategies()
        self._running.set()
        self._wake.set()

    def pause(self) -> None:
        """Take no more messages until :meth:`resume`; the one running goes on."""
        self._running.clear()
        self._wake.set()

    def close(self) -> None:
        """Stop reading, finish the running task (it acknowledges on this connection), then close
        the connection: a message taken and not started goes back to the queue."""
        self._stopping.set()
        self._wake.set()
        self._thread.join()
        self.pool.stop()
        self.timer.stop()
        self._perform_pending()  # the last task's acknowledgement, on the still open connection
        with self._lock:
            if self._connection is not None:
                ignore_errors(self._connection, self._connection.close)
                self._connection = None

    def _defer(self, operation: Callable[[], Any]) -> None:
        self._pending.append(operation)
        self._wake.set()

    def _perform_pending(self) -> None:
        while self._pending:
            try:
                self._pending.popleft()()
            except Exception:
                log.exception("interactive slot: a pending acknowledgement failed")

    def _run(self) -> None:
        self._failures = 0
        while not self._stopping.is_set():
            try:
                self._consume()
                return
            except Exception as e:
                errors = self._connection_errors()
                if not isinstance(e, errors):
                    log.exception("interactive slot stopped")
                    return
                delay = RECONNECT_DELAYS_S[min(self._failures, len(RECONNECT_DELAYS_S) - 1)]
                self._failures += 1
                log.warning("interactive slot lost its broker connection (%r); reconnecting in %g s", e, delay)
                self._drop_connection()
                self._stopping.wait(delay)

    def _connection_errors(self) -> tuple[type[BaseException], ...]:
        """What the broker's transport raises for a lost connection or channel, what kombu raises for
        a failed connection attempt, and socket errors."""
        connection = self._parent.app.connection_for_read()
        return (*connection.connection_errors, *connection.channel_errors, OperationalError, OSError)

    def _drop_connection(self) -> None:
        with self._lock:
            if self._connection is not None:
                ignore_errors(self._connection, self._connection.close)
                self._connection = None

    def _consume(self) -> None:
        """Connect, consume until stopped; raises a connection error when the connection is lost."""
        app = self._parent.app
        connection = app.connection_for_read()
        with self._lock:
            if self._stopping.is_set():
                return
            self._connection = connection
        connection.ensure_connection(max_retries=1)
        channel: Any = connection.channel()
        qos = _EagerQoS(channel.basic_qos, SLOT_PREFETCH)
        qos.update()
        slot = self._slot = _SlotConsumer(self._parent, self.pool, qos, self.timer, self._defer)
        slot.update_strategies()
        self._failures = 0
        consumer: Any = None
        while not self._stopping.is_set():
            self._perform_pending()
            if not (self._running.is_set() and FITNESS.able):
                if consumer is not None:
                    consumer.cancel()
                    consumer = None
                self._wake.wait(DRAIN_TIMEOUT_S)
                self._wake.clear()
                continue
            if consumer is None:
                consumer = app.amqp.TaskConsumer(
                    channel, queues=self._queues, on_decode_error=self._parent.on_decode_error
                )
                consumer.on_message = slot.create_task_handler()
                consumer.consume()
                log.info("interactive slot consuming %s", ", ".join(q.name for q in self._queues))
            if not channel.qos.can_consume():
                # Its message runs: wait for its end rather than let kombu sleep a whole second.
                self._wake.wait(BUSY_RECHECK_S)
                self._wake.clear()
                continue
            with contextlib.suppress(socket.timeout):
                connection.drain_events(timeout=DRAIN_TIMEOUT_S)


class InteractiveSlot(bootsteps.StartStopStep):
    """Consumer bootstep: a consumer of the interactive queue on its own connection and thread."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Consumer, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._drain: _Drain | None = None

    def include_if(self, parent: Consumer) -> bool:
        return WORKER_SETTINGS.get().worker.interactive_slot

    def start(self, parent: Consumer) -> None:
        if self._drain is None:
            queue = interactive_queue(WORKER_SETTINGS.get().queue)
            queues = parent.app.amqp.queues
            if queue not in queues.consume_from:
                log.info("interactive slot off: this worker does not take %s", queue)
                return
            # The interactive queue and its models' (voice affinity), in the consumer's order; the
            # transport asks for those of the models this process holds first.
            interactive = [queues[name] for name in queues.consume_from if name == queue or _models_interactive(name)]
            self._drain = _Drain(parent, interactive)
            self._drain.start()
        self._drain.resume()

    def stop(self, parent: Consumer) -> None:
        """Take no more messages (a restart of the consumer, or the start of a shutdown); the
        connection stays open, for the running task's acknowledgement."""
        if self._drain is not None:
            self._drain.pause()

    def shutdown(self, parent: Consumer) -> None:
        """Finish the running task, then close the connection (giving back a message not started)."""
        if self._drain is not None:
            self._drain.close()
            self._drain = None


def _models_interactive(name: str) -> bool:
    """A model's interactive queue (``<queue>.model.<model>.interactive``)."""
    return is_model_queue(name) and name.endswith(INTERACTIVE_QUEUE_SUFFIX)


def _interactive_coming() -> Callable[[], None]:
    """Tell the engine's interactive lane that the slot's task is about to submit to it."""
    return SYNTHESIS.get().engine.interactive.expect()
