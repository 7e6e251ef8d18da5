"""``TTSQ_LOG_FORMAT=json``: a worker writes one JSON object per log line, each line of a job's work
names the job and its tenant, and no line carries the job's text."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.main import create_app
from cli.commands import api_argv
from cli.processes import ManagedProcess, free_port, wait_until
from tests.conftest import serve, start_worker, wait_for_job
from ttsq.constants import SEGMENT_TASK, SYNTHESIZE_TASK
from ttsq.settings import Settings, settings_env
from ttsq.tenants import ANONYMOUS_TENANT

SECRET_WORDS = "Marmalade periwinkle"
TEXT = " ".join(
    [
        f"{SECRET_WORDS} is a phrase that must never reach a log line.",
        "The second sentence makes the job long enough to be split into segments.",
        "A third sentence keeps the segment planner busy for one more round.",
        "And a fourth one closes the paragraph with a quiet full stop.",
        "The fifth sentence is here so that the plan needs several parts.",
        "Finally the sixth sentence ends the text that the worker will speak.",
    ]
)


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every log line of the file that is a JSON object; Celery's start-up banner is printed, not logged."""
    records = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


@pytest.fixture
def json_worker_api(settings: Settings, tmp_path: Path) -> Any:
    """A worker logging JSON on a queue of its own, and an API sending there."""
    own = settings.model_copy(update={"queue": f"json-{uuid.uuid4().hex[:8]}"})
    log_path = tmp_path / "worker.log"
    worker = start_worker(own, log_path, "json-worker", {"TTSQ_LOG_FORMAT": "json"})
    try:
        with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield client, log_path
    finally:
        worker.stop()


def test_worker_logs_json_with_the_job_id_on_its_lines(json_worker_api: Any) -> None:
    client, log_path = json_worker_api
    job = client.post("/v1/jobs", json={"text": TEXT, "priority": "bulk"}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded"
    assert done["progress"]["segments_total"] > 1

    text = log_path.read_text()
    assert SECRET_WORDS not in text
    records = json_lines(log_path)
    logged = [line for line in text.splitlines() if '"level"' in line or "INFO" in line]
    assert logged
    assert all(line.startswith("{") for line in logged), "a log line that is not JSON"
    assert {"time", "level", "logger", "message", "job_id", "tenant_id"} <= set(records[-1])

    ours = [r for r in records if r.get("job_id") == job["id"]]
    messages = " | ".join(r["message"] for r in ours)
    assert f"job {job['id']} planned" in messages  # the entry task, from ttsq's own code
    assert f"{SYNTHESIZE_TASK}[" in messages  # Celery's lines of the tasks
    assert f"{SEGMENT_TASK}[" in messages
    assert "succeeded" in messages
    # every line about one of the job's tasks names the job: received (logged by the consumer, outside
    # the task), run, succeeded; and no line names another job
    task_ids = {r["data"]["id"] for r in records if job["id"] in str(r.get("data", {}).get("args", ""))}
    assert len(task_ids) == 1 + done["progress"]["segments_total"] + 1  # entry, segments, assembly
    about_tasks = [r for r in records if any(task_id in r["message"] for task_id in task_ids)]
    assert len(about_tasks) >= 2 * len(task_ids)
    assert all(r["job_id"] == job["id"] for r in about_tasks), about_tasks
    assert {r["job_id"] for r in records} <= {None, job["id"]}
    # and every line logged in its tasks names its tenant; Celery's consumer logs "received" as the
    # message arrives, before any of ttsq's code has read the job (its id is in the task's arguments)
    in_tasks = [r for r in ours if "] received" not in r["message"]]
    assert in_tasks
    assert all(r["tenant_id"] == ANONYMOUS_TENANT for r in in_tasks), in_tasks


def test_api_logs_json_with_the_request_id_and_no_text(settings: Settings, tmp_path: Path) -> None:
    """The API as ``ttsq dev`` and compose run it (uvicorn in its own process)."""
    port = free_port()
    idle = settings.model_copy(update={"queue": f"idle-{uuid.uuid4().hex[:8]}"})  # no worker reads it
    env = {**os.environ, **settings_env(idle), "TTSQ_LOG_FORMAT": "json"}
    api = ManagedProcess("json-api", api_argv("127.0.0.1", port), tmp_path / "api.log", env).start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{base}/healthz").status_code == 200, 60, "API", api)
        answer = httpx.post(
            f"{base}/v1/jobs",
            json={"text": f"{SECRET_WORDS} stays out of the API log.", "priority": "bulk"},
            headers={"X-Request-ID": "req-7"},
        )
        assert answer.status_code == 202
        job_id = answer.json()["id"]
        log_path = tmp_path / "api.log"
        wait_until(lambda: job_id in log_path.read_text(), 10, "the job's log line")
    finally:
        api.stop()
    text = log_path.read_text()
    assert SECRET_WORDS not in text
    queued = [r for r in json_lines(log_path) if job_id in r["message"]]
    assert queued
    assert all(r["request_id"] == "req-7" for r in queued)
    assert all((r["job_id"], r["tenant_id"]) == (job_id, ANONYMOUS_TENANT) for r in queued)
    assert all(r["level"] == "INFO" for r in queued)
