"""Log set-up shared by ttsq's Celery workers (synthesis and service): the configured format, and the
job id on every line a task logs. Its handlers are connected by each worker's start step
(``workers.worker_start``), never by importing this module."""

from __future__ import annotations

from typing import Any, Final

from celery.signals import after_setup_logger, after_setup_task_logger, task_postrun, task_prerun

from ttsq import logs
from ttsq.settings import get_settings


def structured_logs(**_: Any) -> None:
    logs.configure(get_settings().log_format)


def _enter_job(args: Any = None, **_: Any) -> None:
    """Each ttsq task's first argument is its job id; the task runs in this thread until postrun."""
    if args:
        logs.job_id_var.set(str(args[0]))


def _leave_job(**_: Any) -> None:
    logs.job_id_var.set(None)


LOG_HANDLERS: Final = (
    (after_setup_logger, structured_logs),
    (after_setup_task_logger, structured_logs),
    (task_prerun, _enter_job),
    (task_postrun, _leave_job),
)
"""Logging as it is set up again in each pool process, and the job id of the task running."""
