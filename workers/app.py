"""The Celery application; configuration comes from ``celeryconfig``."""

from __future__ import annotations

from celery import Celery

app = Celery("ttsq")
app.config_from_object("celeryconfig")
app.autodiscover_tasks(["workers"], related_name="tasks", force=True)
