"""``/v1/jobs``: submit a synthesis job, read its status, fetch its audio."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Header, Path, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from api.admission import admit_and_submit
from api.auth import TenantDep
from api.deps import StateDep
from api.errors import ApiError
from api.idempotency import IN_FLIGHT_WAIT_S, mark_replayed, submit_once
from api.schemas import ErrorPublic, JobCreate, JobPublic, JobsPublic
from api.state import AppState
from api.webhook_urls import check_webhook_url
from tts_core.catalog import VoiceInfo
from tts_core.engines import engine_of
from tts_core.errors import MarksUnsupported, TextTooLong
from tts_core.speech_markup import InvalidSsml, SsmlDocument, parse_ssml
from tts_core.text import check_text
from ttsq.constants import MAX_WAIT_S
from ttsq.errors import JobNotFound
from ttsq.estimate import estimate_job
from ttsq.events import EventKind
from ttsq.jobs import JobRecord, JobStatus, Priority, TextType, new_job_id, utcnow
from ttsq.lifecycle import cancel_job, list_jobs, parse_cursor
from ttsq.public import public_job
from ttsq.settings import Settings
from ttsq.tenants import Tenant

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

SSML_MARKUP_FACTOR: Final = 10
"""An SSML body may be this many times the character limit in all, markup included."""

SSML_CHARS_PER_TAG: Final = 5
"""An SSML document may have one tag (a ``<``) per this many characters of the limit, and 1,000 in
any case: 200,000 at the default, plenty for a book marked up word by word. Each parsed element
costs the API (and the planning worker) memory, about 120 bytes: ten million characters of
``<s>a</s>`` took the API from 114 to 415 MiB before this bound."""

MIN_SSML_TAGS: Final = 1000

MAX_PAGE: Final = 200

RESYNC_S: Final = 30.0
"""A waiter re-reads its job at least this often, even if no event came (a lost message costs a
late answer, never a stuck one)."""

_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorPublic} for code in (400, 401, 404, 409, 413, 415, 422, 429, 503)
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
    return public_job(record, state.segments, state.objects)


def owned_job(state: AppState, tenant: Tenant, job_id: str) -> JobRecord:
    """The tenant's job; another tenant's id is as unknown as an id that never existed."""
    record = state.jobs.get(job_id)
    if record.tenant != tenant.id:
        raise JobNotFound(job_id)
    return record


async def read_job(state: AppState, tenant: Tenant, job_id: str) -> JobPublic:
    """The job's public view, read off the event loop (Redis and presigning are blocking calls)."""
    return await run_in_threadpool(lambda: _public(state, owned_job(state, tenant, job_id)))


async def _existing_job_id(job_id: JobId, state: StateDep, tenant: TenantDep) -> str:
    """404 before a stream starts, not inside it."""
    await run_in_threadpool(owned_job, state, tenant, job_id)
    return job_id


ExistingJobId = Annotated[str, Depends(_existing_job_id)]


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
    idempotency_key: Annotated[
        str | None,
        Header(
            description="Makes retries safe: the same key and body within 24 h answer with the job the "
            "first request created (200); the same key with another body is refused (409 idempotency_conflict); "
            f"a repeat while the first is still being handled waits for it up to {IN_FLIGHT_WAIT_S:g} s, then answers "
            "409 idempotency_in_flight with Retry-After.",
        ),
    ] = None,
) -> JobPublic:
    """Validate, admit, store the job and queue it; answers at once with the queued job."""
    settings = state.settings
    voice = body.voice or settings.default_voice
    info = state.catalog.get(voice)
    spoken, document = parsed_text(body, info.language, settings.max_text_chars)
    state.catalog.check_speakable(voice, spoken)
    check_marks(body, info)
    options = body.options(info.speaker_index(body.speaker))
    estimate = estimate_job(spoken, document, options, info.engine.value, settings)
    if body.webhook_url is not None:
        check_webhook_url(body.webhook_url, settings)
    record = JobRecord(
        id=new_job_id(),
        voice=voice,
        format=body.format.value,
        characters=len(spoken),
        options=options,
        metadata=body.metadata,
        created_at=utcnow(),
        priority=body.priority or default_priority(len(body.text), settings),
        webhook_url=body.webhook_url,
        text_type=body.text_type,
        tenant=tenant.id,
        reserved_audio_ms=estimate.audio_ms,
    )
    earlier = submit_once(
        state.idempotency,
        tenant.id,
        idempotency_key,
        body.model_dump(mode="json"),
        record.id,
        state.jobs.exists,
        lambda: admit_and_submit(state, tenant, record, body.text),
    )
    if earlier is not None:
        mark_replayed(response)
        return _public(state, owned_job(state, tenant, earlier))
    response.headers["Location"] = f"/v1/jobs/{record.id}"
    return _public(state, record)


def parsed_text(body: JobCreate, language: str, max_chars: int) -> tuple[str, SsmlDocument | None]:
    """What the voice will read: the text itself, or an SSML document's spoken text with the document
    (parsed here, so invalid SSML is refused with its line and column before any job exists). Limits
    count spoken characters; the markup around them may add up to ``SSML_MARKUP_FACTOR`` times as much."""
    if body.text_type is TextType.TEXT:
        check_text(body.text, max_chars)
        return body.text, None
    if len(body.text) > SSML_MARKUP_FACTOR * max_chars:
        raise TextTooLong(len(body.text), SSML_MARKUP_FACTOR * max_chars)
    check_tag_count(body.text, max(max_chars // SSML_CHARS_PER_TAG, MIN_SSML_TAGS))
    document = parse_ssml(body.text, default_lang=language)
    check_text(document.spoken_text, max_chars)
    return document.spoken_text, document


def check_marks(body: JobCreate, voice: VoiceInfo) -> None:
    """Marks point at characters of plain text, and word marks need a model that times its input."""
    if not body.marks:
        return
    if body.text_type is TextType.SSML:
        raise MarksUnsupported("marks are made for plain text only, not for text_type ssml")
    if "word" in body.marks and not engine_of(voice).times_words:
        raise MarksUnsupported(
            f"word marks need a Piper voice; {voice.id} ({voice.engine.value}) gives sentence marks only"
        )


def check_tag_count(source: str, limit: int) -> None:
    """Refuse an SSML document of more than ``limit`` tags before parsing it, naming where the first
    tag past the limit is."""
    if source.count("<") <= limit:
        return
    at = -1
    for _ in range(limit + 1):
        at = source.index("<", at + 1)
    line = source.count("\n", 0, at) + 1
    raise InvalidSsml(
        f"more than {limit} tags (one per {SSML_CHARS_PER_TAG} characters of the limit)",
        line,
        at - source.rfind("\n", 0, at),
    )


def default_priority(characters: int, settings: Settings) -> Priority:
    return Priority.INTERACTIVE if characters <= settings.interactive_max_chars else Priority.BULK


@router.get("", response_model=JobsPublic, responses=_ERRORS, summary="List your jobs, newest first")
def get_jobs(
    state: StateDep,
    tenant: TenantDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Jobs per page.")] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")] = None,
) -> JobsPublic:
    records, next_cursor = list_jobs(state.jobs, tenant.id, status, limit, parse_cursor(cursor))
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
        Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for the job to finish before answering (long poll)."),
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
            if any(event is None or event.kind is not EventKind.SEGMENT for event in heard):
                job = await read_job(state, tenant, job_id)
        return job


@router.get(
    "/{job_id}/events",
    response_class=EventSourceResponse,
    responses={404: {"model": ErrorPublic}},
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
    return RedirectResponse(state.objects.presigned_get_url(record.result.key), status_code=302)
