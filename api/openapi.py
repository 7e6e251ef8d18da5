"""The OpenAPI document as served: FastAPI's, completed with what it cannot derive from the routes.

- Limits that are settings: the lengths of ``text`` and of the speech ``input`` follow this server's
  ``max_text_chars``, and the description gives the body cap (``max_request_bytes``, by default
  derived from ``max_text_chars``) and says that a batch's texts together are bound by it.
- The error answers that come from outside a route, on every operation that can give them, each with
  the one error body (``ErrorPublic``, as JSON): 500 ``internal_error`` anywhere; 401, 429 and 503
  (with ``Retry-After``) on ``/v1``; 400 ``malformed_json``, 413 ``request_too_large`` and 422 where a
  body is read. 422 carries that body too, not FastAPI's ``HTTPValidationError``, which is never sent.
- No ``Content-Type`` header parameter: OpenAPI ignores one (the request body names its media type).
- The 200 of an idempotent replay: an operation that takes an ``Idempotency-Key`` answers a repeated
  request with what its first answer carried, as 200 (``Idempotent-Replayed: true``).
- API keys optional where the server does not require them (``{}`` among the security requirements),
  as a request without one is then served as the anonymous tenant.

So the document and the answers agree, which ``tests/test_schemathesis.py`` checks.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Final

from fastapi import FastAPI

from api.submission import MIN_SSML_TAGS, SSML_CHARS_PER_TAG, SSML_MARKUP_FACTOR
from tts_core.text.pauses import MAX_PAUSE_AT_ONE_PLACE_S
from ttsq.settings import Settings

Document = dict[str, Any]

ERROR_BODY: Final = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorPublic"}}}
RETRY_AFTER: Final = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "required": True, "schema": {"type": "integer"}}
}
UNSENT_SCHEMAS: Final = ("HTTPValidationError", "ValidationError")


def install_openapi(app: FastAPI, settings: Settings) -> None:
    """Serve the completed document (built once, on the first request for it)."""

    def openapi() -> Document:
        if app.openapi_schema is None:
            app.openapi_schema = complete(FastAPI.openapi(app), settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the document


def complete(document: Document, settings: Settings) -> Document:
    schemas = document["components"]["schemas"]
    set_text_limits(schemas, settings)
    document["info"]["description"] = (
        f"Request bodies are JSON of at most {settings.request_bytes_limit:,} bytes (413 request_too_large "
        "beyond, before any parsing): enough for a job's longest text however it is escaped; the items of a "
        f"batch share it, so a batch carries at most that much text in all. Every error answers "
        '{"error": {"code", "message"}}.'
    )
    for path, operations in document["paths"].items():
        for operation in operations.values():
            complete_operation(path, operation)
            if "security" in operation and not settings.keys_required:
                operation["security"] = [*operation["security"], {}]
    for name in UNSENT_SCHEMAS:
        schemas.pop(name, None)
    return document


def set_text_limits(schemas: Document, settings: Settings) -> None:
    """``maxLength`` is the longest ``text`` any request may carry (an SSML document's); the
    description says how much of it plain text and spoken text may be, and how much silence."""
    max_chars = settings.max_text_chars
    ssml_chars = SSML_MARKUP_FACTOR * max_chars
    ssml_tags = max(max_chars // SSML_CHARS_PER_TAG, MIN_SSML_TAGS)
    text = schemas["JobCreate"]["properties"]["text"]
    text["maxLength"] = ssml_chars
    text["description"] = (
        f"Text to speak: plain text of 1 to {max_chars:,} characters (longer: 413 text_too_long), or with "
        f"`text_type: ssml` an SSML document of up to {ssml_chars:,} characters and {ssml_tags:,} tags (more: 422 "
        f"invalid_ssml) whose spoken text has at most {max_chars:,}. Breaks in a row add up to at most "
        f"{MAX_PAUSE_AT_ONE_PLACE_S:g} s at one place (422 pause_too_long); all pauses together (sentence and "
        f"paragraph pauses, breaks) to at most {settings.silence_allowance_s:g} s plus {settings.silence_ratio:g} "
        f"times the speech (422 too_much_silence); a text whose digits alone plan into more than "
        f"{settings.max_job_segments:,} segments is refused (422 plan_too_long)."
    )
    speech_input = schemas["SpeechCreate"]["properties"]["input"]
    speech_input["maxLength"] = max_chars
    speech_input["description"] = f"Text to speak: 1 to {max_chars:,} characters (longer: 413 text_too_long)."
    preview_text = schemas["LexiconPreview"]["properties"]["text"]
    preview_text["maxLength"] = min(preview_text["maxLength"], max_chars)  # a preview's own cap, or the server's


def error_codes(path: str, operation: Document) -> set[int]:
    """The statuses that the middleware, the error handlers and the auth dependency add."""
    codes = {500}
    if path.startswith("/v1/"):
        codes |= {401, 429, 503}
    if "requestBody" in operation:
        codes |= {400, 413, 422}
    return codes


def complete_operation(path: str, operation: Document) -> None:
    _drop_content_type(operation)
    _add_replay(operation)
    responses: Document = operation["responses"]
    for added in error_codes(path, operation):
        responses.setdefault(str(added), {"description": HTTPStatus(added).phrase})
    for code, response in responses.items():
        if code.isdigit() and int(code) >= 400 and not _has_own_body(response):
            response["content"] = ERROR_BODY
        if code == "503":
            response["headers"] = {**response.get("headers", {}), **RETRY_AFTER}


def _drop_content_type(operation: Document) -> None:
    parameters = [p for p in operation.get("parameters", []) if not _is_header(p, "content-type")]
    if parameters:
        operation["parameters"] = parameters
    else:
        operation.pop("parameters", None)


def _add_replay(operation: Document) -> None:
    """An ``Idempotency-Key`` makes a repeated request answer 200 with what the first one made."""
    if not any(_is_header(p, "idempotency-key") for p in operation.get("parameters", [])):
        return
    responses: Document = operation["responses"]
    created = next((responses[code] for code in ("201", "202") if code in responses), None)
    if created is not None:
        responses.setdefault("200", {**created, "description": "What an earlier request with this key made"})


def _is_header(parameter: Document, name: str) -> bool:
    return bool(parameter.get("in") == "header" and str(parameter.get("name", "")).lower() == name)


def _has_own_body(response: Document) -> bool:
    """A JSON body of its own (readiness's 503), not the error body nor the one FastAPI assumes."""
    schema: Document = response.get("content", {}).get("application/json", {}).get("schema", {})
    ref = str(schema.get("$ref", ""))
    return bool(ref) and not ref.endswith(("/ErrorPublic", *(f"/{name}" for name in UNSENT_SCHEMAS)))
