"""Liveness and readiness probes.

A check never raises (any failure means "not ready", so the probe answers 503, never 500) and its
words name what failed, not where: hosts and ports go to the log only.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import StateDep
from api.errors import RETRY_AFTER_S
from api.schemas import ReadinessPublic
from api.state import AppState
from ttsq.errors import StorageRefused

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

OK = "ok"


@router.get("/healthz", summary="Process is alive")
def healthz() -> dict[str, str]:
    return {"status": OK}


def _check_redis(state: AppState) -> str:
    try:
        state.stores.redis.ping()
    except Exception as e:  # any failure to answer means not ready, whatever its type
        log.warning("readiness: Redis did not answer a ping: %r", e)
        return "unreachable"
    return OK


def _check_storage(state: AppState) -> str:
    try:
        state.stores.objects.check()
    except StorageRefused as e:
        log.warning("readiness: %s", e)
        return "object store refused the bucket check"
    except Exception as e:  # StorageUnavailable, or anything else that kept the bucket from answering
        log.warning("readiness: %s", e)
        return "object store unreachable"
    return OK


def _check_workers(state: AppState) -> str:
    """At least one synthesis worker whose heartbeat is fresh: alive and able, not merely a Celery
    node answering a ping (the service worker answers one too)."""
    try:
        alive = state.liveness.alive()
    except Exception as e:  # e.g. the connection went stale when Redis restarted
        log.warning("readiness: the worker heartbeats could not be read: %r", e)
        return "unavailable: the worker heartbeats could not be read"
    return OK if alive else "no synthesis worker alive"


@router.get(
    "/readyz",
    response_model=ReadinessPublic,
    responses={503: {"model": ReadinessPublic}},
    summary="Redis and the object store are reachable, and at least one synthesis worker is alive",
)
def readyz(state: StateDep) -> JSONResponse:
    checks = {"redis": _check_redis(state), "storage": _check_storage(state)}
    # The worker ping travels through Redis; without Redis it would only hang.
    checks["workers"] = _check_workers(state) if checks["redis"] == OK else "skipped: redis unreachable"
    ready = all(value.startswith(OK) for value in checks.values())
    body = ReadinessPublic(status="ready" if ready else "unavailable", checks=checks)
    if ready:
        return JSONResponse(body.model_dump())
    return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
