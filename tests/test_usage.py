"""``GET /v1/usage`` and ``ttsq usage`` through the real API, worker and Redis: usage is counted by the
quotas' own moves, so today's figures are what admission checks, each voice is charged its own jobs
(a batch's too), failed and canceled jobs keep their characters but deliver no audio, and a key sees
only its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis

from api.main import create_app
from cli.processes import ManagedProcess
from tests.conftest import FOLDER_VOICE_ID, serve, wait_for_job
from tests.voices import BROKEN_VOICE_ID
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.constants import consumed_queues, usage_key
from ttsq.quotas import USAGE_HISTORY_DAYS, USAGE_TTL_S, Charge, Quotas, usage_day
from ttsq.settings import Settings, settings_env
from ttsq.tenants import Limits, Tenant, TenantStore


@dataclass(frozen=True)
class UsageApi:
    url: str
    tenants: TenantStore

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def new_key(self, **limits: float) -> tuple[str, Tenant]:
        return self.tenants.create(f"usage-{uuid.uuid4().hex[:6]}", Limits.model_validate(limits))


@pytest.fixture(scope="module")
def usage_api(settings: Settings, worker: ManagedProcess) -> Iterator[UsageApi]:
    """An API that requires keys, in front of the suite's worker."""
    client = redis.Redis.from_url(settings.redis_url)
    with serve(create_app(settings.model_copy(update={"auth_required": True}))) as url:
        yield UsageApi(url, TenantStore(client))
    client.close()


@pytest.fixture(scope="module")
def idle_usage_api(settings: Settings) -> Iterator[UsageApi]:
    """The same, sending to queues no worker reads: its jobs stay queued until canceled."""
    queue = f"idle-usage-{uuid.uuid4().hex[:8]}"
    changed = settings.model_copy(update={"auth_required": True, "queue": queue, "model_affinity": False})
    client = redis.Redis.from_url(settings.redis_url)
    with serve(create_app(changed)) as url:
        yield UsageApi(url, TenantStore(client))
    client.delete(*consumed_queues(queue))
    client.close()


def today() -> str:
    return usage_day(datetime.now(UTC))


def usage(client: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = client.get("/v1/usage", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def by_voice(report: dict[str, Any]) -> dict[str, tuple[int, float, int]]:
    return {v["voice"]: (v["characters"], v["audio_seconds"], v["jobs"]) for v in report["by_voice"]}


def test_usage_counts_each_voice_a_batch_and_a_failed_job_as_the_quotas_charge_them(
    usage_api: UsageApi, redis_client: redis.Redis
) -> None:
    key, tenant = usage_api.new_key(chars_per_day=5000, audio_seconds_per_day=3600, max_active_jobs=10)
    with usage_api.client(key) as client:
        submitted = [
            client.post("/v1/jobs", json={"text": "Hello from the first voice.", "format": "wav"}),
            client.post("/v1/jobs", json={"text": "And the second voice.", "voice": FOLDER_VOICE_ID}),
            client.post("/v1/jobs", json={"text": "I think so.", "voice": BROKEN_VOICE_ID}),  # fails on "θ"
        ]
        assert [answer.status_code for answer in submitted] == [202, 202, 202]
        items = [{"text": "One item."}, {"text": "Another item, in the other voice.", "voice": FOLDER_VOICE_ID}]
        batch = client.post("/v1/batches", json={"items": items, "defaults": {"format": "wav"}})
        assert batch.status_code == 202, batch.text
        listed = client.get(f"/v1/batches/{batch.json()['id']}", params={"limit": 10}).json()["items"]
        ids = [answer.json()["id"] for answer in submitted] + [item["job_id"] for item in listed]
        jobs = [wait_for_job(client, job_id) for job_id in ids]
        report = usage(client)

    assert [job["status"] for job in jobs] == ["succeeded", "succeeded", "failed", "succeeded", "succeeded"]
    delivered = {job["id"]: job["result"]["duration_s"] if job["result"] else 0.0 for job in jobs}
    expected: dict[str, tuple[int, float, int]] = {}
    for job in jobs:
        chars, audio, count = expected.get(job["voice"], (0, 0.0, 0))
        expected[job["voice"]] = (chars + job["characters"], audio + delivered[job["id"]], count + 1)
    assert set(expected) == {DEFAULT_VOICE_ID, FOLDER_VOICE_ID, BROKEN_VOICE_ID}
    assert expected[BROKEN_VOICE_ID][1:] == (0.0, 1)  # its characters are charged, no audio
    voices = by_voice(report)
    assert set(voices) == set(expected)
    for voice, (chars, audio, count) in expected.items():
        assert voices[voice][0] == chars
        assert voices[voice][1] == pytest.approx(audio, abs=0.005)
        assert voices[voice][2] == count
    assert [v["voice"] for v in report["by_voice"]] == sorted(voices, key=lambda v: (-voices[v][0], v))

    day = report["today"]
    assert (report["tenant"], report["name"], report["days"]) == (tenant.id, tenant.name, 30)
    assert day["day"] == report["end"] == today()
    assert day["characters"] == sum(job["characters"] for job in jobs)
    assert day["audio_seconds"] == pytest.approx(sum(delivered.values()), abs=0.01)
    assert day["jobs"] == 5
    assert (day["reserved_audio_seconds"], day["active_jobs"]) == (0, 0)
    # What admission checks, read as the quotas read it.
    assert Quotas(redis_client).usage(tenant.id, today()) == (day["characters"], day["audio_seconds"])
    assert day["limits"] == {
        "max_active_jobs": 10,
        "chars_per_day": 5000,
        "audio_seconds_per_day": 3600,
        "requests_per_second": None,
        "submits_per_second": None,
    }
    assert day["remaining"] == {
        "characters": 5000 - day["characters"],
        "audio_seconds": pytest.approx(3600 - day["audio_seconds"], abs=0.001),
        "active_jobs": 10,
    }
    assert len(report["by_day"]) == 30
    assert report["by_day"][-1] == {k: day[k] for k in ("day", "characters", "audio_seconds", "jobs")}
    assert all(d["jobs"] == d["characters"] == 0 for d in report["by_day"][:-1])
    assert report["total"] == {k: day[k] for k in ("characters", "audio_seconds", "jobs")}
    assert report["start"] == (date.fromisoformat(today()) - timedelta(days=29)).isoformat()


def test_today_agrees_with_admission_and_a_canceled_job_keeps_its_characters_but_no_audio(
    idle_usage_api: UsageApi,
) -> None:
    key, _ = idle_usage_api.new_key(chars_per_day=60, max_active_jobs=3)
    with idle_usage_api.client(key) as client:
        first = client.post("/v1/jobs", json={"text": "x" * 25}).json()
        queued = usage(client)["today"]
        assert (queued["characters"], queued["jobs"], queued["active_jobs"]) == (25, 1, 1)
        assert queued["reserved_audio_seconds"] == queued["audio_seconds"] > 0  # its estimate
        assert queued["remaining"] == {"characters": 35, "audio_seconds": None, "active_jobs": 2}
        refused = client.post("/v1/jobs", json={"text": "y" * 36})
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "chars_per_day_exceeded"
        assert usage(client)["today"] == queued  # a refused job counts nothing
        second = client.post("/v1/jobs", json={"text": "z" * 35})  # exactly what was left
        assert second.status_code == 202
        assert usage(client)["today"]["remaining"]["characters"] == 0
        for job in (first, second.json()):
            assert client.delete(f"/v1/jobs/{job['id']}").json()["status"] == "canceled"
        report = usage(client)
    day = report["today"]
    assert (day["characters"], day["jobs"], day["audio_seconds"], day["reserved_audio_seconds"]) == (60, 2, 0, 0)
    assert (day["active_jobs"], day["remaining"]["active_jobs"]) == (0, 3)
    assert by_voice(report) == {DEFAULT_VOICE_ID: (60, 0, 2)}


def test_a_key_sees_only_its_own_usage(idle_usage_api: UsageApi) -> None:
    (alice, a_tenant), (bob, b_tenant) = idle_usage_api.new_key(), idle_usage_api.new_key()
    with idle_usage_api.client(alice) as a, idle_usage_api.client(bob) as b:
        job = a.post("/v1/jobs", json={"text": "Only mine."}).json()
        mine, theirs = usage(a), usage(b)
        a.delete(f"/v1/jobs/{job['id']}")
    assert (mine["tenant"], theirs["tenant"]) == (a_tenant.id, b_tenant.id)
    assert mine["total"]["jobs"] == 1
    assert theirs["total"] == {"characters": 0, "audio_seconds": 0, "jobs": 0}
    assert theirs["by_voice"] == []
    assert theirs["today"]["active_jobs"] == 0


def test_the_window_reaches_back_as_asked_and_bad_values_are_refused(
    idle_usage_api: UsageApi, redis_client: redis.Redis
) -> None:
    """A day in the past is charged by admission as it was then; the history outlives the longest window."""
    key, tenant = idle_usage_api.new_key()
    five_days_ago = datetime.now(UTC) - timedelta(days=5)
    Quotas(redis_client).admit_many(
        tenant.id, {str(uuid.uuid4()): Charge(FOLDER_VOICE_ID, 40, 3000)}, tenant.limits, five_days_ago
    )
    history_key = usage_key(tenant.id, usage_day(five_days_ago))
    assert int(redis_client.ttl(history_key)) > USAGE_HISTORY_DAYS * 24 * 3600
    assert int(redis_client.ttl(history_key)) <= USAGE_TTL_S
    with idle_usage_api.client(key) as client:
        week = usage(client, days=7)
        assert [d["jobs"] for d in week["by_day"]] == [0, 1, 0, 0, 0, 0, 0]
        assert week["by_day"][1]["day"] == usage_day(five_days_ago)
        assert by_voice(week) == {FOLDER_VOICE_ID: (40, 3.0, 1)}
        assert week["today"]["jobs"] == 0
        assert usage(client, days=5)["total"]["jobs"] == 0
        only_today = usage(client, days=1)
        assert only_today["start"] == only_today["end"] == today()
        assert len(usage(client, days=USAGE_HISTORY_DAYS)["by_day"]) == USAGE_HISTORY_DAYS
        for bad in (0, USAGE_HISTORY_DAYS + 1, "week", -3):
            answer = client.get("/v1/usage", params={"days": bad})
            assert answer.status_code == 422, (bad, answer.text)
            assert answer.json()["error"]["code"] == "invalid_request"
            assert "days" in answer.json()["error"]["message"]


def test_an_admission_given_back_leaves_no_trace(redis_client: redis.Redis) -> None:
    """What the API does when the queue refuses a batch it admitted: every field the admission moved
    (totals, reservation, each voice's) is moved back."""
    quotas, tenant, now = Quotas(redis_client), f"release-{uuid.uuid4().hex[:8]}", datetime.now(UTC)
    charges = {"a": Charge(DEFAULT_VOICE_ID, 10, 1000), "b": Charge(FOLDER_VOICE_ID, 20, 2000)}
    quotas.admit_many(tenant, charges, Limits(), now)
    [admitted], active = quotas.history(tenant, [usage_day(now)])
    assert (admitted.total.characters, admitted.total.jobs, admitted.reserved_ms, active) == (30, 2, 3000, 2)
    assert {v: (u.characters, u.audio_ms) for v, u in admitted.voices.items()} == {
        DEFAULT_VOICE_ID: (10, 1000),
        FOLDER_VOICE_ID: (20, 2000),
    }
    quotas.release_many(tenant, charges, usage_day(now))
    raw = redis_client.hgetall(usage_key(tenant, usage_day(now)))
    assert {int(value) for value in raw.values()} == {0}
    assert quotas.history(tenant, [usage_day(now)])[1] == 0


def ttsq(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cli.main", "usage", *args]  # this checkout's code
    return subprocess.run(argv, env={**os.environ, **settings_env(settings)}, capture_output=True, text=True)


def test_the_usage_command_prints_a_table_and_the_json_the_api_answers(
    idle_usage_api: UsageApi, settings: Settings
) -> None:
    key, tenant = idle_usage_api.new_key(chars_per_day=1000)
    other_key, other = idle_usage_api.new_key()
    with idle_usage_api.client(key) as client, idle_usage_api.client(other_key) as other_client:
        job = client.post("/v1/jobs", json={"text": "Counted for the command.", "voice": FOLDER_VOICE_ID}).json()
        other_job = other_client.post("/v1/jobs", json={"text": "Another key."}).json()
        answered = usage(client, days=7)
        printed = ttsq(settings, "--tenant", tenant.name, "--days", "7", "--json")
        table = ttsq(settings, "--days", "7")
        one = ttsq(settings, "--tenant", tenant.id, "--days", "7")
        client.delete(f"/v1/jobs/{job['id']}")
        other_client.delete(f"/v1/jobs/{other_job['id']}")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == [answered]

    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"usage over 7 UTC days, {answered['start']} to {answered['end']}")
    assert lines[2].split()[:5] == ["TENANT", "NAME", "CHARS", "AUDIO_S", "JOBS"]
    row = next(line for line in lines if line.startswith(tenant.id)).split()
    audio = f"{answered['today']['audio_seconds']:.1f}"
    window = [tenant.id, tenant.name, "24", audio, "1"]
    assert row == [*window, "24", "/", "1,000", audio, "/", "unlimited", "1", "/", "unlimited"]  # today
    assert any(line.startswith(other.id) for line in lines)

    assert one.returncode == 0, one.stderr
    assert [line.split()[0] for line in one.stdout.splitlines() if line.startswith(tenant.id)] == [tenant.id]
    details = [line.split() for line in one.stdout.splitlines()]
    assert [FOLDER_VOICE_ID, "24", audio, "1"] in details
    assert [today(), "24", audio, "1"] in details
    assert not any(line.startswith(other.id) for line in one.stdout.splitlines())

    unknown = ttsq(settings, "--tenant", "no-such-key")
    assert unknown.returncode != 0
    assert "no key with id or name 'no-such-key'" in unknown.stderr
