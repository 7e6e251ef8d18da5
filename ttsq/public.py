"""A job as clients see it, in API answers, push events and webhook bodies alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ttsq.jobs import (
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
from ttsq.progress import SegmentStore, live_progress
from ttsq.storage import ObjectStore

_INTERNAL_FIELDS = {"result", "attempts", "stream", "keep", "tenant", "reserved_audio_ms", "requeues"}
"""Record fields clients never see (the result is shown with its URL)."""


class JobResultPublic(JobResult):
    """Finished audio as stored, plus a presigned download URL made when the job is read."""

    url: str


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

    @classmethod
    def from_record(cls, record: JobRecord, url: str | None) -> JobPublic:
        result = None
        if record.result is not None and url is not None:
            result = JobResultPublic(url=url, **record.result.model_dump())
        fields = record.model_dump(exclude=_INTERNAL_FIELDS)
        return cls(**fields, result=result)


def public_job(record: JobRecord, segments: SegmentStore, objects: ObjectStore) -> JobPublic:
    """The public view of ``record``: live progress of a running job, a fresh presigned URL of its audio."""
    record = live_progress(record, segments)
    url = objects.presigned_get_url(record.result.key) if record.result else None
    return JobPublic.from_record(record, url)
