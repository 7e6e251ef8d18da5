"""/healthz and /readyz: ready only while Redis and the object store answer and a synthesis worker is alive."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api.main import create_app
from cli.embedded import RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, free_port, wait_until
from tests.conftest import paused, serve
from ttsq.constants import HEARTBEAT_TTL_S
from ttsq.settings import S3Settings, Settings


def test_healthz(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_ready_with_the_whole_stack(client: httpx.Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert body["checks"]["redis"] == "ok"
    assert body["checks"]["storage"] == "ok"
    assert body["checks"]["workers"] == "ok"


@pytest.mark.recovery
def test_not_ready_while_the_synthesis_worker_is_frozen(
    settings: Settings, worker: ManagedProcess, webhook_worker: ManagedProcess
) -> None:
    """Only the synthesis worker paused (SIGSTOP), as a frozen VM is: the service worker still answers
    Celery pings, yet nothing can synthesise, so the API must say so within the heartbeat's expiry,
    and be ready again once the worker goes on."""
    prompt = settings.model_copy(update={"ready_timeout_s": 1.0})
    with serve(create_app(prompt)) as url, httpx.Client(base_url=url, timeout=30) as api:
        assert api.get("/readyz").status_code == 200
        with paused(worker):
            wait_until(lambda: api.get("/readyz").status_code == 503, HEARTBEAT_TTL_S + 5, "not ready")
            gone = api.get("/readyz")
            assert webhook_worker.alive
        assert gone.status_code == 503
        assert gone.json()["checks"]["workers"] == "no synthesis worker alive"
        assert gone.json()["checks"]["redis"] == "ok"
        wait_until(lambda: api.get("/readyz").status_code == 200, HEARTBEAT_TTL_S + 5, "ready again")


def test_not_ready_when_redis_goes(tmp_path: Path, s3_service: SeaweedService) -> None:
    """A private Redis (no worker reads it), so stopping it disturbs nothing else."""
    own_redis = RedisService(tmp_path / "redis").start()
    try:
        settings = stack_settings(own_redis.url, s3_service, ready_timeout_s=1.0)
        with serve(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as api:
            alone = api.get("/readyz")
            assert alone.status_code == 503
            assert alone.json()["checks"] == {"redis": "ok", "storage": "ok", "workers": "no synthesis worker alive"}

            own_redis.stop()
            down = api.get("/readyz")
            assert down.status_code == 503
            assert down.json()["checks"]["redis"].startswith("unreachable")
            assert down.json()["checks"]["workers"] == "skipped: redis unreachable"
    finally:
        own_redis.stop()


@pytest.mark.usefixtures("worker")
def test_not_ready_when_the_object_store_is_unreachable(settings: Settings) -> None:
    dead_s3 = S3Settings(endpoint_url=f"http://127.0.0.1:{free_port()}", access_key_id="x", secret_access_key="y")
    broken = settings.model_copy(update={"s3": dead_s3})
    with serve(create_app(broken)) as url:
        response = httpx.get(f"{url}/readyz", timeout=60)
    assert response.status_code == 503
    assert "object store unreachable" in response.json()["checks"]["storage"]
    assert response.json()["checks"]["workers"] == "ok"
