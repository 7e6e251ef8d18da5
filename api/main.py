"""Assembles the FastAPI application. Run with ``uvicorn api.main:create_app --factory``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.body_limit import BodyLimitMiddleware
from api.deps import current_tenant
from api.errors import install_error_handlers
from api.key_check import KeyCheckMiddleware
from api.metrics import ApiMetrics
from api.openapi import install_openapi
from api.request_ids import RequestIdMiddleware
from api.routes import batches, books, health, jobs, lexicon_preview, lexicons, metrics, speech, usage, voices, web
from api.state import AppState
from api.trace_context import TraceContextMiddleware
from api.voicevox.app import PREFIX as VOICEVOX_PREFIX
from api.voicevox.app import create_voicevox_app
from ttsq import logs, tracing
from ttsq.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; clients to Redis, S3 and the queue are made once, at start-up."""
    resolved = settings or get_settings()
    api_metrics = ApiMetrics()
    voicevox = create_voicevox_app(resolved.request_bytes_limit)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        logs.configure(resolved.log_format)  # after uvicorn set up its own logging
        tracing.start(tracing.API_SERVICE)
        state = AppState.build(resolved, api_metrics)
        if resolved.s3.create_bucket:
            state.stores.objects.ensure_bucket()
        app.state.ttsq = state
        voicevox.state.ttsq = state
        await state.hub.start()
        try:
            yield
        finally:
            await state.close()
            tracing.flush()

    app = FastAPI(
        title="ttsq",
        summary="Job-based text-to-speech: submit text, get audio in S3-compatible storage.",
        version="0.1.0",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.add_middleware(KeyCheckMiddleware, tenant_dependency=current_tenant)  # inside the metrics: 401s counted
    api_metrics.instrument(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=resolved.request_bytes_limit)
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(TraceContextMiddleware)  # outermost of ours, inside FastAPI's own server span
    app.include_router(jobs.router)
    app.include_router(batches.router)
    app.include_router(speech.router)
    app.include_router(voices.router)
    app.include_router(lexicons.router)
    app.include_router(lexicon_preview.router)
    app.include_router(usage.router)
    app.include_router(books.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    app.include_router(web.router)
    web.mount_static(app)
    app.mount(VOICEVOX_PREFIX, voicevox)
    app.state.voicevox = voicevox
    install_openapi(app, resolved)
    return app


def voicevox_app(app: FastAPI) -> FastAPI:
    """The VOICEVOX facade ``app`` mounts, to serve at the root of its own port as well
    (``ttsq api --voicevox-port``): the same application, sharing ``app``'s state once it started."""
    facade: FastAPI = app.state.voicevox
    return facade
