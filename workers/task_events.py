"""Task events (what Flower follows) sent a moment late, several in one publish.

Celery's consumer flushes its buffer of task events on the event loop's next turn after each one
is sent: a short job's ``task-received`` and ``task-started`` were two publishes, each a JSON body
and a Redis round trip made by the worker's main thread while the job's own thread read, planned
and claimed it, in the same interpreter (issue 38: about a millisecond of a one-sentence answer).
Here the first event sent arms a flush :data:`EVENT_FLUSH_DELAY_S` later, and every event sent
until then goes with it: a short job's events leave in one publish, after its answer. Flower shows
each event with the time it was sent, not the time it arrived.

Events still buffered when the consumer stops are flushed by :class:`FlushEventsAtStop` before the
event connection closes, so a warm shutdown loses none.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from celery import bootsteps
from celery.worker.consumer import Consumer

log = logging.getLogger(__name__)

EVENT_FLUSH_DELAY_S: Final = 0.25
"""How long task events wait for company before they are published: under a person's notice in
Flower, and longer than a short job, so that its events leave together once it has ended."""
REARM_AFTER_S: Final = 4 * EVENT_FLUSH_DELAY_S
"""A flush armed this long ago and not yet run is taken for lost: the next event arms another."""


class PacedEventsConsumer(Consumer):
    """Celery's consumer, flushing buffered task events :data:`EVENT_FLUSH_DELAY_S` after the first
    of them rather than on the loop's next turn."""

    hub: Any  # kombu's event loop; set by Celery (the stubs do not declare it)
    event_dispatcher: Any
    _flush_armed_at: float | None = None

    def on_send_event_buffered(self) -> None:  # type: ignore[override]  # the stubs' return type is wrong
        """Called by whichever thread sent an event (the consumer's, the interactive slot's, a task
        thread); the hub's ``call_soon`` is the one call that may come from any of them. A flush
        armed long ago whose timer never ran (a consumer restarted meanwhile) is armed again."""
        if self.hub is None:
            return
        now = time.monotonic()
        armed_at = self._flush_armed_at
        if armed_at is not None and now - armed_at < REARM_AFTER_S:
            return
        self._flush_armed_at = now
        self.hub.call_soon(self._arm_flush)

    def _arm_flush(self) -> None:
        self.hub.call_later(EVENT_FLUSH_DELAY_S, self._paced_flush)

    def _paced_flush(self) -> None:
        # Disarmed first: an event sent during the publish arms the next flush.
        self._flush_armed_at = None
        if self.event_dispatcher is not None:
            self.event_dispatcher.flush()


class FlushEventsAtStop(bootsteps.StartStopStep):
    """Publishes the events still waiting for their flush when the consumer shuts down; it
    requires the events step, so Celery shuts it down before that step closes the connection. (A
    consumer restarted after a lost connection keeps its buffer: the events step hands it on.)"""

    requires = ("celery.worker.consumer.events:Events",)

    def shutdown(self, c: Any) -> None:
        dispatcher = c.event_dispatcher
        if dispatcher is None:
            return
        try:
            dispatcher.flush()
        except Exception as e:  # the broker is gone: the events are lost, as Celery's own would be
            log.warning("task events not published at stop: %s", type(e).__name__)
