"""Redis stopped under a running API: every route that needs it answers 503 JSON with a
``Retry-After`` (never a 500, never a traceback), no answer names an internal host or port, and once
Redis is back every route answers as before, /readyz included (its broker connection went stale)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from api.main import create_app
from cli.embedded import LOOPBACK, RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, wait_until
from tests.conftest import serve, start_worker, wait_for_job

pytestmark = pytest.mark.recovery

HELLO = "Redis went away and came back."
SPEECH = {"model": "tts-1", "input": HELLO, "voice": "alloy", "response_format": "wav"}
RECOVERY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class OutageStack:
    redis: RedisService
    worker: ManagedProcess
    client: httpx.Client

    @contextmanager
    def redis_stopped(self) -> Iterator[None]:
        """Redis down for the block, then up again on the same port (empty: it keeps no data)."""
        self.redis.stop()
        try:
            yield
        finally:
            self.redis.start()

    def wait_until_no_message_is_held(self) -> None:
        """A worker losing Redis while it holds a message exits (kombu's restore of unacked messages
        fails), which is the worker's concern, not this test's: stop Redis only once it holds none."""
        client = redis.Redis.from_url(self.redis.url)
        try:
            wait_until(lambda: client.hlen("unacked") == 0, 30, "no unacknowledged message")
        finally:
            client.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, s3_service: SeaweedService) -> Iterator[OutageStack]:
    """A Redis of its own, so that stopping it disturbs nothing else, with a worker and an API on it."""
    folder = tmp_path_factory.mktemp("outage")
    own_redis = RedisService(folder / "redis").start()
    try:
        settings = stack_settings(own_redis.url, s3_service, ready_timeout_s=1.0)
        worker = start_worker(settings, folder / "worker.log", "outage-worker")
        try:
            with serve(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
                yield OutageStack(own_redis, worker, client)
        finally:
            worker.stop()
    finally:
        own_redis.stop()


def job_routes(job_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every route that reads or writes Redis, as a client calls it."""
    return [
        ("POST", "/v1/jobs", {"json": {"text": HELLO}}),
        ("GET", f"/v1/jobs/{job_id}", {}),
        ("GET", f"/v1/jobs/{job_id}", {"params": {"wait": 1}}),
        ("GET", f"/v1/jobs/{job_id}/events", {}),
        ("GET", f"/v1/jobs/{job_id}/audio", {}),
        ("POST", "/v1/audio/speech", {"json": SPEECH}),
    ]


def assert_no_internals(response: httpx.Response, redis_port: int) -> None:
    for secret in (LOOPBACK, str(redis_port), "Traceback", "Error 111"):
        assert secret not in response.text, f"{response.request.url.path} told the client {secret!r}: {response.text}"


def test_every_route_answers_503_json_while_redis_is_down(stack: OutageStack) -> None:
    client = stack.client
    job = client.post("/v1/jobs", json={"text": HELLO})
    assert job.status_code == 202, job.text
    assert wait_for_job(client, job.json()["id"])["status"] == "succeeded"
    stack.wait_until_no_message_is_held()
    with stack.redis_stopped():
        for method, path, kwargs in job_routes(job.json()["id"]):
            response = client.request(method, path, **kwargs)
            assert response.status_code == 503, f"{method} {path}: {response.status_code} {response.text}"
            assert response.headers["content-type"] == "application/json"
            assert int(response.headers["retry-after"]) > 0
            error = response.json()["error"]
            assert error["code"] in {"store_unavailable", "queue_unavailable"}, error
            assert error["message"].endswith("unavailable; retry shortly"), error
            assert_no_internals(response, stack.redis.port)

        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert int(ready.headers["retry-after"]) > 0
        assert ready.json() == {
            "status": "unavailable",
            "checks": {"redis": "unreachable", "storage": "ok", "workers": "skipped: redis unreachable"},
        }
        assert_no_internals(ready, stack.redis.port)

        voices = client.get("/v1/voices")  # the catalog needs no Redis
        assert voices.status_code == 200
        assert voices.json()["voices"]


def test_every_route_answers_normally_once_redis_is_back(stack: OutageStack) -> None:
    client = stack.client
    with stack.redis_stopped():
        assert client.get("/readyz").status_code == 503
    answers: list[httpx.Response] = []

    def ready() -> bool:
        answers.append(client.get("/readyz"))
        return answers[-1].status_code == 200

    wait_until(ready, RECOVERY_TIMEOUT_S, "/readyz after Redis restarted")
    for answer in answers:  # a stale connection may cost a 503 while the worker reconnects, never a 500
        assert answer.status_code in {200, 503}, answer.text
        assert_no_internals(answer, stack.redis.port)
    assert answers[-1].json()["checks"] == {"redis": "ok", "storage": "ok", "workers": "ok"}

    created = client.post("/v1/jobs", json={"text": HELLO})
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    waited = client.get(f"/v1/jobs/{job_id}", params={"wait": 30})
    assert waited.status_code == 200
    assert wait_for_job(client, job_id)["status"] == "succeeded"
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    assert client.get(f"/v1/jobs/{job_id}/audio").status_code == 302
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as events:
        assert events.status_code == 200
        assert "event: succeeded" in events.read().decode()
    speech = client.post("/v1/audio/speech", json=SPEECH)
    assert speech.status_code == 200, speech.text
    assert speech.content[:4] == b"RIFF"
