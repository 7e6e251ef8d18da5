"""A webhook event as a delivery needs it: read from its record, signed, and its outcome written back.

The record (the job's, or for a batch's event the batch's) keeps where delivery stands
(``webhook.state/attempts/last_status/last_error/next_attempt_at``), as the API shows it. An
attempt's outcome is written only if the record still shows the attempts the attempt started from,
so a dispatcher that was paused past its lease and resumed after another one took the event over
changes nothing (and its caller leaves the schedule to the other).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ttsq.batches import BatchRecord, BatchStatus, BatchStore
from ttsq.errors import BatchNotFound, JobNotFound
from ttsq.job_record import TERMINAL_STATUSES, JobRecord, WebhookDelivery, WebhookState, utcnow
from ttsq.job_store import JobStore
from ttsq.public import public_batch, public_job
from ttsq.segment_store import SegmentStore
from ttsq.storage import ObjectStore
from ttsq.webhook_delivery import Attempt, next_delay
from ttsq.webhook_schedule import EventKind, EventRef, Lane, lane_of


@dataclass(frozen=True)
class Event:
    """A pending event as its record stood when it was read."""

    ref: EventRef
    tenant: str
    url: str | None
    hook: WebhookDelivery | None
    event_id: str
    """The same on every attempt of the event, so receivers can drop repeats."""
    body: Callable[[], bytes]
    """``{type, timestamp, data}``, made at each attempt (its presigned links are fresh)."""
    traceparent: str | None = None
    """The trace each attempt's span joins: its job's (``ttsq.tracing``); None for a batch's event."""

    @property
    def lane(self) -> Lane:
        return lane_of(self.tenant, self.url or "")


def job_event_id(record: JobRecord) -> str:
    return f"msg_{record.id.replace('-', '')}_{record.status.value}"


def batch_event_id(record: BatchRecord) -> str:
    return f"msg_{record.id.replace('-', '')}_batch_{record.status.value}"


def _envelope(hook: WebhookDelivery | None, finished_at: datetime | None, data: dict[str, Any]) -> bytes:
    assert hook is not None
    body = {"type": hook.event, "timestamp": (finished_at or utcnow()).isoformat(), "data": data}
    return json.dumps(body, separators=(",", ":")).encode()


def next_state(attempts_made: int, outcome: Attempt, schedule_s: list[float], now: datetime) -> dict[str, Any]:
    """The delivery state after attempt number ``attempts_made + 1`` came to ``outcome``."""
    delay = None
    if not outcome.delivered and outcome.retryable:
        delay = next_delay(attempts_made + 1, schedule_s, outcome.retry_after_s)
    state = WebhookState.DELIVERED if outcome.delivered else WebhookState.PENDING if delay else WebhookState.FAILED
    return {
        "state": state,
        "attempts": attempts_made + 1,
        "last_status": outcome.status,
        "last_error": outcome.error,
        "next_attempt_at": now + timedelta(seconds=delay) if delay is not None else None,
    }


class EventStore:
    """Reads events from their records and writes attempts' outcomes back."""

    def __init__(self, jobs: JobStore, batches: BatchStore, segments: SegmentStore, objects: ObjectStore) -> None:
        self._jobs = jobs
        self._batches = batches
        self._segments = segments
        self._objects = objects

    def load(self, ref: EventRef) -> Event | None:
        """The event as its record stands; None if the record is gone (expired)."""
        try:
            return self._job(ref) if ref.kind is EventKind.JOB else self._batch(ref)
        except (JobNotFound, BatchNotFound):
            return None

    def _job(self, ref: EventRef) -> Event:
        record = self._jobs.get(ref.id)

        def body() -> bytes:
            data = public_job(record, self._segments, self._objects).model_dump(mode="json")
            return _envelope(record.webhook, record.finished_at, data)

        event_id = job_event_id(record)
        return Event(ref, record.tenant, record.webhook_url, record.webhook, event_id, body, record.traceparent)

    def _batch(self, ref: EventRef) -> Event:
        """A finished batch's event: ``batch.completed`` (or ``batch.canceled``), its data the batch
        as ``GET /v1/batches/{id}`` shows it without items (counts, progress, ``manifest_url``)."""
        record = self._batches.get(ref.id)

        def body() -> bytes:
            counts = self._batches.counts(ref.id)
            data = public_batch(record, counts, self._objects).model_dump(mode="json")
            return _envelope(record.webhook, record.finished_at, data)

        return Event(ref, record.tenant, record.webhook_url, record.webhook, batch_event_id(record), body)

    def save(self, event: Event, attempts_made: int, changes: dict[str, Any]) -> bool:
        """Apply ``changes`` to the delivery state if it is still pending after ``attempts_made``
        attempts; whether it was (False: another dispatcher moved it on, or the record is gone)."""
        applied = False

        def update(hook: WebhookDelivery | None) -> dict[str, Any]:
            nonlocal applied  # the last run of the transaction's function is the one that counts
            applied = hook is not None and hook.state is WebhookState.PENDING and hook.attempts == attempts_made
            return {"webhook": hook.model_copy(update=changes)} if applied and hook is not None else {}

        try:
            if event.ref.kind is EventKind.JOB:
                self._jobs.update_by(event.ref.id, TERMINAL_STATUSES, lambda current: update(current.webhook))
            else:
                self._batches.update(event.ref.id, tuple(BatchStatus), lambda current: update(current.webhook))
        except (JobNotFound, BatchNotFound):
            return False
        return applied
