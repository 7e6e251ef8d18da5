"""A lexicon a tenant sends, checked before anything uses it: parsed within the size limits (PLS or
ttsq's JSON form) and sayable by some voice of its language. The one check for a lexicon being
stored (``PUT /v1/lexicons/{name}``) and a draft being heard (``POST /v1/lexicon-preview``), so a
draft that plays is one that would store."""

from __future__ import annotations

import json
from typing import Final

from pydantic.config import JsonDict

from api.heavy_work import Drafting
from api.json_checks import check_body
from api.lexicon_use import check_storable
from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import Lexicon
from tts_core.lexicon.lexicon_documents import LexiconLimits, parse_json_lexicon, parse_pls

PLS_MEDIA_TYPE: Final = "application/pls+xml"
PLS_MEDIA_TYPES: Final = frozenset({PLS_MEDIA_TYPE, "application/xml", "text/xml"})
"""Content types read as a W3C PLS document (stored under the one it came with)."""
JSON_MEDIA_TYPE: Final = "application/json"
JSON_LEXICON_SCHEMA: Final[JsonDict] = {
    "type": "object",
    "required": ["language", "entries"],
    "properties": {"language": {"type": "string"}, "entries": {"type": "array", "items": {"type": "object"}}},
}
"""ttsq's JSON form of a lexicon as the OpenAPI document shows it (``lexicon_entries`` says the rest)."""


def checked_lexicon(drafting: Drafting, *, document: bytes, media_type: str) -> Lexicon:
    """The document parsed, within the size limits, and sayable by some voice of its language
    (:class:`InvalidLexicon` or ``LexiconRefused`` naming the entry otherwise). Run through
    ``api.heavy_work``, so in a helper process when the document is big."""
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
