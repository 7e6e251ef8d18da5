"""Log set-up shared by ttsq's Celery apps (synthesis and service): the configured format in every
process they start, and the job id on every line a task logs.

Celery sets up logging once in each process it starts (a worker, each pool child, beat) through its
app's ``Logging``: :class:`ProcessLogging` is that class for ttsq's apps, so those processes take the
configured format and stamp what they send without any handler connected at import. The job id
handlers are connected by each worker's start step (``workers.worker_start``).
"""

from __future__ import annotations

from typing import Any, Final

from celery.app.log import Logging
from celery.signals import task_postrun, task_prerun

from ttsq import logs, tracing
from ttsq.broker import ENQUEUE_STAMP
from ttsq.celery_signals import connect_once
from ttsq.settings import get_settings


class ProcessLogging(Logging):
    """Celery's logging set-up, then the configured format on every handler; and, this being the one
    hook every process of the apps runs as it starts, its tracing (``ttsq.tracing``, only where an
    OTLP endpoint is set) and the send-time stamp on what it sends."""

    def setup(
        self,
        loglevel: int | None = None,
        logfile: str | None = None,
        redirect_stdouts: bool = False,
        redirect_level: str = "WARNING",
        colorize: bool | None = None,
        hostname: str | None = None,
    ) -> list[tuple[Any, Any]]:
        handled = super().setup(loglevel, logfile, redirect_stdouts, redirect_level, colorize, hostname)
        logs.configure(get_settings().log_format)
        tracing.start(tracing.worker_service(self.app.main or "ttsq"))  # after a prefork child's fork
        connect_once([ENQUEUE_STAMP])
        return handled


def _enter_job(args: Any = None, **_: Any) -> None:
    """Each ttsq task's first argument is its job id; the task runs in this thread until postrun."""
    if args:
        logs.job_id_var.set(str(args[0]))


def _leave_job(**_: Any) -> None:
    logs.job_id_var.set(None)
    logs.tenant_id_var.set(None)  # set by the step once it read the job's record (``workers.pipeline``)


JOB_ID_HANDLERS: Final = ((task_prerun, _enter_job), (task_postrun, _leave_job))
"""The job id of the task running, on its thread's log lines (and no tenant left from the last)."""
