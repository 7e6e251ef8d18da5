"""``/v1/lexicons``: a tenant's pronunciation lexicons (W3C PLS or JSON), which jobs name to fix how
words are said."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Final

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from api.deps import StateDep, TenantDep
from api.errors import ApiError
from api.lexicon_checks import JSON_LEXICON_SCHEMA, JSON_MEDIA_TYPE, PLS_MEDIA_TYPE, PLS_MEDIA_TYPES, checked_lexicon
from api.object_download import content_disposition
from api.schemas import LEXICON_NAME_PATTERN, error_responses
from api.state import AppState
from tts_core.lexicon.lexicon import Lexicon
from tts_core.lexicon.pls_writer import to_pls
from ttsq.lexicons import LexiconRef, LexiconSummary

router = APIRouter(prefix="/v1/lexicons", tags=["lexicons"])

_ERRORS = error_responses(401, 404, 413, 415, 422, 503)

LexiconNamePath = Annotated[
    str, Path(pattern=LEXICON_NAME_PATTERN, description="The lexicon's name: 1 to 20 letters and digits.")
]


class LexiconsPublic(BaseModel):
    """The tenant's lexicons, by name."""

    lexicons: list[LexiconSummary]


_BODY: Final = {
    "requestBody": {
        "required": True,
        "description": "A W3C PLS 1.0 document, or ttsq's JSON form of a lexicon.",
        "content": {
            PLS_MEDIA_TYPE: {"schema": {"type": "string"}},
            JSON_MEDIA_TYPE: {"schema": JSON_LEXICON_SCHEMA},
        },
    }
}
"""The body as the OpenAPI document shows it (the route reads it raw, to keep it byte for byte)."""


@router.put(
    "/{name}",
    response_model=LexiconSummary,
    responses=_ERRORS,
    summary="Store or replace a lexicon",
    openapi_extra=_BODY,
)
async def put_lexicon(
    name: LexiconNamePath,
    request: Request,
    state: StateDep,
    tenant: TenantDep,
    content_type: Annotated[str | None, Header()] = None,
) -> LexiconSummary:
    """A W3C PLS 1.0 document (``application/pls+xml``) or ttsq's JSON form (``application/json``),
    checked whole before anything is stored; it replaces the lexicon of that name whole. Jobs
    submitted from now on use it; jobs submitted before keep the version they were given."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type not in PLS_MEDIA_TYPES | {JSON_MEDIA_TYPE}:
        raise ApiError(415, "unsupported_media_type", f"Content-Type must be {PLS_MEDIA_TYPE} or {JSON_MEDIA_TYPE}")
    document = await request.body()
    return await run_in_threadpool(_store, state, tenant.id, name, document, media_type)


def _store(state: AppState, tenant: str, name: str, document: bytes, media_type: str) -> LexiconSummary:
    """Checked (``api.lexicon_checks``; in the API's helper processes if it is big), then stored."""
    settings = state.settings
    heavy = len(document) >= settings.heavy_request_chars
    check = functools.partial(checked_lexicon, document=document, media_type=media_type)
    lexicon = state.heavy.run(tenant, heavy, check)
    return state.stores.lexicons.put(tenant, name, document, media_type, lexicon, settings.lexicons_per_tenant)


@router.get("", response_model=LexiconsPublic, responses=_ERRORS, summary="List your lexicons")
def list_lexicons(state: StateDep, tenant: TenantDep) -> LexiconsPublic:
    return LexiconsPublic(lexicons=state.stores.lexicons.summaries(tenant.id))


class ExportFormat(StrEnum):
    """A form ``GET /v1/lexicons/{name}`` may write a lexicon in besides the one it was uploaded in."""

    JSON = "json"
    PLS = "pls"


EXPORTS: Final[dict[ExportFormat, tuple[Callable[[Lexicon], bytes], str]]] = {
    ExportFormat.JSON: (lambda lexicon: json.dumps(lexicon.to_json(), ensure_ascii=False).encode(), JSON_MEDIA_TYPE),
    ExportFormat.PLS: (to_pls, PLS_MEDIA_TYPE),
}
"""How each form is written from the stored entries, and its content type."""


@router.get(
    "/{name}",
    response_class=Response,
    responses={200: {"content": {PLS_MEDIA_TYPE: {}, JSON_MEDIA_TYPE: {}}}, **_ERRORS},
    summary="Get a lexicon's document as stored, or written as JSON or PLS",
)
def get_lexicon(
    name: LexiconNamePath,
    state: StateDep,
    tenant: TenantDep,
    export: Annotated[
        ExportFormat | None,
        Query(
            alias="format",
            description="json: ttsq's JSON form; pls: a W3C PLS 1.0 document; either written from the entries "
            "and valid for PUT. Omitted: the document as uploaded.",
        ),
    ] = None,
    download: Annotated[bool, Query(description="Answer as an attachment named after the lexicon.")] = False,
) -> Response:
    """The document exactly as it was uploaded, byte for byte, with its content type, or the same
    entries in the form ``format`` names; the version in ``x-ttsq-lexicon-version``."""
    stored = state.stores.lexicons.document(tenant.id, name)
    document, media_type = stored.document, stored.content_type
    if export is not None:
        write, media_type = EXPORTS[export]
        document = write(state.stores.lexicons.lexicon(tenant.id, LexiconRef(name, stored.version)))
    headers = {"x-ttsq-lexicon-version": str(stored.version)}
    if download:
        extension = "json" if media_type == JSON_MEDIA_TYPE else "pls"
        headers["Content-Disposition"] = content_disposition("attachment", f"{name}.{extension}")
    return Response(document, media_type=media_type, headers=headers)


@router.delete("/{name}", status_code=204, response_class=Response, responses=_ERRORS, summary="Delete a lexicon")
def delete_lexicon(name: LexiconNamePath, state: StateDep, tenant: TenantDep) -> Response:
    """Jobs submitted before still speak with the version they were given."""
    state.stores.lexicons.delete(tenant.id, name)
    return Response(status_code=204)
