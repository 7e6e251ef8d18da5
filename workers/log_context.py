"""Log set-up shared by ttsq's Celery workers (synthesis and webhooks): the configured format, and the
job id on every line a task logs. Importing this module connects the signal handlers."""

from __future__ import annotations

from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger, task_postrun, task_prerun

from ttsq import logs
from ttsq.settings import get_settings


@after_setup_logger.connect
@after_setup_task_logger.connect
def _structured_logs(**_: Any) -> None:
    logs.configure(get_settings().log_format)


@task_prerun.connect
def _enter_job(args: Any = None, **_: Any) -> None:
    """Each ttsq task's first argument is its job id; the task runs in this thread until postrun."""
    if args:
        logs.job_id_var.set(str(args[0]))


@task_postrun.connect
def _leave_job(**_: Any) -> None:
    logs.job_id_var.set(None)
