"""``GET /metrics``: Prometheus exposition, open like the probes (no tenant data in it)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import StateDep
from api.metrics import METRICS_PATH

router = APIRouter(tags=["health"])


@router.get(METRICS_PATH, summary="Prometheus metrics", include_in_schema=False)
async def metrics(state: StateDep) -> Response:
    """Rendered off the event loop: the cluster figures are read from Redis."""
    body = await run_in_threadpool(generate_latest, state.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
