"""``/v1/jobs``: submit a synthesis job, read its status, fetch its audio."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated

import redis
from fastapi import APIRouter, Depends, Header, Path, Response
from fastapi.responses import RedirectResponse
from kombu.exceptions import OperationalError

from api.deps import StateDep
from api.errors import ApiError
from api.schemas import ErrorPublic, JobCreate, JobPublic
from api.state import AppState
from tts_core.text import check_text
from ttsq.constants import SYNTHESIZE_TASK
from ttsq.errors import JobNotFound, QueueUnavailable, StoreUnavailable
from ttsq.jobs import JobRecord, JobStatus, new_job_id, utcnow
from ttsq.progress import live_progress

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorPublic} for code in (400, 404, 409, 413, 415, 422, 503)
}


def require_json(content_type: Annotated[str | None, Header()] = None) -> None:
    """Refuse bodies that are not declared as JSON, before anything else looks at them."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "Content-Type must be application/json")


def _job_id(job_id: Annotated[str, Path(description="Job id (UUID)")]) -> str:
    try:
        return str(uuid.UUID(job_id))
    except ValueError:
        raise JobNotFound(job_id) from None


JobId = Annotated[str, Depends(_job_id)]


def _public(state: AppState, record: JobRecord) -> JobPublic:
    record = live_progress(record, state.segments)
    url = state.objects.presigned_get_url(record.result.key) if record.result else None
    return JobPublic.from_record(record, url)


@router.post(
    "",
    status_code=202,
    response_model=JobPublic,
    responses=_ERRORS,
    dependencies=[Depends(require_json)],
    summary="Submit a synthesis job",
)
def create_job(body: JobCreate, state: StateDep, response: Response) -> JobPublic:
    """Validate, store the job and queue it; answers at once with the queued job."""
    settings = state.settings
    check_text(body.text, settings.max_text_chars)
    voice = body.voice or settings.default_voice
    state.catalog.get(voice)
    record = JobRecord(
        id=new_job_id(),
        voice=voice,
        format=body.format.value,
        characters=len(body.text),
        options=body.options(),
        metadata=body.metadata,
        created_at=utcnow(),
    )
    try:
        state.jobs.create(record, body.text)
    except redis.RedisError as e:
        raise StoreUnavailable(f"job store unavailable: {e}") from e
    try:
        state.producer.send_task(SYNTHESIZE_TASK, args=[record.id], task_id=record.id, queue=settings.queue)
    except (OperationalError, redis.RedisError) as e:
        state.jobs.delete(record.id)
        raise QueueUnavailable(f"job queue unavailable: {e}") from e
    log.info("job %s queued: voice=%s format=%s chars=%d", record.id, voice, record.format, record.characters)
    response.headers["Location"] = f"/v1/jobs/{record.id}"
    return _public(state, record)


@router.get("/{job_id}", response_model=JobPublic, responses=_ERRORS, summary="Get a job's status")
def get_job(job_id: JobId, state: StateDep) -> JobPublic:
    return _public(state, state.jobs.get(job_id))


@router.get(
    "/{job_id}/audio",
    status_code=302,
    responses={**_ERRORS, 302: {"description": "Redirect to a presigned URL of the audio"}},
    summary="Download a finished job's audio",
)
def get_job_audio(job_id: JobId, state: StateDep) -> RedirectResponse:
    record = state.jobs.get(job_id)
    if record.status is not JobStatus.SUCCEEDED or record.result is None:
        raise ApiError(409, "job_not_succeeded", f"job is {record.status.value}; audio exists once it has succeeded")
    return RedirectResponse(state.objects.presigned_get_url(record.result.key), status_code=302)
