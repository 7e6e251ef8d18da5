"""``/v1/batches``: many jobs submitted, followed and canceled as one (see :mod:`ttsq.batches`)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import StreamingResponse

from api.deps import (
    BatchId,
    IdempotencyKey,
    PageCursor,
    PageLimit,
    StateDep,
    TenantDep,
    owned_batch,
    require_json,
)
from api.errors import ApiError, resource_location
from api.idempotency import mark_replayed
from api.object_download import object_response
from api.pacing import PacedSubmission
from api.schemas import SUBMIT_ERRORS, BatchCreate, BatchesPublic, error_responses
from api.state import AppState
from api.submission import Repeatable, draft_batch, submit_batch
from tts_core.text.file_names import book_name
from ttsq.batch_bundles import BundleFile, BundleStatus
from ttsq.batches import BatchRecord, cancel_batch
from ttsq.errors import InvalidCursor
from ttsq.lifecycle import cancel_job, encode_cursor, parse_cursor
from ttsq.public import BatchPublic, public_batch, public_item

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/batches", tags=["batches"])

_ERRORS = SUBMIT_ERRORS


def _public(state: AppState, record: BatchRecord) -> BatchPublic:
    return public_batch(record, state.stores.batches.counts(record.id), state.stores.objects)


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
    _turn: PacedSubmission,
    idempotency_key: IdempotencyKey = None,
) -> BatchPublic:
    """Validate every item, admit the batch whole (or refuse it whole), store and queue its jobs."""
    draft = draft_batch(state, tenant, body)
    submitted = submit_batch(state, tenant, draft, Repeatable(idempotency_key, body))
    if submitted.replayed:
        mark_replayed(response)
        return _public(state, owned_batch(state, tenant, submitted.id))
    response.headers["Location"] = resource_location("batch", submitted.id)
    return _public(state, draft.batch)


@router.get("", response_model=BatchesPublic, responses=_ERRORS, summary="List your batches, newest first")
def get_batches(
    state: StateDep,
    tenant: TenantDep,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> BatchesPublic:
    entries = state.stores.batches.tenant_page(tenant.id, parse_cursor(cursor), limit)
    records = state.stores.batches.many([batch_id for batch_id, _ in entries])
    batches = [_public(state, record) for record in records if record is not None]
    next_cursor = encode_cursor((entries[-1][1], entries[-1][0])) if len(entries) == limit else None
    return BatchesPublic(batches=batches, next_cursor=next_cursor)


@router.get("/{batch_id}", response_model=BatchPublic, responses=_ERRORS, summary="Get a batch and a page of items")
def get_batch(
    batch_id: BatchId,
    state: StateDep,
    tenant: TenantDep,
    limit: PageLimit = 50,
    cursor: PageCursor = None,
) -> BatchPublic:
    """The batch's status, counts and progress, and a page of its items in item order."""
    record = owned_batch(state, tenant, batch_id)
    start = _item_offset(parse_cursor(cursor), batch_id)
    ids = state.stores.batches.item_ids(batch_id, start, limit)
    items = [
        public_item(job_id, job, state.stores.objects)
        for job_id, job in zip(ids, state.stores.jobs.many(ids), strict=True)
    ]
    following = start + len(ids)
    next_cursor = encode_cursor((following, batch_id)) if following < record.total else None
    return public_batch(record, state.stores.batches.counts(batch_id), state.stores.objects, items, next_cursor)


@router.get(
    "/{batch_id}/files/{file}",
    response_class=StreamingResponse,
    responses={**error_responses(404, 409), 200: {"content": {"application/zip": {}, "audio/mp4": {}}}},
    summary="A finished batch's bundle (all chapters as a zip, or an m4b audiobook), through the API",
)
def get_batch_file(
    batch_id: BatchId,
    file: BundleFile,
    state: StateDep,
    tenant: TenantDep,
    download: Annotated[bool, Query(description="Save it (attachment), not show it.")] = False,
) -> StreamingResponse:
    """The bundle's bytes with the key's authorization, for a page that cannot follow the presigned
    ``bundles.<kind>.url``; named after the batch's ``title`` (``book.zip`` without one)."""
    record = owned_batch(state, tenant, batch_id)
    kind = file.kind
    bundle = record.bundles.get(kind)
    if bundle is None:
        raise ApiError(404, "not_found", f"batch {batch_id} asked for no {kind.value} bundle")
    if bundle.status is BundleStatus.PENDING:
        raise ApiError(409, "bundle_pending", f"the {kind.value} bundle is not made yet; it is once the batch finishes")
    if bundle.key is None:
        reason = bundle.error.message if bundle.error is not None else "it could not be made"
        raise ApiError(409, "bundle_failed", f"the {kind.value} bundle failed: {reason}")
    name = f"{book_name(record.title)}.{kind.value}"
    return object_response(state.stores.objects, bundle.key, name, "attachment" if download else "inline")


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
    record = cancel_batch(
        batch_id, state.stores.batches, state.stores.jobs, lambda job_id: cancel_job(job_id, lifecycle, purge=False)
    )
    return _public(state, record)
