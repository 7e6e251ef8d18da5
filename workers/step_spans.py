"""The span of each run of a job's step, in the job's one trace (``ttsq.tracing``).

A step continues the context its task message carries (the API's request for an entry task, the
entry's span for a segment, the last segment's for the assembly); a message without one (the
sweeper's requeue, a message sent before tracing was on) continues the job's own, kept in its
record, where this process traces (where it does not, the record is not read for it). A
redelivered or retried message carries the same context as its first delivery, so every
attempt of a step is a span of the same trace, told apart by ``ttsq.step.attempt_id``. A run cut off
by its worker's death never ends its span, which is then never sent: the next run of the step
reports it (:func:`report_died`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import redis
from celery import current_task
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from ttsq import tracing
from ttsq.broker import ENQUEUED_AT_HEADER
from ttsq.constants import ASSEMBLE_STEP, ENTRY_STEP
from ttsq.errors import JobNotFound

log = logging.getLogger(__name__)

SPAN_NAMES: Final = {ENTRY_STEP: "ttsq.entry", ASSEMBLE_STEP: "ttsq.assemble"}
"""Each step's span name; every segment's is ``ttsq.segment`` (its index is an attribute)."""

SEGMENT_SPAN: Final = "ttsq.segment"

CARRIED: Final = (tracing.TRACEPARENT, "tracestate")
"""The headers of a task message that hold its trace context."""


def _request() -> Any:
    """The running task's request; None outside a task (Celery's ``current_task`` is then None)."""
    return getattr(current_task, "request", None)


def _message_carrier() -> dict[str, str]:
    """The trace context headers of the running task's message (Celery puts a message's own
    headers on its request, and keeps them in ``request.headers``)."""
    request = _request()
    if request is None:
        return {}
    headers: dict[str, Any] = getattr(request, "headers", None) or {}
    carrier = {}
    for name in CARRIED:
        value = headers.get(name, getattr(request, name, None))
        if isinstance(value, str):
            carrier[name] = value
    return carrier


def _delivery_attributes() -> dict[str, str | int | float | bool]:
    request = _request()
    if request is None:
        return {}
    delivery = request.delivery_info or {}
    attributes: dict[str, str | int | float | bool] = {
        "celery.task_id": str(request.id),
        "celery.retries": int(request.retries or 0),
        "messaging.destination.name": str(delivery.get("routing_key", "")),
        "messaging.message.redelivered": bool(delivery.get("redelivered", False)),
    }
    headers: dict[str, Any] = getattr(request, "headers", None) or {}
    sent = headers.get(ENQUEUED_AT_HEADER, getattr(request, ENQUEUED_AT_HEADER, None))
    if isinstance(sent, int | float):  # the queue wait of this delivery: from its send to this start
        attributes["ttsq.queue_wait_ms"] = round(max(0.0, time.time() - sent) * 1000, 1)
    return attributes


def _parent(recorded: Callable[[], str | None]) -> Context | None:
    carrier = _message_carrier()
    if tracing.has_context(carrier):
        return tracing.extract(carrier)
    if not tracing.enabled():  # off costs nothing: no record read for a span that is not recorded
        return None
    try:
        return tracing.context_of(recorded())
    except (JobNotFound, redis.RedisError) as e:  # the step meets this itself, and says so
        log.debug("no recorded trace to continue: %s", e)
        return None


@contextmanager
def step_span(job_id: str, step: str, recorded: Callable[[], str | None]) -> Iterator[Span]:
    """The span of this run of ``step``, under its message's context or else ``recorded()`` (the
    job record's ``traceparent``, read only when the message has none and this process traces)."""
    attributes = {**_step_attributes(job_id, step), **_delivery_attributes()}
    with tracing.span(_span_name(step), _parent(recorded), SpanKind.CONSUMER, attributes) as span:
        yield span


def _span_name(step: str) -> str:
    return SPAN_NAMES.get(step, SEGMENT_SPAN)


def _step_attributes(job_id: str, step: str) -> dict[str, str | int | float | bool]:
    attributes: dict[str, str | int | float | bool] = {"ttsq.job.id": job_id, "ttsq.step": step}
    if _span_name(step) == SEGMENT_SPAN:
        attributes["ttsq.segment.index"] = int(step.rpartition(":")[2])
    return attributes


def mark_attempt(started: int, attempt_id: str) -> None:
    """Name the running step's attempt on its span: ``attempt_id`` is the run's own (its objects' keys
    carry it), ``started`` counts the step's starts that never ended, this one included (``starts``
    above 1: earlier runs died in the step, ``ttsq.errors.WorkerCrashed``)."""
    span = tracing.current_span()
    span.set_attribute("ttsq.step.attempt_id", attempt_id)
    span.set_attribute("ttsq.step.unended_starts", started)


DIED: Final = "no end recorded when the next run started: its worker died in the step (or froze past its lease)"


def report_died(job_id: str, step: str, died: Mapping[str, float], found_by: str) -> None:
    """A span for each earlier run of the running step that never ended (``died``: its attempt id and
    when it started), beside this run's: a worker killed in a step takes that run's unended span
    with it, and this is how the trace still shows it. ``found_by`` is this run's attempt id."""
    parent = tracing.sibling_context()
    for attempt_id, started_at in sorted(died.items(), key=lambda item: item[1]):
        attributes = {
            **_step_attributes(job_id, step),
            "ttsq.step.attempt_id": attempt_id,
            "ttsq.step.died": True,
            "ttsq.step.found_by": found_by,
        }
        tracing.lost_span(_span_name(step), parent, started_at, DIED, attributes, SpanKind.CONSUMER)
