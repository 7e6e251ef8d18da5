"""Log lines that a collector can follow: the job id and its tenant's id on every line of a job's work,
the request id on every line of an API request, the trace and span ids on every line logged inside a span (so a job's
lines join across the API and the workers by its trace id, ``ttsq.tracing``), and
(``TTSQ_LOG_FORMAT=json``) one JSON object per line.

The ids travel in context variables: a worker sets the job id when a task starts (Celery's
``task_prerun``, in the task's own thread) and the tenant once the step has read the job's record,
the API sets both while it admits, stores and queues a job, the webhook dispatcher while it attempts
an event, the API's request-id middleware sets the request id, and OpenTelemetry's context holds the
current span. A filter copies them onto every record, so
formatters and handlers need no changes of their own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal

from pythonjsonlogger.json import JsonFormatter

from ttsq import tracing

job_id_var: Final[ContextVar[str | None]] = ContextVar("ttsq_job_id", default=None)
tenant_id_var: Final[ContextVar[str | None]] = ContextVar("ttsq_tenant_id", default=None)
request_id_var: Final[ContextVar[str | None]] = ContextVar("ttsq_request_id", default=None)

JSON_FIELDS: Final = "{asctime}{levelname}{name}{message}{job_id}{tenant_id}{request_id}{trace_id}{span_id}"
"""Fields of every JSON line besides any ``extra`` given to the call."""


_FIRST_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _job_of_task_line(record: logging.LogRecord) -> str | None:
    """Celery's "Task ... received" lines are logged outside the task, with the task's arguments in
    ``data``; every ttsq task's first argument is its job id."""
    data = getattr(record, "data", None)
    if isinstance(data, dict) and isinstance(args := data.get("args"), str):
        found = _FIRST_UUID.search(args)
        return found.group(0) if found else None
    return None


class ContextIdsFilter(logging.Filter):
    """Puts the current job id, tenant id, request id, trace id and span id on each record (None
    outside a job, a request or a span)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "job_id", None) is None:
            record.job_id = job_id_var.get() or _job_of_task_line(record)
        if getattr(record, "tenant_id", None) is None:
            record.tenant_id = tenant_id_var.get()
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id_var.get()
        if getattr(record, "trace_id", None) is None:
            record.trace_id, record.span_id = tracing.current_ids()
        return True


@contextmanager
def job_context(job_id: str | None, tenant_id: str) -> Iterator[None]:
    """Lines logged inside carry ``job_id`` (None: no job, a batch's work) and ``tenant_id``."""
    job_token, tenant_token = job_id_var.set(job_id), tenant_id_var.set(tenant_id)
    try:
        yield
    finally:
        job_id_var.reset(job_token)
        tenant_id_var.reset(tenant_token)


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        JSON_FIELDS,
        style="{",
        datefmt="%Y-%m-%dT%H:%M:%S%z",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        timestamp=False,
    )


def _handlers() -> Iterator[logging.Handler]:
    seen: set[int] = set()
    loggers = [
        logging.getLogger(),
        *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if id(handler) not in seen:
                seen.add(id(handler))
                yield handler


def configure(log_format: Literal["text", "json"]) -> None:
    """Give every handler configured so far (the root's, Celery's, uvicorn's) the ids filter and, for
    ``json``, the JSON formatter. Call it after the framework set up its own logging."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO)
    for handler in _handlers():
        if not any(isinstance(f, ContextIdsFilter) for f in handler.filters):
            handler.addFilter(ContextIdsFilter())
        if log_format == "json":
            handler.setFormatter(json_formatter())
