"""The one place where errors become HTTP status codes and ``{"error": {code, message}}`` bodies.

Clients never see what only the operator should: an outage (503) is answered with a fixed message
per code and a ``Retry-After``, its detail (hosts, ports, the library's words) going to the log;
anything unforeseen is a 500 ``internal_error`` whose traceback only the log has. An outage that cut
off a submission after its write may have been applied names what it may have made: ``Location``
and ``job_id`` (or ``batch_id``) in the error, so the client looks it up instead of submitting again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from tts_core.base.errors import InvalidInput, TextTooLong, TTSError, rebuilt
from ttsq.errors import (
    INTERNAL_ERROR,
    BatchNotFound,
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidCursor,
    InvalidIdempotencyKey,
    JobNotFound,
    LexiconNotFound,
    QueueBehind,
    QueueUnavailable,
    QuotaExceeded,
    RequestRefused,
    ServiceError,
    StorageUnavailable,
    StoreUnavailable,
    TransientError,
    Unauthorized,
    Unconfirmed,
)

log = logging.getLogger(__name__)

RETRY_AFTER_S: Final = 1
"""``Retry-After`` of an outage's 503: a client honouring it is back within a second of the part's
return (a killed Redis serves again about a second after its death; with 5 s, a client that met
the outage came back up to 5 s after the part did)."""

OUTAGE_MESSAGES: Final[Mapping[str, str]] = {
    StoreUnavailable.code: "the job store is unavailable; retry shortly",
    QueueUnavailable.code: "the job queue is unavailable; retry shortly",
    StorageUnavailable.code: "the object store is unavailable; retry shortly",
    QueueBehind.code: "the queue is too far behind to take this job now; retry after the seconds Retry-After gives",
}
"""What a client is told with a 503, whatever the exception said (an outage's words may name hosts)."""
OUTAGE_MESSAGE: Final = "a service ttsq depends on is unavailable; retry shortly"
UNCONFIRMED_NOTE: Final = (
    "; the {kind} may have been stored before the outage: GET its Location (404 if it was not); "
    "a repeat with the same Idempotency-Key answers with it if it was"
)
"""Added to an outage's message when the submission's write may have been applied."""
INTERNAL_MESSAGE: Final = "internal error; the server's log has the details"


class ApiError(Exception):
    """An error with its HTTP status decided where it is raised (inside ``api/`` only)."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt, (type(self), self.args, self.__dict__)


COLLECTIONS: Final[Mapping[str, str]] = {"job": "/v1/jobs", "batch": "/v1/batches"}
"""Where jobs and batches are read, by kind."""


def resource_location(kind: Literal["job", "batch"], resource_id: str) -> str:
    """Where a job or batch is read: a 202's and an unconfirmed 503's ``Location``."""
    return f"{COLLECTIONS[kind]}/{resource_id}"


def error_response(
    status_code: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    fields: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The error body (with ``fields`` beside code and message); a 503 always says when to retry.
    Lone surrogates a message may quote from the request are escaped, since they cannot be written
    as UTF-8."""
    all_headers = dict(headers or {})
    if status_code == 503:
        all_headers.setdefault("Retry-After", str(RETRY_AFTER_S))
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": {"code": code, "message": text, **(fields or {})}}, status_code, headers=all_headers)


def describe_validation_errors(errors: Sequence[Any]) -> str:
    """Turn pydantic's error list into one sentence naming each offending field."""
    parts = []
    for error in errors:
        location = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.get("loc", ()) if p != "body")
        location = location.removeprefix(".")
        message = error.get("msg", "invalid value")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def error_status(error: TTSError | ServiceError) -> int:
    """The HTTP status of a coded error, for the facades that answer it in their own shape."""
    if isinstance(error, TextTooLong):
        return 413
    if isinstance(error, Unauthorized):
        return 401
    if isinstance(error, QuotaExceeded):
        return 429
    if isinstance(error, IdempotencyConflict | IdempotencyInFlight):
        return 409
    if isinstance(error, InvalidIdempotencyKey | InvalidCursor):
        return 422
    if isinstance(error, InvalidInput | RequestRefused):
        return 422
    if isinstance(error, JobNotFound | BatchNotFound | LexiconNotFound):
        return 404
    if isinstance(error, TransientError):
        return 503
    return 500


async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = "; ".join(str(e.get("ctx", {}).get("error", "")) for e in errors if e.get("type") == "json_invalid")
        return error_response(400, "malformed_json", f"request body is not valid JSON: {detail}".rstrip(": "))
    return error_response(422, "invalid_request", describe_validation_errors(errors))


async def _on_api_error(_: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc.status_code, exc.code, exc.message)


async def _on_coded_error(request: Request, exc: TTSError | ServiceError) -> JSONResponse:
    """Both error roots carry a stable ``code``; only the HTTP status is decided here."""
    if isinstance(exc, TransientError):
        return outage_response(request, exc.code, exc, headers=_headers_for(exc), unconfirmed=exc.unconfirmed)
    return error_response(error_status(exc), exc.code, str(exc), headers=_headers_for(exc))


def coded_error(request: Request, exc: TTSError | ServiceError) -> tuple[int, str, dict[str, str]]:
    """A coded error's status, the message a client may see and its headers, for the facades that
    answer in their own shape: an outage's detail goes to the log, the client gets the fixed words."""
    headers = _headers_for(exc)
    if isinstance(exc, TransientError):
        log.warning("%s %s: %s: %s", request.method, request.url.path, exc.code, exc)
        headers.setdefault("Retry-After", str(RETRY_AFTER_S))
        return 503, OUTAGE_MESSAGES.get(exc.code, OUTAGE_MESSAGE), headers
    return error_status(exc), str(exc), headers


def _headers_for(error: TTSError | ServiceError) -> dict[str, str]:
    headers = {}
    retry_after = getattr(error, "retry_after_s", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return headers


def outage_response(
    request: Request,
    code: str,
    detail: object,
    headers: Mapping[str, str] | None = None,
    unconfirmed: Unconfirmed | None = None,
) -> JSONResponse:
    """503 with the code's fixed message; the detail is logged for the operator. With
    ``unconfirmed``, the job or batch a submission may have stored is named (``Location``, and
    ``job_id`` or ``batch_id`` in the error)."""
    log.warning("%s %s: %s: %s", request.method, request.url.path, code, detail)
    message = OUTAGE_MESSAGES.get(code, OUTAGE_MESSAGE)
    if unconfirmed is None:
        return error_response(503, code, message, headers=headers)
    location = {"Location": resource_location(unconfirmed.kind, unconfirmed.id)}
    return error_response(
        503,
        code,
        message + UNCONFIRMED_NOTE.format(kind=unconfirmed.kind),
        headers={**(headers or {}), **location},
        fields={f"{unconfirmed.kind}_id": unconfirmed.id},
    )


async def _on_redis_error(request: Request, exc: redis.RedisError) -> JSONResponse:
    """Redis failing under a route that did not expect it (a read of a job): the store is out."""
    return outage_response(request, StoreUnavailable.code, repr(exc))


async def _on_broker_error(request: Request, exc: OperationalError) -> JSONResponse:
    return outage_response(request, QueueUnavailable.code, repr(exc))


def _unparsable(cause: BaseException) -> str | None:
    """Why FastAPI could not parse a body, for what it raises besides ``JSONDecodeError``."""
    if isinstance(cause, UnicodeDecodeError):
        return f"invalid UTF-8 byte 0x{cause.object[cause.start]:02x} at position {cause.start}"
    if isinstance(cause, RecursionError):
        return "nested too deeply"
    if isinstance(cause, ValueError) and not isinstance(cause, json.JSONDecodeError):
        return "not a JSON document"
    return None


async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    cause = exc.__cause__
    if isinstance(cause, ApiError):  # raised while FastAPI read the body (api/body_limit.py), given as a 400's cause
        return error_response(cause.status_code, cause.code, cause.message)
    reason = _unparsable(cause) if exc.status_code == 400 and cause is not None else None
    if reason is not None:
        return error_response(400, "malformed_json", f"request body is not valid JSON: {reason}")
    code = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request, headers.get("Allow", ""))
    return error_response(exc.status_code, code, str(exc.detail), headers=headers)


def _allowed_methods(request: Request, given: str) -> str:
    """Every method of the path: Starlette's ``Allow`` names only those of the first route that
    matches it (``GET /v1/jobs/{id}``, not ``DELETE`` beside it), so the document's are added."""
    methods = {method.strip() for method in given.split(",") if method.strip()}
    for template, operations in request.app.openapi()["paths"].items():
        if compile_path(template)[0].fullmatch(request.url.path):
            methods |= {method.upper() for method in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    """Starlette answers with this, then re-raises so that the server logs the traceback."""
    return error_response(500, INTERNAL_ERROR, INTERNAL_MESSAGE)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(TTSError, _on_coded_error)  # type: ignore[arg-type]
    app.add_exception_handler(ServiceError, _on_coded_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    app.add_exception_handler(redis.RedisError, _on_redis_error)  # type: ignore[arg-type]
    app.add_exception_handler(OperationalError, _on_broker_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _on_unexpected)
