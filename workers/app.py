"""The Celery application of the workers (and of Flower); its configuration is ``celeryconfig``,
which lists the task module to import (``workers.tasks``)."""

from __future__ import annotations

from celery import Celery

from workers.interactive_slot import InteractiveSlot

app = Celery("ttsq")
app.config_from_object("celeryconfig")
app.steps["consumer"].add(InteractiveSlot)
