"""ttsq's own clients send an ``Idempotency-Key`` on every submit (issue 25), so a submit whose
answer was lost can be repeated without making a second job: the narration client's batches (with
or without a key of the caller's), and the bench's HTTP clients. ``ttsq say`` and ``ttsq narrate``
are checked in ``tests/test_cli.py`` and ``tests/test_narrate.py``. Each is checked in Redis, through
a real API: the key's claim names the job or batch made."""

from __future__ import annotations

import httpx
import redis

from bench.submit_keys import KEY_PREFIX, add_idempotency_key, bench_client
from narration.client import TTSQClient
from tests.conftest import idempotency_claim


def test_a_batch_submitted_without_a_key_of_the_callers_is_given_one(api_url: str, redis_client: redis.Redis) -> None:
    body = {"items": [{"text": "A batch item."}]}
    with TTSQClient(api_url) as client:
        batch = client.submit_batch(body)
        again = client.submit_batch(body)
    assert batch["id"] != again["id"]  # a fresh key per submit: two submits are two batches
    for made in (batch, again):
        claim = idempotency_claim(redis_client, made["id"])
        assert claim is not None
        assert claim["done"] is True


def test_the_bench_clients_submit_jobs_and_batches_with_a_key_each(api_url: str, redis_client: redis.Redis) -> None:
    with bench_client(base_url=api_url, timeout=30) as http:
        jobs = [http.post("/v1/jobs", json={"text": "The bench submits."}).json()["id"] for _ in range(2)]
        batch = http.post("/v1/batches", json={"items": [{"text": "The bench's batch."}]}).json()["id"]
        voices = http.get("/v1/voices")
    assert voices.status_code == 200
    assert voices.request.headers.get("Idempotency-Key") is None  # only submits carry one
    assert len(set(jobs)) == 2
    for made in [*jobs, batch]:
        assert idempotency_claim(redis_client, made) is not None


def test_the_bench_hook_keeps_a_key_the_caller_chose() -> None:
    chosen = httpx.Request("POST", "http://api/v1/jobs", headers={"Idempotency-Key": "mine"})
    add_idempotency_key(chosen)
    assert chosen.headers["Idempotency-Key"] == "mine"
    fresh = httpx.Request("POST", "http://api/v1/batches")
    add_idempotency_key(fresh)
    assert fresh.headers["Idempotency-Key"].startswith(KEY_PREFIX)
    speech = httpx.Request("POST", "http://api/v1/audio/speech")
    add_idempotency_key(speech)
    assert "Idempotency-Key" not in speech.headers
