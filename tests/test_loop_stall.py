"""A Redis that stops answering (SIGSTOP: a frozen VM, a long fork) or answers slowly must not stop the
API's event loop: every route that reads or writes Redis does so off the loop, so while requests of
every kind wait on Redis, ``/healthz``, the studio page and its static files still answer on the same
process.

The API reaches Redis through a proxy that delays each command by ``SLOW_COMMAND_S``. Redis is first
stopped and one request of each kind sent and left waiting (in the key check, the first thing to read
Redis); the loop is probed after each. Then Redis goes on, slowly: each request walks through its
dependencies and its handler one slow command at a time while the loop is probed all along. A route
that called Redis on the loop would hold the probes behind the stop, or for ``SLOW_COMMAND_S`` at a
time; the probes' bound is far below either, and far above what an idle loop takes.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import redis

from api.main import create_app
from cli.embedded import RedisService, SeaweedService, stack_settings
from tests.conftest import paused, serve
from tests.redis_proxy import RedisProxy
from ttsq.tenants import Limits, TenantStore

pytestmark = pytest.mark.recovery

SLOW_COMMAND_S: Final = 3.0
"""How long each Redis command is held by the proxy while Redis is slow."""
SLOW_WINDOW_S: Final = 18.0
"""How long the loop is probed while the requests go on through slow commands."""
PROBE_BOUND_S: Final = 1.5
"""A probe slower than this waited behind a Redis call on the loop (an idle loop answers in ms); half
a slow command, so that a loaded machine's pause of a second is not taken for one."""
JAPANESE: Final = "ja_JP-kokoro-jf_alpha"
NEW_WORD: Final = {"surface": "猫", "pronunciation": "ネコ", "accent_type": 1}


@dataclass
class Waiting:
    """Requests sent to the API, each on a thread of its own, left to wait on Redis."""

    url: str
    key: str
    until: float
    threads: list[threading.Thread] = field(default_factory=list)

    def send(self, method: str, path: str, **kwargs: Any) -> None:
        def call() -> None:
            # Its answer does not matter (streams and waits go on with no worker): only that it waits.
            headers = {"Authorization": f"Bearer {self.key}"}
            timeout = self.until - time.monotonic()
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.Client(base_url=self.url, headers=headers, timeout=timeout) as http,
                http.stream(method, path, **kwargs) as answer,
            ):
                for _ in answer.iter_bytes():
                    if time.monotonic() > self.until:
                        break

        thread = threading.Thread(target=call, name=f"waiting {method} {path}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(max(0.0, self.until - time.monotonic()) + 10)


@pytest.fixture
def slow_redis(tmp_path: Path) -> Iterator[tuple[RedisService, RedisProxy]]:
    service = RedisService(tmp_path / "redis").start()
    proxy = RedisProxy(service.port).start()
    yield service, proxy
    proxy.stop()
    service.stop()


def probe(url: str, during: str) -> float:
    """Health, the studio page and a static file, each within ``PROBE_BOUND_S``; the slowest took."""
    slowest = 0.0
    with httpx.Client(base_url=url, timeout=PROBE_BOUND_S) as http:
        for path in ("/healthz", "/", "/static/js/app.js"):
            started = time.monotonic()
            try:
                answer = http.get(path)
            except httpx.TimeoutException:
                pytest.fail(f"GET {path} waited behind {during}: the event loop is held by a Redis call")
            assert answer.status_code == 200, (path, during)
            slowest = max(slowest, time.monotonic() - started)
    return slowest


def test_a_stalled_or_slow_redis_holds_no_route_on_the_event_loop(
    slow_redis: tuple[RedisService, RedisProxy], s3_service: SeaweedService, voices_dir: Path
) -> None:
    own_redis, proxy = slow_redis
    settings = stack_settings(
        proxy.url(0), s3_service, voices_dir=voices_dir, auth_required=True, ready_timeout_s=SLOW_WINDOW_S * 2
    )
    key, _ = TenantStore(redis.Redis.from_url(own_redis.url)).create("stall", Limits())
    with serve(create_app(settings)) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            speakers = http.get("/voicevox/speakers").json()
            style = next(s for s in speakers if s["name"] == JAPANESE)["styles"][0]["id"]
            query = http.post("/voicevox/audio_query", params={"text": "はい。", "speaker": style})
            assert query.status_code == 200, query.text
            job = http.post("/v1/jobs", json={"text": "Made before the stall."})
            assert job.status_code == 202, job.text
            job_id = job.json()["id"]
        requests: list[tuple[str, str, dict[str, Any]]] = [
            ("POST", "/v1/audio/speech", {"json": {"model": "tts-1", "input": "Hello there.", "voice": "alloy"}}),
            ("POST", "/v1/jobs", {"json": {"text": "Submitted into a stall."}}),
            ("GET", f"/v1/jobs/{job_id}", {}),
            ("GET", f"/v1/jobs/{job_id}", {"params": {"wait": 20}}),
            ("GET", f"/v1/jobs/{job_id}/events", {}),
            ("GET", "/v1/jobs", {}),
            ("DELETE", f"/v1/jobs/{uuid.uuid4()}", {}),
            ("POST", "/v1/batches", {"json": {"items": [{"text": "One."}, {"text": "Two."}]}}),
            ("GET", "/v1/batches", {}),
            ("GET", "/v1/lexicons", {}),
            ("GET", "/v1/voices", {}),
            ("GET", "/readyz", {}),
            ("GET", "/metrics", {}),
            ("POST", "/voicevox/audio_query", {"params": {"text": "いいえ。", "speaker": style}}),
            ("POST", "/voicevox/synthesis", {"params": {"speaker": style}, "json": query.json()}),
            ("POST", "/voicevox/cancellable_synthesis", {"params": {"speaker": style}, "json": query.json()}),
            ("POST", "/voicevox/multi_synthesis", {"params": {"speaker": style}, "json": [query.json()] * 3}),
            ("GET", "/voicevox/user_dict", {}),
            ("POST", "/voicevox/user_dict_word", {"params": NEW_WORD}),
        ]
        waiting = Waiting(url, key, until=time.monotonic() + SLOW_WINDOW_S + 10)
        proxy.delay_s = SLOW_COMMAND_S
        try:
            with paused(own_redis.process):
                probe(url, "nothing")
                for method, path, kwargs in requests:
                    waiting.send(method, path, **kwargs)
                    probe(url, f"{method} {path}")
                time.sleep(1)  # the last request's Redis calls have begun
                probe(url, "every request above")
                assert all(thread.is_alive() for thread in waiting.threads), "requests answered with Redis stopped"
            slow_until = time.monotonic() + SLOW_WINDOW_S
            while time.monotonic() < slow_until:
                probe(url, "a slow Redis command")
                time.sleep(0.05)
            assert any(thread.is_alive() for thread in waiting.threads), "the slow window outlasted every request"
        finally:
            proxy.delay_s = 0.0
            waiting.join()
