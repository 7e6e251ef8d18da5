"""Celery configuration module (``app.config_from_object("celeryconfig")``), read from ttsq's settings."""

from __future__ import annotations

from ttsq.constants import ASSEMBLE_TASK, SEGMENT_TASK, SYNTHESIZE_TASK, segment_queue
from ttsq.settings import get_settings

_settings = get_settings()

broker_url = _settings.redis_url
result_backend = _settings.redis_url
# Redis redelivers an unacknowledged task after the visibility timeout; it must exceed the longest
# task or a slow job would run twice. The result backend uses the same transport options.
broker_transport_options = {
    "visibility_timeout": _settings.visibility_timeout_s,
    # Sweep for messages of dead workers every 10 s (kombu's default scans only every 100 s).
    "unacked_restore_interval": 10,
    "unacked_restore_throttle": 1,
}
result_backend_transport_options = {"visibility_timeout": _settings.visibility_timeout_s}
broker_connection_retry_on_startup = True

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
task_default_queue = _settings.queue
task_routes = {
    SYNTHESIZE_TASK: {"queue": _settings.queue},
    ASSEMBLE_TASK: {"queue": _settings.queue},
    SEGMENT_TASK: {"queue": segment_queue(_settings.queue)},
}

# Acknowledge after the task ran, and give the message back if the worker process dies, so a crash
# loses no job; one message in flight per worker slot keeps long jobs from starving others.
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
worker_cancel_long_running_tasks_on_connection_loss = True
# Job state lives in the job record, never in Celery results: storing results would only add Redis
# writes to every segment. Flower follows tasks through events, which stay on.
task_ignore_result = True
task_time_limit = _settings.task_time_limit_s
task_soft_time_limit = max(1, _settings.task_time_limit_s - 30)
result_expires = 24 * 3600

# Events for Flower.
worker_send_task_events = True
task_send_sent_event = True
