"""The Celery application of the workers (and of Flower); its configuration is ``celeryconfig``,
which lists the task module to import (``workers.tasks``). Nothing here reads a setting: the
configuration is read when a process first uses the app."""

from __future__ import annotations

from celery import Celery

from workers.interactive_slot import InteractiveSlot
from workers.task_events import FlushEventsAtStop

app = Celery("ttsq", log="workers.log_context:ProcessLogging")
app.config_from_object("celeryconfig")
app.add_defaults(lambda: {"worker_consumer": "workers.task_events:PacedEventsConsumer"})
app.steps["consumer"].update({InteractiveSlot, FlushEventsAtStop})
app.steps["worker"].add("workers.tasks:SynthesisWorkerStart")  # by name: the tasks module imports this one
