"""What a client can do to its jobs besides submitting them: list them, cancel them, delete their audio.

Cancel is a conditional status change like any other (:meth:`JobStore.transition`): a queued job's
entry task then finds it not startable, a running job's remaining segment tasks find it not running
and skip, and the parts already stored are deleted here (a segment that finishes afterwards deletes
its own part when it sees the status, ``workers.pipeline.run_segment``). The ``job.canceled`` webhook
is queued like the others, by the terminal write itself (``ttsq.webhook_schedule``). A finished job
keeps its record; its stored objects are deleted.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ttsq.constants import job_objects_prefix
from ttsq.errors import InvalidCursor
from ttsq.job_record import TERMINAL_STATUSES, JobError, JobRecord, JobStatus, finish_changes, utcnow
from ttsq.job_store import JobStore
from ttsq.parts import PartStore, counted_parts
from ttsq.segment_store import SegmentStore
from ttsq.storage import ObjectStore

log = logging.getLogger(__name__)

_CANCELABLE = tuple(status for status in JobStatus if not status.terminal)

Cursor = tuple[float, str]


@dataclass(frozen=True)
class Lifecycle:
    """The stores a cancel touches, and how to send a batch's finishing task."""

    jobs: JobStore
    segments: SegmentStore
    parts: PartStore
    objects: ObjectStore
    send_finish_batch: Callable[[str], None]

    def announce(self, record: JobRecord) -> None:
        """What a job's terminal write sets going besides its webhook event (which that write queued
        itself): its batch's finishing task if it was the batch's last unfinished item."""
        if record.completes_batch and record.batch_id is not None:
            self.send_finish_batch(record.batch_id)


def cancel_job(job_id: str, lc: Lifecycle, *, purge: bool = True) -> JobRecord:
    """Cancel the job if it is not finished, else (with ``purge``) delete its stored objects; the job
    as it is after."""

    def changes(current: JobRecord) -> dict[str, Any]:
        return finish_changes(current, JobStatus.CANCELED)

    canceled = lc.jobs.transition_by(job_id, _CANCELABLE, JobStatus.CANCELED, changes)
    if canceled is None:  # finished already (perhaps just now)
        return purge_job(job_id, lc) if purge else lc.jobs.get(job_id)
    log.info("job %s canceled", job_id)
    drop_work(job_id, lc)
    lc.announce(canceled)
    return canceled


def fail_job(job_id: str, error: JobError, lc: Lifecycle) -> JobRecord | None:
    """Record a permanent failure; a finished or canceled job is left alone (None)."""

    def changes(current: JobRecord) -> dict[str, Any]:
        return {**finish_changes(current, JobStatus.FAILED), "error": error}

    failed = lc.jobs.transition_by(job_id, _CANCELABLE, JobStatus.FAILED, changes)
    if failed is None:
        return None
    drop_work(job_id, lc)
    lc.announce(failed)
    return failed


def drop_work(job_id: str, lc: Lifecycle) -> None:
    """A job that ended without success: delete its counted parts and its plan. (A segment counted
    after this deletes its own part when it sees the status, ``workers.pipeline.run_segment``.)"""
    lc.parts.delete(counted_parts(job_id, lc.segments.winners(job_id)))
    lc.segments.drop_plan(job_id)


def purge_job(job_id: str, lc: Lifecycle) -> JobRecord:
    """Delete a finished job's objects; its record stays, with ``purged_at`` and no result."""
    record = lc.jobs.get(job_id)
    keys = lc.objects.list_keys(job_objects_prefix(record.tenant, job_id))
    if keys:
        lc.objects.delete_many(keys)
    if record.result is not None:
        lc.jobs.forget_object(*record.result.keys())
    if record.purged_at is not None:
        return record
    purged = lc.jobs.update_by(job_id, TERMINAL_STATUSES, lambda _: {"purged_at": utcnow(), "result": None})
    log.info("job %s: %d stored objects deleted", job_id, len(keys))
    return purged or lc.jobs.get(job_id)


def encode_cursor(cursor: Cursor) -> str:
    raw = json.dumps([cursor[0], cursor[1]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_cursor(text: str | None) -> Cursor | None:
    if text is None:
        return None
    try:
        created, job_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        return float(created), str(job_id)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidCursor("cursor is not one this API gave out; start again without it") from None


SCAN_FACTOR = 20
"""With a status filter, a page looks at up to this many times ``limit`` jobs before it answers
(with a cursor to go on), so one request never walks a tenant's whole history."""


def list_jobs(
    jobs: JobStore, tenant: str, status: JobStatus | None, limit: int, after: Cursor | None
) -> tuple[list[JobRecord], str | None]:
    """A page of the tenant's jobs, newest first, and the cursor of the next page (None at the end)."""
    found: list[JobRecord] = []
    scanned = 0
    while len(found) < limit and scanned < SCAN_FACTOR * limit:
        entries = jobs.tenant_page(tenant, after, limit)
        if not entries:
            return found, None
        scanned += len(entries)
        for (job_id, created), record in zip(entries, jobs.many([e[0] for e in entries]), strict=True):
            after = (created, job_id)
            if record is not None and (status is None or record.status is status):
                found.append(record)
                if len(found) == limit:
                    break
    return found, None if after is None else encode_cursor(after)
