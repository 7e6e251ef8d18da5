"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import StateDep
from api.schemas import ReadinessPublic
from api.state import AppState
from ttsq.errors import ServiceError

router = APIRouter(tags=["health"])

OK = "ok"


@router.get("/healthz", summary="Process is alive")
def healthz() -> dict[str, str]:
    return {"status": OK}


def _check_redis(state: AppState) -> str:
    try:
        state.redis.ping()
    except Exception as e:  # any failure to answer means not ready, whatever its type
        return f"unreachable: {e}"
    return OK


def _check_storage(state: AppState) -> str:
    try:
        state.objects.check()
    except ServiceError as e:
        return str(e)
    return OK


def _check_workers(state: AppState) -> str:
    # limit=1: one answering worker is enough, so return on the first reply instead of the timeout.
    replies = state.producer.control.ping(timeout=state.settings.ready_timeout_s, limit=1)
    return OK if replies else "no worker answered a ping"


@router.get(
    "/readyz",
    response_model=ReadinessPublic,
    responses={503: {"model": ReadinessPublic}},
    summary="Redis, object store and at least one worker are reachable",
)
def readyz(state: StateDep) -> JSONResponse:
    checks = {"redis": _check_redis(state), "storage": _check_storage(state)}
    # The worker ping travels through Redis; without Redis it would only hang.
    checks["workers"] = _check_workers(state) if checks["redis"] == OK else "skipped: redis unreachable"
    ready = all(value.startswith(OK) for value in checks.values())
    body = ReadinessPublic(status="ready" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
