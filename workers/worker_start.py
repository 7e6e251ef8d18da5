"""What a worker does as it is built, before any task: its Celery signal handlers connected, its
logs in the configured format. A worker step (named in the app's ``steps``), so importing a worker
module connects nothing and reads no setting; Flower and ``celery inspect`` build no worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from celery import bootsteps
from celery.utils.dispatch import Signal

from ttsq.broker import ENQUEUE_STAMP
from ttsq.celery_signals import Handler, connect_once
from workers.log_context import LOG_HANDLERS, structured_logs


class WorkerStart(bootsteps.Step):
    """Connects the log handlers, the send-time stamp and the worker's own ``handlers`` when the worker
    is built (its logging is set up by then: the logs take their format at once)."""

    handlers: ClassVar[Sequence[tuple[Signal, Handler]]] = ()

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        connect_once([*LOG_HANDLERS, ENQUEUE_STAMP, *self.handlers])
        structured_logs()
