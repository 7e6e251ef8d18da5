"""The one place where errors become HTTP status codes and ``{"error": {code, message}}`` bodies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tts_core.errors import InvalidInput, TextTooLong, TTSError
from ttsq.errors import JobNotFound, RequestRefused, ServiceError, TransientError


class ApiError(Exception):
    """An error with its HTTP status decided where it is raised (inside ``api/`` only)."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message


def error_response(status_code: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code, headers=dict(headers or {}))


def describe_validation_errors(errors: Sequence[Any]) -> str:
    """Turn pydantic's error list into one sentence naming each offending field."""
    parts = []
    for error in errors:
        location = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        message = error.get("msg", "invalid value")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def _status_for(error: TTSError | ServiceError) -> int:
    if isinstance(error, TextTooLong):
        return 413
    if isinstance(error, InvalidInput | RequestRefused):
        return 422
    if isinstance(error, JobNotFound):
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


async def _on_coded_error(_: Request, exc: TTSError | ServiceError) -> JSONResponse:
    """Both error roots carry a stable ``code``; only the HTTP status is decided here."""
    return error_response(_status_for(exc), exc.code, str(exc))


async def _on_http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(TTSError, _on_coded_error)  # type: ignore[arg-type]
    app.add_exception_handler(ServiceError, _on_coded_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
