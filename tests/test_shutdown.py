"""Warm shutdown: SIGTERM makes a worker finish the segments it is running and give back the messages
it had reserved, so a job in progress completes exactly once on another worker, with no wait for the
broker's visibility timeout (what a Kubernetes pod gets within ``terminationGracePeriodSeconds``)."""

from __future__ import annotations

import re
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest
from mypy_boto3_s3 import S3Client

from api.main import create_app
from bench.corpus import narration
from cli.processes import wait_until
from tests.conftest import serve, start_worker, wait_for_job
from ttsq.constants import SEGMENT_TASK
from ttsq.settings import Settings

pytestmark = pytest.mark.recovery

RECOVERY_LIMIT_S = 120.0
"""Far below the visibility timeout (7,200 s): a message lost in the dying worker's hands would only
come back after that."""


def succeeded_segment_tasks(*logs: Path) -> list[str]:
    pattern = re.compile(rf"Task {re.escape(SEGMENT_TASK)}\[([0-9a-f-]+)\] succeeded")
    return [task for path in logs for task in pattern.findall(path.read_text())]


def test_sigterm_mid_job_finishes_in_flight_work_and_the_job_completes_once(
    settings: Settings, tmp_path: Path, s3_client: S3Client
) -> None:
    own = settings.model_copy(update={"queue": f"shutdown-{uuid.uuid4().hex[:8]}"})
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_worker(own, first_log, "leaving")
    with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
        job = client.post("/v1/jobs", json={"text": narration()[:1500], "priority": "bulk"}).json()

        def some_segments_done() -> bool:
            progress = client.get(f"/v1/jobs/{job['id']}").json()["progress"]
            return int(progress["segments_done"]) >= 2

        wait_until(some_segments_done, 120, "first segments")
        first.kill(signal.SIGTERM)
        wait_until(lambda: not first.alive, 60, "warm shutdown")
        code = first.returncode
        first.stop()  # reaps it and closes its log
        assert code == 0
        first_text = first_log.read_text()
        assert "Warm shutdown" in first_text
        after_signal = first_text.split("Warm shutdown", 1)[1]
        assert f"Task {SEGMENT_TASK}[" in after_signal  # the segments in its hands were finished, not dropped
        stopped = client.get(f"/v1/jobs/{job['id']}").json()
        assert stopped["status"] == "running"
        total = stopped["progress"]["segments_total"]
        assert stopped["progress"]["segments_done"] < total  # the rest is left for the next worker

        restarted = time.monotonic()
        second = start_worker(own, second_log, "arriving")
        try:
            done = wait_for_job(client, job["id"], timeout_s=RECOVERY_LIMIT_S)
        finally:
            second.stop()
        recovery_s = time.monotonic() - restarted

    assert done["status"] == "succeeded", done
    assert recovery_s < RECOVERY_LIMIT_S
    assert done["progress"]["segments_done"] == total
    # every segment task succeeded exactly once across the two workers: none lost, none run twice
    tasks = succeeded_segment_tasks(first_log, second_log)
    assert len(tasks) == total
    assert len(set(tasks)) == total
    assert succeeded_segment_tasks(first_log)  # the leaving worker did its share...
    assert succeeded_segment_tasks(second_log)  # ...and the arriving one the rest
    listing = s3_client.list_objects_v2(Bucket=own.s3.bucket, Prefix=f"anonymous/jobs/{job['id']}/")
    assert [o["Key"] for o in listing["Contents"]] == [done["result"]["key"]]
