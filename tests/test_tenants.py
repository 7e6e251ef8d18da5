"""API keys and tenants through the real API: who may call, who sees which job, and each limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis

from api.main import create_app
from cli.processes import ManagedProcess
from tests.conftest import serve, wait_for_job
from ttsq.constants import consumed_queues, usage_key
from ttsq.quotas import usage_day
from ttsq.settings import Settings, settings_env
from ttsq.tenants import Limits, TenantStore

SHORT = {"text": "Hello from a tenant.", "format": "wav"}


@dataclass(frozen=True)
class KeyedApi:
    url: str
    tenants: TenantStore

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def new_key(self, **limits: float) -> str:
        key, _ = self.tenants.create(f"test-{uuid.uuid4().hex[:6]}", Limits.model_validate(limits))
        return key


@pytest.fixture(scope="module")
def keyed_api(settings: Settings, worker: ManagedProcess) -> Iterator[KeyedApi]:
    """An API that requires keys, in front of the suite's worker."""
    client = redis.Redis.from_url(settings.redis_url)
    with serve(create_app(settings.model_copy(update={"auth_required": True}))) as url:
        yield KeyedApi(url, TenantStore(client))
    client.close()


@pytest.fixture
def idle_keyed_api(settings: Settings, redis_client: redis.Redis) -> Iterator[KeyedApi]:
    """The same, sending to queues no worker reads: its jobs stay queued."""
    queue = f"idle-{uuid.uuid4()}"
    changed = settings.model_copy(update={"auth_required": True, "queue": queue, "model_affinity": False})
    with serve(create_app(changed)) as url:
        yield KeyedApi(url, TenantStore(redis_client))
    redis_client.delete(*consumed_queues(queue))


def test_keys_cli_prints_the_key_last_and_stores_only_its_hash(settings: Settings, redis_client: redis.Redis) -> None:
    env = {**os.environ, **settings_env(settings)}
    name = f"cli-{uuid.uuid4().hex[:6]}"
    argv = [str(Path(sys.executable).parent / "ttsq"), "keys", "create", name, "--max-active-jobs", "3"]
    created = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ttsq_")
    assert len(key) > 40
    listed = subprocess.run([*argv[:2], "list"], env=env, capture_output=True, text=True, check=True).stdout
    line = next(line for line in listed.splitlines() if name in line)
    assert "max_active_jobs=3" in line
    assert "active" in line
    assert key not in listed
    stored = [redis_client.dump(k) or b"" for k in redis_client.scan_iter("ttsq:*")]
    assert not any(key.encode() in value for value in stored)  # never the key itself
    tenant = TenantStore(redis_client).by_key(key)
    assert tenant is not None
    assert tenant.name == name
    subprocess.run([*argv[:2], "update", name, "--chars-per-day", "500"], env=env, check=True, capture_output=True)
    updated = TenantStore(redis_client).by_key(key)
    assert updated is not None
    assert updated.limits == Limits(max_active_jobs=3, chars_per_day=500)
    subprocess.run([*argv[:2], "revoke", name], env=env, check=True, capture_output=True)
    assert TenantStore(redis_client).by_key(key) is None
    missing = subprocess.run([*argv[:2], "revoke", "no-such-key"], env=env, capture_output=True, text=True)
    assert missing.returncode != 0
    assert "no key with id or name 'no-such-key'" in missing.stderr


def test_without_a_live_key_every_v1_route_answers_401(keyed_api: KeyedApi) -> None:
    revoked = keyed_api.new_key()
    tenant = keyed_api.tenants.by_key(revoked)
    assert tenant is not None
    keyed_api.tenants.revoke(tenant.id)
    job_id = str(uuid.uuid4())
    for key in (None, "ttsq_not-a-key", "sk-openai-style", revoked):
        with keyed_api.client(key) as client:
            answers = [
                client.post("/v1/jobs", json=SHORT),
                client.get("/v1/jobs"),
                client.get(f"/v1/jobs/{job_id}"),
                client.delete(f"/v1/jobs/{job_id}"),
                client.get("/v1/voices"),
                client.post("/v1/audio/speech", json={"model": "tts-1", "input": "Hi.", "voice": "alloy"}),
            ]
            for answer in answers:
                assert answer.status_code == 401, (key, answer.request.url, answer.text)
                assert answer.json()["error"]["code"] == "unauthorized"
                assert answer.headers["www-authenticate"] == "Bearer"
            # Probes and metrics stay open.
            assert client.get("/healthz").status_code == 200
            assert client.get("/metrics").status_code == 200
            assert client.get("/readyz").status_code == 200


def test_a_key_selects_its_tenant_and_other_tenants_see_nothing(keyed_api: KeyedApi) -> None:
    alice, bob = keyed_api.new_key(), keyed_api.new_key()
    with keyed_api.client(alice) as a, keyed_api.client(bob) as b:
        job = a.post("/v1/jobs", json=SHORT).json()
        done = wait_for_job(a, job["id"])
        assert done["status"] == "succeeded"
        tenant = keyed_api.tenants.by_key(alice)
        assert tenant is not None
        assert done["result"]["key"].startswith(f"{tenant.id}/jobs/{job['id']}/")
        unknown = b.get(f"/v1/jobs/{uuid.uuid4()}")
        for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/audio", f"/v1/jobs/{job['id']}/events"):
            other = b.get(path)
            assert other.status_code == 404
            assert other.json()["error"]["code"] == unknown.json()["error"]["code"]
        assert b.delete(f"/v1/jobs/{job['id']}").status_code == 404
        assert job["id"] not in [j["id"] for j in b.get("/v1/jobs").json()["jobs"]]
        assert job["id"] in [j["id"] for j in a.get("/v1/jobs").json()["jobs"]]
        assert a.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"  # not deleted by bob


def test_without_required_keys_an_unknown_token_is_anonymous_and_a_known_key_still_counts(
    client: httpx.Client, keyed_api: KeyedApi
) -> None:
    anonymous = client.post("/v1/jobs", json=SHORT, headers={"Authorization": "Bearer sk-whatever"})
    assert anonymous.status_code == 202
    key = keyed_api.new_key()
    mine = client.post("/v1/jobs", json=SHORT, headers={"Authorization": f"Bearer {key}"}).json()
    with keyed_api.client(key) as keyed:
        assert keyed.get(f"/v1/jobs/{mine['id']}").status_code == 200
        assert keyed.get(f"/v1/jobs/{anonymous.json()['id']}").status_code == 404
    assert client.get(f"/v1/jobs/{anonymous.json()['id']}").status_code == 200
    assert client.get(f"/v1/jobs/{mine['id']}").status_code == 404  # anonymous is a tenant too


def test_active_jobs_limit_answers_429_until_one_is_canceled(idle_keyed_api: KeyedApi) -> None:
    with idle_keyed_api.client(idle_keyed_api.new_key(max_active_jobs=2)) as client:
        first, second = (client.post("/v1/jobs", json=SHORT) for _ in range(2))
        assert first.status_code == second.status_code == 202
        refused = client.post("/v1/jobs", json=SHORT)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "max_active_jobs_exceeded"
        assert "2 jobs queued or running" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) > 0
        assert len(client.get("/v1/jobs").json()["jobs"]) == 2  # the refused one left nothing
        assert client.delete(f"/v1/jobs/{first.json()['id']}").json()["status"] == "canceled"
        assert client.post("/v1/jobs", json=SHORT).status_code == 202


def test_characters_per_day_limit(idle_keyed_api: KeyedApi, redis_client: redis.Redis) -> None:
    key = idle_keyed_api.new_key(chars_per_day=50)
    with idle_keyed_api.client(key) as client:
        assert client.post("/v1/jobs", json={"text": "x" * 30}).status_code == 202
        refused = client.post("/v1/jobs", json={"text": "y" * 30})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "chars_per_day_exceeded"
        assert 0 < int(refused.headers["retry-after"]) <= 86400
        assert client.post("/v1/jobs", json={"text": "z" * 20}).status_code == 202  # exactly 50
    tenant = idle_keyed_api.tenants.by_key(key)
    assert tenant is not None
    charged = redis_client.hget(usage_key(tenant.id, usage_day(datetime.now(UTC))), "chars")
    assert int(charged or 0) == 50


def test_audio_seconds_per_day_is_estimated_at_submit_with_digits_counted(idle_keyed_api: KeyedApi) -> None:
    with idle_keyed_api.client(idle_keyed_api.new_key(audio_seconds_per_day=60)) as client:
        assert client.post("/v1/jobs", json={"text": "A short sentence to speak."}).status_code == 202
        digits = client.post("/v1/jobs", json={"text": "1234567890" * 20})  # 200 digits, ~2 minutes spoken
        assert digits.status_code == 429
        assert digits.json()["error"]["code"] == "audio_seconds_per_day_exceeded"


def test_requests_per_second_limit(idle_keyed_api: KeyedApi) -> None:
    with idle_keyed_api.client(idle_keyed_api.new_key(requests_per_second=5)) as client:
        started = time.time()
        codes = [client.get("/v1/jobs").status_code for _ in range(30)]
        ended = time.time()
    assert 429 in codes
    assert codes[:5] == [200] * 5
    windows = int(ended) - int(started) + 1  # whole seconds the burst touched, however slow the machine
    assert codes.count(200) <= 5 * windows


def test_a_plan_over_the_remaining_audio_quota_fails_the_job_before_synthesis(
    keyed_api: KeyedApi, redis_client: redis.Redis
) -> None:
    """ "WWW" is short text but long speech (nine syllables): the estimate lets it in, the worker's
    plan does not, and the job fails with the quota's code, having made no audio; its reservation
    is given back."""
    key = keyed_api.new_key(audio_seconds_per_day=3)
    tenant = keyed_api.tenants.by_key(key)
    assert tenant is not None
    with keyed_api.client(key) as client:
        job = client.post("/v1/jobs", json={"text": "WWW. WWW. WWW. WWW."}).json()
        failed = wait_for_job(client, job["id"])
    assert failed["status"] == "failed", failed
    assert failed["error"]["code"] == "audio_seconds_per_day_exceeded"
    assert failed["progress"]["segments_done"] == 0
    assert failed["result"] is None
    assert int(redis_client.hget(usage_key(tenant.id, usage_day(datetime.now(UTC))), "audio_ms") or 0) == 0


def test_a_finished_job_is_charged_the_audio_it_made(keyed_api: KeyedApi, redis_client: redis.Redis) -> None:
    key = keyed_api.new_key(audio_seconds_per_day=600)
    tenant = keyed_api.tenants.by_key(key)
    assert tenant is not None
    with keyed_api.client(key) as client:
        done = wait_for_job(client, client.post("/v1/jobs", json=SHORT).json()["id"])
    assert done["status"] == "succeeded"
    charged_ms = int(redis_client.hget(usage_key(tenant.id, usage_day(datetime.now(UTC))), "audio_ms") or 0)
    assert charged_ms == pytest.approx(done["result"]["duration_s"] * 1000, abs=2)
