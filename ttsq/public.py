"""A job as clients see it, in API answers, push events and webhook bodies alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ttsq.batch_bundles import BundleKind, BundleStatus
from ttsq.batches import BatchCounts, BatchRecord, BatchStatus
from ttsq.job_record import (
    JobError,
    JobOptions,
    JobProgress,
    JobRecord,
    JobResult,
    JobStatus,
    Priority,
    TextType,
    WebhookDelivery,
)
from ttsq.segment_store import SegmentStore, live_progress
from ttsq.storage import ObjectStore

_INTERNAL_FIELDS = {"result", "attempts", "stream", "keep", "tenant", "reserved_audio_ms", "requeues", "traceparent"}
"""Record fields clients never see (the result is shown with its URL)."""


class JobResultPublic(JobResult):
    """Finished audio as stored, plus presigned download URLs made when the job is read."""

    url: str
    marks_url: str | None = None
    """``marks.json``, if the job asked for marks."""
    subtitles_url: str | None = None
    """WebVTT subtitles, if the job asked for marks."""
    srt_url: str | None = None
    """The same subtitles as SubRip."""


def public_result(result: JobResult | None, objects: ObjectStore) -> JobResultPublic | None:
    """The stored result with a fresh presigned URL of each of its objects."""
    if result is None:
        return None

    def url(key: str | None) -> str | None:
        return objects.presigned_get_url(key) if key is not None else None

    return JobResultPublic(
        url=objects.presigned_get_url(result.key),
        marks_url=url(result.marks_key),
        subtitles_url=url(result.subtitles_key),
        srt_url=url(result.srt_key),
        **result.model_dump(),
    )


class JobPublic(BaseModel):
    """A job as clients see it."""

    id: str
    status: JobStatus
    voice: str
    format: str
    characters: int
    """Characters of the text as submitted, or of an SSML document's spoken text."""
    text_type: TextType
    options: JobOptions
    priority: Priority
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: JobProgress
    result: JobResultPublic | None
    error: JobError | None
    metadata: dict[str, Any]
    webhook_url: str | None
    webhook: WebhookDelivery | None
    purged_at: datetime | None
    """When the job's audio was deleted on request (``DELETE`` of a finished job)."""
    batch_id: str | None = None
    """The batch this job is an item of, if any."""
    ref: str | None = None
    """The client's reference of a batch item."""
    title: str | None = None
    """A batch item's chapter title, if it has one."""
    ttl_hours: int | None = None
    """Hours the job is kept after it finishes, where it asked; else the server's lifetime applies."""
    trace_id: str | None = None
    """The trace the job's work is recorded in (the caller's, where it sent a ``traceparent``);
    null when the server does not trace and the caller sent none."""

    @classmethod
    def from_record(cls, record: JobRecord, result: JobResultPublic | None) -> JobPublic:
        fields = record.model_dump(exclude={*_INTERNAL_FIELDS, "ttl_s"})
        ttl_hours = None if record.ttl_s is None else record.ttl_s // 3600
        return cls(**fields, result=result, ttl_hours=ttl_hours, trace_id=record.trace_id)


def public_job(record: JobRecord, segments: SegmentStore, objects: ObjectStore) -> JobPublic:
    """The public view of ``record``: live progress of a running job, fresh presigned URLs of its objects."""
    record = live_progress(record, segments)
    return JobPublic.from_record(record, public_result(record.result, objects))


class BatchCountsPublic(BaseModel):
    """A batch's items by status; ``pending`` are queued or running."""

    total: int
    pending: int
    succeeded: int
    failed: int
    canceled: int


class BatchProgressPublic(BaseModel):
    """How much of a batch's work is finished: characters and segments of its finished items."""

    characters_total: int
    characters_done: int
    segments_done: int


class BatchItemPublic(BaseModel):
    """One item of a batch: the client's ref, its job and how it ended."""

    ref: str | None
    title: str | None = None
    job_id: str
    status: JobStatus | None
    """None once the item's job record expired."""
    result: JobResultPublic | None
    error: JobError | None


class BundlePublic(BaseModel):
    """A bundle of a batch: ``pending`` until made; once ``ready``, a fresh presigned URL of it (and
    ``GET /v1/batches/{id}/files/book.<kind>`` serves it through the API)."""

    status: BundleStatus
    url: str | None = None
    bytes: int | None = None
    chapters: int | None = None
    """Items in it: fewer than the batch's total in a zip when some items did not succeed."""
    error: JobError | None = None
    """Why it could not be made, once ``failed``."""


def public_bundles(record: BatchRecord, objects: ObjectStore) -> dict[BundleKind, BundlePublic]:
    """Each bundle's state, with a fresh presigned URL of a ready one."""
    return {
        kind: BundlePublic(
            url=objects.presigned_get_url(state.key) if state.key is not None else None,
            **state.model_dump(exclude={"key"}),
        )
        for kind, state in record.bundles.items()
    }


class BatchPublic(BaseModel):
    """A batch as clients see it; ``items`` (a page of them) only where asked for."""

    id: str
    status: BatchStatus
    created_at: datetime
    finished_at: datetime | None
    canceled_at: datetime | None
    counts: BatchCountsPublic
    progress: BatchProgressPublic
    manifest_url: str | None
    """Presigned URL of ``manifest.json`` once the batch is finished."""
    webhook_url: str | None
    webhook: WebhookDelivery | None
    ttl_hours: int | None = None
    """As a job's: hours the batch, its manifest and its items are kept after it finishes."""
    title: str | None = None
    bundles: dict[BundleKind, BundlePublic] = {}
    """The bundles the batch asked for, by kind; none if it asked for none."""
    items: list[BatchItemPublic] | None = None
    next_cursor: str | None = None
    """Pass as ``cursor`` for the next page of items; null on the last one."""


def public_item(job_id: str, record: JobRecord | None, objects: ObjectStore) -> BatchItemPublic:
    if record is None:
        return BatchItemPublic(ref=None, job_id=job_id, status=None, result=None, error=None)
    result = public_result(record.result, objects)
    return BatchItemPublic(
        ref=record.ref, title=record.title, job_id=job_id, status=record.status, result=result, error=record.error
    )


def public_batch(
    record: BatchRecord,
    counts: BatchCounts,
    objects: ObjectStore,
    items: list[BatchItemPublic] | None = None,
    next_cursor: str | None = None,
) -> BatchPublic:
    """The public view of a batch, with a fresh presigned URL of its manifest once it has one."""
    return BatchPublic(
        id=record.id,
        status=record.status,
        created_at=record.created_at,
        finished_at=record.finished_at,
        canceled_at=record.canceled_at,
        counts=BatchCountsPublic(
            total=record.total,
            pending=record.total - counts.finished,
            succeeded=counts.succeeded,
            failed=counts.failed,
            canceled=counts.canceled,
        ),
        progress=BatchProgressPublic(
            characters_total=record.characters, characters_done=counts.chars_done, segments_done=counts.segments_done
        ),
        manifest_url=objects.presigned_get_url(record.manifest_key) if record.manifest_key else None,
        webhook_url=record.webhook_url,
        webhook=record.webhook,
        ttl_hours=None if record.ttl_s is None else record.ttl_s // 3600,
        title=record.title,
        bundles=public_bundles(record, objects),
        items=items,
        next_cursor=next_cursor,
    )
