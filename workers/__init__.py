"""Celery workers: one model per process, synthesis tasks that carry only job ids."""
