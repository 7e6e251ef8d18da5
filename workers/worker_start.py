"""What a worker does as it is built, before any task: its Celery signal handlers connected. A worker
step (named in the app's ``steps``), so importing a worker module connects nothing and reads no
setting; Flower and ``celery inspect`` build no worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from celery import bootsteps
from celery.utils.dispatch import Signal

from ttsq.celery_signals import Handler, connect_once
from workers.log_context import JOB_ID_HANDLERS


class WorkerStart(bootsteps.Step):
    """Connects the job id handlers and the worker's own ``handlers`` when the worker is built (before
    Celery's ``celeryd_after_setup``, ``worker_ready`` and the pool's children, which they may handle)."""

    handlers: ClassVar[Sequence[tuple[Signal, Handler]]] = ()

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        connect_once([*JOB_ID_HANDLERS, *self.handlers])
