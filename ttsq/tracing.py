"""Traces: one trace per job, from the API's request through the queue to every step of the workers
(docs/DEPLOYMENT.md, "Traces").

This module decides whether a process traces and how a trace's context travels. A process exports
spans only where the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set: then
:func:`start` installs an SDK tracer provider with a batch processor and the OTLP/HTTP exporter, which
read the rest of the standard ``OTEL_*`` variables themselves (``OTEL_TRACES_SAMPLER``, headers,
timeouts, ``OTEL_BSP_*``). Otherwise nothing is installed: the API's no-op tracer makes no span and
starts no thread, and a caller's ``traceparent`` still travels through (its spans are non-recording
copies of the caller's context), so the job keeps the caller's trace id.

The context travels as W3C ``traceparent`` text: in the task messages' headers, in the job record
(what a step continues from when its message carries none: the sweeper's requeue, an old message),
and in the webhook event read from that record.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

ENDPOINT_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""Where set (either), the process exports its spans over OTLP/HTTP; unset or empty (as compose passes
``${OTEL_EXPORTER_OTLP_ENDPOINT:-}`` when the operator sets nothing), it traces nothing."""

SERVICE_NAME_VARIABLE: Final = "OTEL_SERVICE_NAME"
"""The standard variable that renames a process's service."""

API_SERVICE: Final = "ttsq-api"
"""The API's ``service.name`` (``OTEL_SERVICE_NAME`` renames any process's)."""
WYOMING_SERVICE: Final = "ttsq-wyoming"
"""The Wyoming server's (``ttsq wyoming``)."""


def worker_service(app_name: str) -> str:
    """A worker's ``service.name``, from its Celery app's: ``ttsq-worker`` (synthesis),
    ``ttsq-service-worker`` (webhooks, sweeps, batches)."""
    return f"{app_name}-worker"


TRACEPARENT: Final = "traceparent"
"""The W3C header (and carrier key) holding a trace's context."""

TRACER_NAME: Final = "ttsq"

_PROPAGATOR: Final = TraceContextTextMapPropagator()
"""W3C trace context only, whatever ``OTEL_PROPAGATORS`` says: ttsq's carriers are its own."""


def enabled() -> bool:
    """Whether this process is told to export spans (an OTLP endpoint is set, and not empty: the
    OpenTelemetry specification reads an empty variable as unset, and so does the exporter)."""
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def start(service_name: str) -> None:
    """Install the exporting tracer provider if :func:`enabled` (once per process; later calls and a
    disabled process change nothing). The SDK is imported only here, so that a process that does
    not trace never loads it."""
    if not enabled() or _installed():
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get(SERVICE_NAME_VARIABLE) or service_name
    # TracerProvider reads OTEL_TRACES_SAMPLER(_ARG) itself; it flushes and stops at exit.
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def flush() -> None:
    """Send the spans still waiting in this process's batch (a process about to stop)."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if _installed() and force_flush is not None:
        force_flush()


def _installed() -> bool:
    from opentelemetry.sdk.trace import TracerProvider  # imported only once tracing is asked for

    return isinstance(trace.get_tracer_provider(), TracerProvider)


def tracer() -> Tracer:
    """ttsq's tracer, of whatever provider the process has (the no-op one unless :func:`start` installed)."""
    return trace.get_tracer(TRACER_NAME)


@contextmanager
def span(
    name: str,
    parent: Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> Iterator[Span]:
    """A span current for the block, under ``parent`` (the current context if None); an exception
    leaving the block is recorded on it and marks it failed."""
    with tracer().start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as current:
        yield current


@contextmanager
def child_span(
    name: str, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, str | int | float | bool] | None = None
) -> Iterator[Span]:
    """A span under the current one, or none at all (a non-recording stand-in) outside a span: a
    store call of a job's step is part of its trace, while the periodic calls of sweeps, checks and
    cleanups would each begin a trace of one span."""
    if not trace.get_current_span().get_span_context().is_valid:
        yield trace.INVALID_SPAN
        return
    with span(name, None, kind, attributes) as current:
        yield current


def sibling_context() -> Context | None:
    """The context the current span was started under, for a span beside it; None (the current
    context: a span under it) where that is unknown or the current span is its trace's root."""
    parent = getattr(trace.get_current_span(), "parent", None)  # an SDK span's; the no-op ones have none
    if not isinstance(parent, SpanContext):
        return None
    return trace.set_span_in_context(NonRecordingSpan(parent))


def lost_span(
    name: str,
    parent: Context | None,
    started_at: float,
    error: str,
    attributes: Mapping[str, str | int | float | bool],
    kind: SpanKind = SpanKind.INTERNAL,
) -> None:
    """The span of work whose own span was lost with its process (killed before the span ended, so
    never exported), as another process found it: from ``started_at`` (Unix time) to now, failed
    with ``error``."""
    lost = tracer().start_span(name, parent, kind, attributes, start_time=round(started_at * 1e9))
    lost.set_status(Status(StatusCode.ERROR, error))
    lost.end()


def inject(carrier: MutableMapping[str, str]) -> None:
    """Write the current trace context into ``carrier`` (nothing outside a span or a caller's context)."""
    _PROPAGATOR.inject(carrier)


def extract(carrier: Mapping[str, str]) -> Context:
    """The context ``carrier`` holds (an empty one if it holds none, or a malformed one)."""
    return _PROPAGATOR.extract(dict(carrier))


def has_context(carrier: Mapping[str, object]) -> bool:
    return isinstance(carrier.get(TRACEPARENT), str)


def current_traceparent() -> str | None:
    """The current span's context as ``traceparent`` text; None outside any valid context."""
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get(TRACEPARENT)


def context_of(traceparent: str | None) -> Context | None:
    """The context to continue from ``traceparent`` (None: a new trace)."""
    return None if traceparent is None else extract({TRACEPARENT: traceparent})


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of ``traceparent``, or None if there is no valid one."""
    parent = context_of(traceparent)
    if parent is None:
        return None
    found = trace.get_current_span(parent).get_span_context()
    return trace.format_trace_id(found.trace_id) if found.is_valid else None


def current_ids() -> tuple[str | None, str | None]:
    """The current span's trace id and span id (hex), for log lines; (None, None) outside one."""
    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None, None
    return trace.format_trace_id(found.trace_id), trace.format_span_id(found.span_id)


def current_span() -> Span:
    return trace.get_current_span()


@contextmanager
def attached(parent: Context) -> Iterator[None]:
    """``parent`` current for the block, without a span of its own."""
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)
