"""Interactive jobs ahead of bulk work, on one real worker."""

from __future__ import annotations

import time

import httpx

from tests.conftest import wait_for_job
from tests.test_segment_jobs import PARAGRAPH


def test_short_jobs_default_to_interactive_and_long_ones_to_bulk(client: httpx.Client) -> None:
    short = client.post("/v1/jobs", json={"text": "Quick."}).json()
    long = client.post("/v1/jobs", json={"text": "Slow. " * 300}).json()
    asked = client.post("/v1/jobs", json={"text": "Slow. " * 300, "priority": "interactive"}).json()
    assert (short["priority"], long["priority"], asked["priority"]) == ("interactive", "bulk", "interactive")
    for job in (short, long, asked):
        assert wait_for_job(client, job["id"])["status"] == "succeeded"


def test_an_interactive_job_overtakes_a_running_bulk_job(client: httpx.Client) -> None:
    """Submitted while a long bulk job has dozens of segments queued, the interactive job is done
    while the bulk job is still running: it did not wait behind the bulk segments."""
    bulk = client.post("/v1/jobs", json={"text": " ".join([PARAGRAPH] * 8), "priority": "bulk"}).json()
    running = client.get(f"/v1/jobs/{bulk['id']}", params={"wait": 0}).json()
    while running["status"] == "queued" or not running["progress"]["segments_total"]:
        time.sleep(0.05)
        running = client.get(f"/v1/jobs/{bulk['id']}").json()
    quick = client.post("/v1/jobs", json={"text": "Me first, please."}).json()
    quick_done = client.get(f"/v1/jobs/{quick['id']}", params={"wait": 60}).json()
    assert quick_done["status"] == "succeeded"
    bulk_then = client.get(f"/v1/jobs/{bulk['id']}").json()
    assert bulk_then["status"] == "running", "the bulk job finished first: nothing was overtaken"
    assert bulk_then["progress"]["segments_done"] < bulk_then["progress"]["segments_total"]
    assert wait_for_job(client, bulk["id"], 240)["status"] == "succeeded"
