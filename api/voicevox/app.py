"""The VOICEVOX-compatible API as its own small FastAPI application: mounted at ``/voicevox`` on the
main app (``api.main``) and, with ``ttsq api --voicevox-port``, served at the root of its own port,
so a client configured with only ``http://host:50021`` finds ``/speakers`` where it expects it.

Its own application because its errors have VOICEVOX ENGINE's shape, not ttsq's: bad input is 422
``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`` (FastAPI's own shape, which VOICEVOX
ENGINE answers with), anything else ``{"detail": "<message>"}`` with ttsq's status for it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.body_limit import BodyLimitMiddleware
from api.errors import INTERNAL_MESSAGE, OUTAGE_MESSAGES, RETRY_AFTER_S, ApiError, coded_error
from api.key_check import KeyCheckMiddleware
from api.voicevox import engine_info, query_routes, speakers, synthesis, user_dict
from api.voicevox.deps import Refused, facade_key, voicevox_tenant
from api.voicevox.speakers import SpeakerNotFound
from tts_core.base.errors import TTSError
from ttsq.errors import QueueUnavailable, ServiceError, StoreUnavailable

log = logging.getLogger(__name__)

PREFIX: Final = "/voicevox"
"""Where the main app mounts the facade."""

INPUT_STATUSES: Final = frozenset({413, 422})
"""ttsq's statuses for bad input: VOICEVOX ENGINE answers all of it with 422."""


def create_voicevox_app(max_request_bytes: int) -> FastAPI:
    """The facade; whoever mounts or serves it sets ``app.state.ttsq`` (the AppState) before the
    first request."""
    app = FastAPI(
        title="ttsq: VOICEVOX-compatible API",
        summary="VOICEVOX ENGINE's HTTP API, answered by ttsq jobs (docs/VOICEVOX.md).",
        version=engine_info.ENGINE_VERSION,
    )
    app.state.voicevox_initialized = set()
    _install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_request_bytes)
    app.add_middleware(KeyCheckMiddleware, tenant_dependency=voicevox_tenant, fallback_key=facade_key)
    for module in (engine_info, speakers, query_routes, synthesis, user_dict):
        app.include_router(module.router)
    return app


def refusal(loc: tuple[str | int, ...], msg: str, kind: str) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": list(loc), "msg": msg, "type": kind}]}, status_code=422)


def detail(status_code: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"detail": text}, status_code=status_code, headers=headers)


async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's own 422 less the offending ``input`` (a NaN there could not be written as JSON)."""
    errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


async def _on_refused(_: Request, exc: Refused) -> JSONResponse:
    return refusal(exc.loc, exc.msg, exc.kind)


async def _on_speaker_not_found(_: Request, exc: SpeakerNotFound) -> JSONResponse:
    return detail(404, f"no speaker with speaker_uuid {exc}; GET /speakers lists them")


async def _on_coded_error(request: Request, exc: TTSError | ServiceError) -> JSONResponse:
    status, message, headers = coded_error(request, exc)
    if status in INPUT_STATUSES:
        return refusal(("body",), message, exc.code)
    return detail(status, message, headers)


async def _on_api_error(_: Request, exc: ApiError) -> JSONResponse:
    if exc.status_code in INPUT_STATUSES:
        return refusal(("body",), exc.message, exc.code)
    return detail(exc.status_code, exc.message)


async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    cause = exc.__cause__
    if isinstance(cause, ApiError):  # the body limit, raised while FastAPI read the body
        return await _on_api_error(request, cause)
    return detail(exc.status_code, str(exc.detail), dict(exc.headers or {}))


def _outage(code: str) -> Any:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        log.warning("%s %s: %s: %r", request.method, request.url.path, code, exc)
        return detail(503, OUTAGE_MESSAGES[code], {"Retry-After": str(RETRY_AFTER_S)})

    return handler


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    return detail(500, INTERNAL_MESSAGE)


def _install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation)  # type: ignore[arg-type]
    app.add_exception_handler(Refused, _on_refused)  # type: ignore[arg-type]
    app.add_exception_handler(SpeakerNotFound, _on_speaker_not_found)  # type: ignore[arg-type]
    app.add_exception_handler(TTSError, _on_coded_error)  # type: ignore[arg-type]
    app.add_exception_handler(ServiceError, _on_coded_error)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _on_api_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    app.add_exception_handler(redis.RedisError, _outage(StoreUnavailable.code))
    app.add_exception_handler(OperationalError, _outage(QueueUnavailable.code))
    app.add_exception_handler(Exception, _on_unexpected)
