"""Interactive jobs ahead of bulk work, on one real worker."""

from __future__ import annotations

import time

import httpx
import redis

from cli.processes import ManagedProcess
from tests.conftest import JOB_TIMEOUT_S, wait_for, wait_for_job
from tests.test_segment_jobs import PARAGRAPH
from ttsq.settings import Settings


def test_short_jobs_default_to_interactive_and_long_ones_to_bulk(client: httpx.Client, settings: Settings) -> None:
    just_over = " ".join([PARAGRAPH] * 2)[: settings.interactive_max_chars + 1]
    short = client.post("/v1/jobs", json={"text": "Quick."}).json()
    long = client.post("/v1/jobs", json={"text": just_over}).json()
    asked = client.post("/v1/jobs", json={"text": just_over, "priority": "interactive"}).json()
    assert (short["priority"], long["priority"], asked["priority"]) == ("interactive", "bulk", "interactive")
    for job in (short, long, asked):
        assert wait_for_job(client, job["id"])["status"] == "succeeded"


def test_an_interactive_job_overtakes_a_running_bulk_job(client: httpx.Client) -> None:
    """Submitted while a long bulk job has a dozen segments queued, the interactive job is done
    while the bulk job is still running: it did not wait behind the bulk segments."""
    bulk = client.post("/v1/jobs", json={"text": " ".join([PARAGRAPH] * 3), "priority": "bulk"}).json()
    wait_for(
        lambda: client.get(f"/v1/jobs/{bulk['id']}").json(),
        lambda job: job["status"] != "queued" and job["progress"]["segments_total"] > 0,
        JOB_TIMEOUT_S,
        "the bulk job planned",
    )
    quick = client.post("/v1/jobs", json={"text": "Me first, please."}).json()
    quick_done = client.get(f"/v1/jobs/{quick['id']}", params={"wait": 60}).json()
    assert quick_done["status"] == "succeeded"
    bulk_then = client.get(f"/v1/jobs/{bulk['id']}").json()
    assert bulk_then["status"] == "running", "the bulk job finished first: nothing was overtaken"
    assert bulk_then["progress"]["segments_done"] < bulk_then["progress"]["segments_total"]
    assert wait_for_job(client, bulk["id"])["status"] == "succeeded"


def test_the_worker_asks_redis_for_interactive_work_first(redis_client: redis.Redis, worker: ManagedProcess) -> None:
    """What the worker really sends (Redis MONITOR): one BRPOP over its queues, interactive first
    (the fixed queue, then its models' interactive queues), then bulk entries, then bulk segments;
    Redis answers from the first non-empty list."""
    deadline = time.monotonic() + 30
    with redis_client.monitor() as monitor:  # type: ignore[no-untyped-call]
        for entry in monitor.listen():
            words = entry["command"].split()
            if words[0] == "BRPOP" and "tts" in words:
                fixed = [w for w in words[1:] if w in ("tts.interactive", "tts", "tts.segments")]
                assert fixed[:3] == ["tts.interactive", "tts", "tts.segments"]
                before_entry = words[1 : words.index("tts")]
                assert all(w == "tts.interactive" or w.endswith(".interactive") for w in before_entry)
                return
            assert time.monotonic() < deadline, "no BRPOP from the worker within 30 s"
