"""/healthz and /readyz: ready only while Redis, the object store and a worker all answer."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api.main import create_app
from cli.embedded import RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, free_port
from tests.conftest import paused, serve
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


def test_not_ready_while_no_worker_answers(
    settings: Settings, worker: ManagedProcess, webhook_worker: ManagedProcess
) -> None:
    """The session's workers paused (SIGSTOP): to the API they are gone, as dead or hung ones are.
    Both, since the readiness ping takes any Celery node's answer, the service worker's too."""
    prompt = settings.model_copy(update={"ready_timeout_s": 1.0})
    with serve(create_app(prompt)) as url, httpx.Client(base_url=url, timeout=30) as api:
        assert api.get("/readyz").status_code == 200
        with paused(worker), paused(webhook_worker):
            gone = api.get("/readyz")
        assert gone.status_code == 503
        assert gone.json()["checks"]["workers"] == "no worker answered a ping"
        assert gone.json()["checks"]["redis"] == "ok"
        assert api.get("/readyz").status_code == 200  # ready again once it answers


def test_not_ready_when_redis_goes(tmp_path: Path, s3_service: SeaweedService) -> None:
    """A private Redis (no worker reads it), so stopping it disturbs nothing else."""
    own_redis = RedisService(tmp_path / "redis").start()
    try:
        settings = stack_settings(own_redis.url, s3_service, ready_timeout_s=1.0)
        with serve(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as api:
            alone = api.get("/readyz")
            assert alone.status_code == 503
            assert alone.json()["checks"] == {"redis": "ok", "storage": "ok", "workers": "no worker answered a ping"}

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
