"""Webhook delivery: its own Celery app, queue and worker, so a slow or dead receiver never holds a
synthesis thread, and this worker never loads a model.

One task run makes at most one attempt. The job record (or, for a batch's event, the batch record)
keeps the delivery's state; a task carries its id and the number of attempts made when it was
sent, so a duplicate or stale task (its number no longer matches) does nothing. Waits longer than
half the broker's visibility timeout are made in hops (the task sends itself again with the same
number), because Redis would redeliver a message held unacknowledged for longer.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any

import redis
from celery import Celery
from redis.exceptions import LockError
from redis.lock import Lock

import workers.log_context  # noqa: F401  (importing it connects the log signal handlers)
from ttsq.batches import BatchNotFound, BatchStatus, BatchStore
from ttsq.broker import SERVICE_UNACKED_PREFIX, celery_config, transport_options
from ttsq.constants import (
    CLEANUP_TASK,
    DELIVER_BATCH_WEBHOOK_TASK,
    DELIVER_WEBHOOK_TASK,
    MAINTENANCE_QUEUE,
    SWEEP_TASK,
    WEBHOOK_QUEUE,
)
from ttsq.errors import JobNotFound
from ttsq.jobs import TERMINAL_STATUSES, JobRecord, JobStore, WebhookDelivery, WebhookState, utcnow
from ttsq.progress import SegmentStore
from ttsq.public import public_batch, public_job
from ttsq.settings import Settings, get_settings
from ttsq.storage import ObjectStore
from ttsq.webhook_delivery import Attempt, deliver, next_delay
from ttsq.webhook_signing import parse_secrets, signed_headers

log = logging.getLogger(__name__)

_settings = get_settings()


def service_config(settings: Settings) -> dict[str, Any]:
    """The shared configuration with this worker's own, long visibility timeout (it holds delivery
    retries as scheduled messages) under keys of its own (see ``ttsq.broker.transport_options``)."""
    options = transport_options(settings.webhook_visibility_timeout_s, SERVICE_UNACKED_PREFIX)
    return {
        **celery_config(settings),
        "imports": ["workers.maintenance", "workers.batches"],
        "broker_transport_options": options,
        "beat_schedule": beat_schedule(settings),
    }


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """What ``ttsq beat`` sends: the sweeper and the cleanup; a run that would start after its next
    one is due is dropped (``expires``) rather than piling up behind a stopped service worker."""
    every = {SWEEP_TASK: settings.sweep_interval_s, CLEANUP_TASK: settings.cleanup_interval_s}
    return {
        name: {"task": name, "schedule": interval, "options": {"queue": MAINTENANCE_QUEUE, "expires": interval}}
        for name, interval in every.items()
    }


app = Celery("ttsq-webhooks", config_source=service_config(_settings), set_as_current=False)
app.conf.task_default_queue = WEBHOOK_QUEUE


@dataclass(frozen=True)
class WebhookContext:
    settings: Settings
    jobs: JobStore
    segments: SegmentStore
    objects: ObjectStore
    batches: BatchStore


@lru_cache
def webhook_context() -> WebhookContext:
    client = redis.Redis.from_url(_settings.redis_url, socket_timeout=30, socket_connect_timeout=5)
    return WebhookContext(
        _settings,
        JobStore(client, _settings.job_ttl_s),
        SegmentStore(client, _settings.job_ttl_s),
        ObjectStore(_settings.s3),
        BatchStore(client, _settings.job_ttl_s),
    )


@dataclass(frozen=True)
class NextRun:
    """When to run the delivery task again, and with which attempt number."""

    countdown_s: float
    attempt: int


@dataclass(frozen=True)
class Target:
    """What an event is about (a finished job, or a finished batch), as a delivery needs it."""

    name: str
    """``job <id>`` or ``batch <id>``, for the log."""
    url: str | None
    hook: WebhookDelivery | None
    event_id: str
    """The same on every attempt of the event, so receivers can drop repeats."""
    body: Callable[[], bytes]
    save: Callable[[dict[str, Any]], None]
    """Applies changes to the stored delivery state."""


def event_id(record: JobRecord) -> str:
    """The same on every attempt of the event, so receivers can drop repeats."""
    status = record.status.value
    return f"msg_{record.id.replace('-', '')}_{status}"


def event_body(record: JobRecord, ctx: WebhookContext) -> bytes:
    """``{type, timestamp, data}``; data is the job as ``GET /v1/jobs/{id}`` shows it (links, never audio)."""
    assert record.webhook is not None
    data = public_job(record, ctx.segments, ctx.objects).model_dump(mode="json")
    finished = record.finished_at or utcnow()
    body = {"type": record.webhook.event, "timestamp": finished.isoformat(), "data": data}
    return json.dumps(body, separators=(",", ":")).encode()


def job_target(job_id: str, ctx: WebhookContext) -> Target:
    record = ctx.jobs.get(job_id)

    def save(changes: dict[str, Any]) -> None:
        def update(current: JobRecord) -> dict[str, Any]:
            assert current.webhook is not None
            return {"webhook": current.webhook.model_copy(update=changes)}

        ctx.jobs.update_by(job_id, TERMINAL_STATUSES, update)

    return Target(
        f"job {job_id}", record.webhook_url, record.webhook, event_id(record), lambda: event_body(record, ctx), save
    )


def batch_target(batch_id: str, ctx: WebhookContext) -> Target:
    """A finished batch's event: ``batch.completed`` (or ``batch.canceled``), its data the batch as
    ``GET /v1/batches/{id}`` shows it without items (counts, progress, ``manifest_url``)."""
    record = ctx.batches.get(batch_id)

    def body() -> bytes:
        assert record.webhook is not None
        data = public_batch(record, ctx.batches.counts(batch_id), ctx.objects).model_dump(mode="json")
        finished = record.finished_at or utcnow()
        return json.dumps({"type": record.webhook.event, "timestamp": finished.isoformat(), "data": data},
                          separators=(",", ":")).encode()  # fmt: skip

    def save(changes: dict[str, Any]) -> None:
        def update(current: Any) -> dict[str, Any]:
            assert current.webhook is not None
            return {"webhook": current.webhook.model_copy(update=changes)}

        ctx.batches.update(batch_id, tuple(BatchStatus), update)

    identity = f"msg_{batch_id.replace('-', '')}_batch_{record.status.value}"
    return Target(f"batch {batch_id}", record.webhook_url, record.webhook, identity, body, save)


def run_delivery(job_id: str, attempt: int, ctx: WebhookContext) -> NextRun | None:
    """Attempt the job's delivery if it is due and this task is current; returns when to run again."""
    return run_target(job_target(job_id, ctx), attempt, ctx)


def run_target(target: Target, attempt: int, ctx: WebhookContext) -> NextRun | None:
    """Attempt the delivery if it is due and this task is current; returns when to run again."""
    hook = target.hook
    if hook is None or target.url is None or hook.state is not WebhookState.PENDING:
        return None
    if hook.attempts != attempt:
        log.info("%s: webhook task for attempt %d is stale (%d made); dropping", target.name, attempt, hook.attempts)
        return None
    now = utcnow()
    if hook.next_attempt_at is not None and hook.next_attempt_at > now:
        return NextRun((hook.next_attempt_at - now).total_seconds(), attempt)
    outcome = _attempt(target, ctx)
    delay = None
    if not outcome.delivered and outcome.retryable:
        delay = next_delay(attempt + 1, ctx.settings.webhook_retry_schedule_s, outcome.retry_after_s)
    state = WebhookState.DELIVERED if outcome.delivered else WebhookState.PENDING if delay else WebhookState.FAILED
    target.save(
        {
            "state": state,
            "attempts": attempt + 1,
            "last_status": outcome.status,
            "last_error": outcome.error,
            "next_attempt_at": now + timedelta(seconds=delay) if delay is not None else None,
        }
    )
    log.info("%s: webhook attempt %d: %s (status %s)", target.name, attempt + 1, state.value, outcome.status)
    return NextRun(delay, attempt + 1) if delay is not None else None


def _attempt(target: Target, ctx: WebhookContext) -> Attempt:
    settings = ctx.settings
    assert target.url is not None
    if settings.webhook_secret is None:
        return Attempt(False, False, None, "the webhook worker has no TTSQ_WEBHOOK_SECRET", None)
    secrets = parse_secrets(settings.webhook_secret.get_secret_value())
    body = target.body()
    headers = signed_headers(secrets, target.event_id, int(utcnow().timestamp()), body)
    return deliver(
        target.url,
        headers,
        body,
        allow_private=settings.webhook_allow_private,
        connect_timeout_s=settings.webhook_connect_timeout_s,
        timeout_s=settings.webhook_timeout_s,
    )


def _deliver(lock: Lock, target_of: Callable[[], Target], attempt: int, name: str) -> NextRun | None:
    """One attempt under the event's claim; a duplicate task finds it held and does nothing."""
    ctx = webhook_context()
    if not lock.acquire():
        log.info("%s: webhook delivery already running; dropping this duplicate", name)
        return None
    try:
        return run_target(target_of(), attempt, ctx)
    except (JobNotFound, BatchNotFound):
        log.warning("%s has no record (expired); dropping its webhook", name)
        return None
    finally:
        with contextlib.suppress(LockError):  # expired: the attempt outlived its lock
            lock.release()


def _hop(following: NextRun | None) -> float | None:
    """How long to wait before the next run: never past half the visibility timeout."""
    if following is None:
        return None
    return min(following.countdown_s, webhook_context().settings.webhook_visibility_timeout_s / 2)


_RETRY_OUTAGES: Any = {
    "ignore_result": True,
    "autoretry_for": (redis.ConnectionError, redis.TimeoutError),
    "retry_backoff": 2,
    "retry_jitter": True,
    "max_retries": _settings.task_max_retries,
}


@app.task(name=DELIVER_WEBHOOK_TASK, **_RETRY_OUTAGES)
def deliver_webhook(job_id: str, attempt: int) -> None:
    """One attempt at delivering a finished job's event (see the module docstring)."""
    ctx = webhook_context()
    lock = ctx.jobs.step_lock(job_id, "webhook", round(ctx.settings.webhook_timeout_s) + 60)
    following = _deliver(lock, lambda: job_target(job_id, ctx), attempt, f"job {job_id}")
    hop = _hop(following)
    if following is not None and hop is not None:
        deliver_webhook.apply_async((job_id, following.attempt), countdown=hop, queue=WEBHOOK_QUEUE)


@app.task(name=DELIVER_BATCH_WEBHOOK_TASK, **_RETRY_OUTAGES)
def deliver_batch_webhook(batch_id: str, attempt: int) -> None:
    """One attempt at delivering a finished batch's event, like a job's."""
    ctx = webhook_context()
    lock = ctx.batches.step_lock(batch_id, "webhook", round(ctx.settings.webhook_timeout_s) + 60)
    following = _deliver(lock, lambda: batch_target(batch_id, ctx), attempt, f"batch {batch_id}")
    hop = _hop(following)
    if following is not None and hop is not None:
        deliver_batch_webhook.apply_async((batch_id, following.attempt), countdown=hop, queue=WEBHOOK_QUEUE)
