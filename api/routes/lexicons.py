"""``/v1/lexicons``: a tenant's pronunciation lexicons (W3C PLS or JSON), which jobs name to fix how
words are said."""

from __future__ import annotations

import functools
import json
from typing import Annotated, Final

from fastapi import APIRouter, Header, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from api.deps import StateDep, TenantDep
from api.errors import ApiError
from api.heavy_work import Drafting
from api.json_checks import check_body
from api.lexicon_use import check_storable
from api.schemas import LEXICON_NAME_PATTERN, error_responses
from api.state import AppState
from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import Lexicon
from tts_core.lexicon.lexicon_documents import LexiconLimits, parse_json_lexicon, parse_pls
from ttsq.lexicons import LexiconSummary

router = APIRouter(prefix="/v1/lexicons", tags=["lexicons"])

PLS_MEDIA_TYPE: Final = "application/pls+xml"
PLS_MEDIA_TYPES: Final = frozenset({PLS_MEDIA_TYPE, "application/xml", "text/xml"})
"""Content types read as a W3C PLS document (stored under the one it came with)."""
JSON_MEDIA_TYPE: Final = "application/json"

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
            JSON_MEDIA_TYPE: {
                "schema": {
                    "type": "object",
                    "required": ["language", "entries"],
                    "properties": {
                        "language": {"type": "string"},
                        "entries": {"type": "array", "items": {"type": "object"}},
                    },
                }
            },
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
    """Checked in the API's helper processes if it is big (``api.heavy_work``), then stored."""
    settings = state.settings
    heavy = len(document) >= settings.heavy_request_chars
    lexicon = state.heavy.run(tenant, heavy, functools.partial(_checked, document=document, media_type=media_type))
    return state.stores.lexicons.put(tenant, name, document, media_type, lexicon, settings.lexicons_per_tenant)


def _checked(drafting: Drafting, *, document: bytes, media_type: str) -> Lexicon:
    """The document parsed, within the size limits, and sayable by some voice of its language."""
    settings = drafting.settings
    limits = LexiconLimits(max_entries=settings.lexicon_max_entries, max_bytes=settings.lexicon_max_bytes)
    lexicon = _parsed(document, media_type, limits)
    check_storable(lexicon, drafting.catalog)
    return lexicon


def _parsed(document: bytes, media_type: str, limits: LexiconLimits) -> Lexicon:
    if media_type != JSON_MEDIA_TYPE:
        return parse_pls(document, limits)
    if len(document) > limits.max_bytes:
        raise InvalidLexicon(
            f"the lexicon is {len(document)} bytes; at most {limits.max_bytes} (TTSQ_LEXICON_MAX_BYTES)"
        )
    try:
        data = json.loads(document)
        check_body(data)  # lone surrogates, NaN, nesting
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # PydanticCustomError is a ValueError
        raise InvalidLexicon(f"the body is not a usable JSON lexicon: {e}") from None
    return parse_json_lexicon(data, limits)


@router.get("", response_model=LexiconsPublic, responses=_ERRORS, summary="List your lexicons")
def list_lexicons(state: StateDep, tenant: TenantDep) -> LexiconsPublic:
    return LexiconsPublic(lexicons=state.stores.lexicons.summaries(tenant.id))


@router.get(
    "/{name}",
    response_class=Response,
    responses={200: {"content": {PLS_MEDIA_TYPE: {}, JSON_MEDIA_TYPE: {}}}, **_ERRORS},
    summary="Get a lexicon's document as stored",
)
def get_lexicon(name: LexiconNamePath, state: StateDep, tenant: TenantDep) -> Response:
    """The document exactly as it was uploaded, byte for byte, with its content type; the version in
    ``x-ttsq-lexicon-version``."""
    stored = state.stores.lexicons.document(tenant.id, name)
    return Response(
        stored.document, media_type=stored.content_type, headers={"x-ttsq-lexicon-version": str(stored.version)}
    )


@router.delete("/{name}", status_code=204, response_class=Response, responses=_ERRORS, summary="Delete a lexicon")
def delete_lexicon(name: LexiconNamePath, state: StateDep, tenant: TenantDep) -> Response:
    """Jobs submitted before still speak with the version they were given."""
    state.stores.lexicons.delete(tenant.id, name)
    return Response(status_code=204)
