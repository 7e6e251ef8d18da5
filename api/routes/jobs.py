"""``/v1/jobs``: submit a synthesis job, read its status, fetch its audio."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from enum import StrEnum
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from api.deps import (
    ExistingJobId,
    IdempotencyKey,
    JobId,
    PageCursor,
    PageLimit,
    StateDep,
    TenantDep,
    owned_job,
    require_json,
)
from api.errors import ApiError, resource_location
from api.idempotency import mark_replayed
from api.object_download import object_response
from api.pacing import PacedSubmission
from api.schemas import SUBMIT_ERRORS, JobCreate, JobPublic, JobsPublic, error_responses
from api.state import AppState
from api.submission import Repeatable, draft_job, submit_job
from api.waiting import RESYNC_S, ended_record, worth_a_read
from ttsq.constants import MAX_WAIT_S
from ttsq.job_record import JobRecord, JobStatus
from ttsq.lifecycle import cancel_job, list_jobs, parse_cursor
from ttsq.public import public_job
from ttsq.tenants import Tenant

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_ERRORS = SUBMIT_ERRORS


def _public(state: AppState, record: JobRecord) -> JobPublic:
    return public_job(record, state.stores.segments, state.stores.objects)


async def read_job(state: AppState, tenant: Tenant, job_id: str) -> JobPublic:
    """The job's public view, read off the event loop (Redis and presigning are blocking calls)."""
    return await run_in_threadpool(lambda: _public(state, owned_job(state, tenant, job_id)))


@router.post(
    "",
    status_code=202,
    response_model=JobPublic,
    responses=_ERRORS,
    dependencies=[Depends(require_json)],
    summary="Submit a synthesis job",
)
def create_job(
    body: JobCreate,
    state: StateDep,
    tenant: TenantDep,
    response: Response,
    _turn: PacedSubmission,
    idempotency_key: IdempotencyKey = None,
) -> JobPublic:
    """Validate, admit, store the job and queue it; answers at once with the queued job."""
    draft = draft_job(state, tenant, body)
    submitted = submit_job(state, tenant, draft, Repeatable(idempotency_key, body))
    if submitted.replayed:
        mark_replayed(response)
        return _public(state, owned_job(state, tenant, submitted.id))
    response.headers["Location"] = resource_location("job", submitted.id)
    return _public(state, draft.record)


@router.get("", response_model=JobsPublic, responses=_ERRORS, summary="List your jobs, newest first")
def get_jobs(
    state: StateDep,
    tenant: TenantDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> JobsPublic:
    records, next_cursor = list_jobs(state.stores.jobs, tenant.id, status, limit, parse_cursor(cursor))
    return JobsPublic(jobs=[_public(state, r) for r in records], next_cursor=next_cursor)


@router.delete("/{job_id}", response_model=JobPublic, responses=_ERRORS, summary="Cancel a job, or delete its audio")
def delete_job(job_id: JobId, state: StateDep, tenant: TenantDep) -> JobPublic:
    """A queued job never runs; a running one stops (its remaining segments are skipped, its parts
    removed) and is ``canceled`` at once; a finished one keeps its record, and its stored audio is
    deleted (``purged_at``)."""
    owned_job(state, tenant, job_id)
    record = cancel_job(job_id, state.lifecycle)
    return _public(state, record)


@router.get("/{job_id}", response_model=JobPublic, responses=_ERRORS, summary="Get a job's status")
async def get_job(
    job_id: JobId,
    state: StateDep,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_S,
            allow_inf_nan=False,  # "nan" passes no bound's check: refused as not a number, not as over 60
            description="Seconds to wait for the job to finish before answering (long poll).",
        ),
    ] = 0,
    *,
    tenant: TenantDep,
) -> JobPublic:
    """The job now, or, with ``wait``, as soon as it is finished (or when ``wait`` runs out)."""
    if wait <= 0:
        return await read_job(state, tenant, job_id)
    deadline = time.monotonic() + wait
    async with state.hub.subscribe(job_id) as events:
        job = await read_job(state, tenant, job_id)
        while not job.status.terminal:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            first = await events.next(min(remaining, RESYNC_S))
            heard = [first, *events.drain()]
            ended = ended_record(heard)
            if ended is not None and ended.tenant == tenant.id:
                job = _public(state, ended)  # no Redis: presigning is the only work, on the loop
            elif worth_a_read(heard):
                job = await read_job(state, tenant, job_id)
        return job


@router.get(
    "/{job_id}/events",
    response_class=EventSourceResponse,
    responses=error_responses(404),
    summary="Follow a job's changes as Server-Sent Events",
)
async def job_events(job_id: ExistingJobId, state: StateDep, tenant: TenantDep) -> AsyncIterator[ServerSentEvent]:
    """The job at once, then one event per change (``running``, ``progress``, and the terminal
    status, each named so and carrying the job's JSON), then the stream ends."""
    async with state.hub.subscribe(job_id) as events:
        job = await read_job(state, tenant, job_id)
        number = 0
        yield ServerSentEvent(data=job, event=job.status.value, id=str(number))
        while not job.status.terminal:
            await events.next(RESYNC_S)
            events.drain()
            current = await read_job(state, tenant, job_id)
            name = change_name(job, current)
            job = current
            if name is not None:
                number += 1
                yield ServerSentEvent(data=job, event=name, id=str(number))


def change_name(before: JobPublic, after: JobPublic) -> str | None:
    """What an SSE client is told changed: the new status, ``progress``, or nothing."""
    if after.status is not before.status:
        return after.status.value
    if after.progress.segments_done != before.progress.segments_done:
        return "progress"
    return None


@router.get(
    "/{job_id}/audio",
    status_code=302,
    responses={**_ERRORS, 302: {"description": "Redirect to a presigned URL of the audio"}},
    summary="Download a finished job's audio",
)
def get_job_audio(job_id: JobId, state: StateDep, tenant: TenantDep) -> RedirectResponse:
    record = owned_job(state, tenant, job_id)
    if record.status is not JobStatus.SUCCEEDED or record.result is None:
        raise ApiError(409, "job_not_succeeded", f"job is {record.status.value}; audio exists once it has succeeded")
    return RedirectResponse(state.stores.objects.presigned_get_url(record.result.key), status_code=302)


class JobFile(StrEnum):
    """A finished job's stored files, as ``GET /v1/jobs/{id}/files/{file}`` names them."""

    AUDIO = "audio"
    MARKS = "marks.json"
    VTT = "subtitles.vtt"
    SRT = "subtitles.srt"


@router.get(
    "/{job_id}/files/{file}",
    response_class=StreamingResponse,
    responses={**error_responses(404, 409), 200: {"content": {"application/octet-stream": {}}}},
    summary="A finished job's audio, marks or subtitles, through the API",
)
def get_job_file(
    job_id: JobId,
    file: JobFile,
    state: StateDep,
    tenant: TenantDep,
    download: Annotated[bool, Query(description="Save it (attachment), not show it.")] = False,
) -> StreamingResponse:
    """The bytes themselves, with the key's authorization, for a page whose policy or store keeps it
    from the presigned URLs (no CORS on the store, a Content-Security-Policy of its own origin)."""
    record = owned_job(state, tenant, job_id)
    if record.status is not JobStatus.SUCCEEDED or record.result is None:
        raise ApiError(409, "job_not_succeeded", f"job is {record.status.value}; its files exist once it has succeeded")
    result = record.result
    keys = {JobFile.AUDIO: result.key, JobFile.MARKS: result.marks_key, JobFile.VTT: result.subtitles_key}
    key = keys.get(file, result.srt_key)
    if key is None:
        raise ApiError(404, "not_found", f"job {job_id} has no {file.value}: it asked for no marks")
    name = f"{job_id}.{record.output.format.extension}" if file is JobFile.AUDIO else f"{job_id}.{file.value}"
    return object_response(state.stores.objects, key, name, "attachment" if download else "inline")
