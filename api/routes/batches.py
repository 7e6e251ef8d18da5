"""``/v1/batches``: many jobs submitted, followed and canceled as one (see :mod:`ttsq.batches`)."""

from __future__ import annotations

import logging
import uuid
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Header, Path, Query, Response

from api.admission import admit_and_submit_batch
from api.auth import TenantDep
from api.deps import StateDep
from api.errors import ApiError
from api.idempotency import mark_replayed, submit_once
from api.routes.jobs import MAX_PAGE, check_marks, parsed_text, require_json
from api.schemas import BatchCreate, BatchesPublic, ErrorPublic
from api.state import AppState
from api.webhook_urls import check_webhook_url
from tts_core.errors import TTSError
from ttsq.batches import BatchRecord, cancel_batch, new_batch_id
from ttsq.errors import BatchNotFound, InvalidCursor, ServiceError
from ttsq.estimate import estimate_job
from ttsq.jobs import JobRecord, Priority, new_job_id, utcnow
from ttsq.lifecycle import cancel_job, encode_cursor, parse_cursor
from ttsq.public import BatchPublic, public_batch, public_item
from ttsq.tenants import Tenant

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/batches", tags=["batches"])

_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorPublic} for code in (400, 401, 404, 409, 413, 415, 422, 429, 503)
}

_FIELD_OF_CODE: Final = {"voice_not_found": "voice", "invalid_option": "speaker", "marks_unsupported": "marks"}
"""Which item field a refusal names; any other refusal of an item is about its text."""


def _batch_id(batch_id: Annotated[str, Path(description="Batch id (UUID)")]) -> str:
    try:
        return str(uuid.UUID(batch_id))
    except ValueError:
        raise BatchNotFound(batch_id) from None


BatchId = Annotated[str, Depends(_batch_id)]


def owned_batch(state: AppState, tenant: Tenant, batch_id: str) -> BatchRecord:
    """The tenant's batch; another tenant's id is as unknown as an id that never existed."""
    record = state.batches.get(batch_id)
    if record.tenant != tenant.id:
        raise BatchNotFound(batch_id)
    return record


def _item(state: AppState, tenant: Tenant, body: BatchCreate, index: int, batch_id: str) -> tuple[JobRecord, str]:
    """Item ``index`` validated as a job of the batch, with its text; a refusal names the item."""
    settings = state.settings
    request = body.job_request(index)
    voice = request.voice or settings.default_voice
    try:
        info = state.catalog.get(voice)
        spoken, document = parsed_text(request, info.language, settings.max_text_chars)
        state.catalog.check_speakable(voice, spoken)
        check_marks(request, info)
        options = request.options(info.speaker_index(request.speaker))
        estimate = estimate_job(spoken, document, options, info.engine.value, settings)
    except (TTSError, ServiceError) as e:
        field = _FIELD_OF_CODE.get(e.code, "text")
        raise ApiError(422, e.code, f"items[{index}].{field}: {e}") from e
    record = JobRecord(
        id=new_job_id(),
        voice=voice,
        format=request.format.value,
        characters=len(spoken),
        options=options,
        metadata=request.metadata,
        created_at=utcnow(),
        priority=Priority.BULK,
        text_type=request.text_type,
        tenant=tenant.id,
        reserved_audio_ms=estimate.audio_ms,
        batch_id=batch_id,
        ref=body.items[index].ref or str(index),
    )
    return record, request.text


def _check_refs(items: list[JobRecord]) -> None:
    first: dict[str | None, int] = {}
    for index, record in enumerate(items):
        if record.ref in first:
            message = f"items[{index}].ref: {record.ref!r} is already the ref of items[{first[record.ref]}]"
            raise ApiError(422, "invalid_request", message)
        first[record.ref] = index


def _build(state: AppState, tenant: Tenant, body: BatchCreate) -> tuple[BatchRecord, list[tuple[JobRecord, str]]]:
    """Validate everything before anything is created."""
    limit = state.settings.max_batch_items
    if len(body.items) > limit:
        raise ApiError(422, "invalid_request", f"items: {len(body.items)} items; a batch takes at most {limit}")
    if body.webhook_url is not None:
        check_webhook_url(body.webhook_url, state.settings)
    batch_id = new_batch_id()
    items = [_item(state, tenant, body, index, batch_id) for index in range(len(body.items))]
    _check_refs([record for record, _ in items])
    batch = BatchRecord(
        id=batch_id,
        tenant=tenant.id,
        total=len(items),
        characters=sum(record.characters for record, _ in items),
        created_at=utcnow(),
        webhook_url=body.webhook_url,
    )
    return batch, items


def _public(state: AppState, record: BatchRecord) -> BatchPublic:
    return public_batch(record, state.batches.counts(record.id), state.objects)


@router.post(
    "",
    status_code=202,
    response_model=BatchPublic,
    responses=_ERRORS,
    dependencies=[Depends(require_json)],
    summary="Submit a batch of jobs",
)
def create_batch(
    body: BatchCreate,
    state: StateDep,
    tenant: TenantDep,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(description="As for jobs: the same key and body within 24 h answer with the first batch (200)."),
    ] = None,
) -> BatchPublic:
    """Validate every item, admit the batch whole (or refuse it whole), store and queue its jobs."""
    batch, items = _build(state, tenant, body)
    earlier = submit_once(
        state.idempotency,
        tenant.id,
        idempotency_key,
        body.model_dump(mode="json"),
        batch.id,
        state.batches.exists,
        lambda: admit_and_submit_batch(state, tenant, batch, items),
    )
    if earlier is not None:
        mark_replayed(response)
        return _public(state, owned_batch(state, tenant, earlier))
    response.headers["Location"] = f"/v1/batches/{batch.id}"
    return _public(state, batch)


@router.get("", response_model=BatchesPublic, responses=_ERRORS, summary="List your batches, newest first")
def get_batches(
    state: StateDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Batches per page.")] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")] = None,
) -> BatchesPublic:
    entries = state.batches.tenant_page(tenant.id, parse_cursor(cursor), limit)
    records = state.batches.many([batch_id for batch_id, _ in entries])
    batches = [_public(state, record) for record in records if record is not None]
    next_cursor = encode_cursor((entries[-1][1], entries[-1][0])) if len(entries) == limit else None
    return BatchesPublic(batches=batches, next_cursor=next_cursor)


@router.get("/{batch_id}", response_model=BatchPublic, responses=_ERRORS, summary="Get a batch and a page of items")
def get_batch(
    batch_id: BatchId,
    state: StateDep,
    tenant: TenantDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Items per page.")] = 50,
    cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")] = None,
) -> BatchPublic:
    """The batch's status, counts and progress, and a page of its items in item order."""
    record = owned_batch(state, tenant, batch_id)
    start = _item_offset(parse_cursor(cursor), batch_id)
    ids = state.batches.item_ids(batch_id, start, limit)
    items = [public_item(job_id, job, state.objects) for job_id, job in zip(ids, state.jobs.many(ids), strict=True)]
    following = start + len(ids)
    next_cursor = encode_cursor((following, batch_id)) if following < record.total else None
    return public_batch(record, state.batches.counts(batch_id), state.objects, items, next_cursor)


def _item_offset(after: tuple[float, str] | None, batch_id: str) -> int:
    if after is None:
        return 0
    if after[1] != batch_id or after[0] < 0 or after[0] != int(after[0]):
        raise InvalidCursor("cursor is not one this batch's pages gave out; start again without it")
    return int(after[0])


@router.delete("/{batch_id}", response_model=BatchPublic, responses=_ERRORS, summary="Cancel a batch")
def delete_batch(batch_id: BatchId, state: StateDep, tenant: TenantDep) -> BatchPublic:
    """Every item not finished is canceled (as ``DELETE /v1/jobs/{id}`` would); finished items keep
    their audio. A finished batch is answered as it is."""
    owned_batch(state, tenant, batch_id)
    lifecycle = state.lifecycle
    record = cancel_batch(batch_id, state.batches, state.jobs, lambda job_id: cancel_job(job_id, lifecycle, False))
    return _public(state, record)
