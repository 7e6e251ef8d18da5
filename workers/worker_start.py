"""What a worker does as it is built, before any task: its Celery signal handlers connected. A worker
step (named in the app's ``steps``), so importing a worker module connects nothing and reads no
setting; Flower and ``celery inspect`` build no worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import bootsteps
from celery.utils.dispatch import Signal

from ttsq.celery_signals import Handler, connect_once
from ttsq.settings import Settings, get_settings
from workers.log_context import JOB_ID_HANDLERS
from workers.process_scope import ProcessScope

WORKER_SETTINGS: ProcessScope[Settings] = ProcessScope("the worker's settings", forks=True)
"""The settings this worker read as it was built; its parts that are no start handler's (a consumer
step, a thread) read them here."""


class WorkerStart(bootsteps.Step):
    """Reads the settings once, as the worker is built, and connects the job id handlers and the
    worker's own :meth:`handlers` on them (before Celery's ``celeryd_after_setup``, ``worker_ready``
    and the pool's children, which they may handle)."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        settings = WORKER_SETTINGS.start(get_settings)
        connect_once([*JOB_ID_HANDLERS, *self.handlers(settings)])

    def handlers(self, settings: Settings) -> Sequence[tuple[Signal, Handler]]:
        """The handlers this worker connects, built on ``settings``."""
        return ()
