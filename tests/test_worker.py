"""The worker through Redis and S3: failures are recorded once, redelivery is idempotent,
and task messages carry job ids, never user text."""

from __future__ import annotations

import base64
import json
import time
from typing import Any, cast

import httpx
import pytest
import redis
from mypy_boto3_s3 import S3Client

from cli.processes import ManagedProcess
from tests.conftest import (
    JOB_TIMEOUT_S,
    TEST_BUCKET,
    IdleQueueApi,
    create_record,
    enqueue,
    wait_for,
    wait_for_job,
    wait_for_tasks,
)
from tests.test_segment_jobs import THREE_SEGMENTS
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.broker import make_producer
from ttsq.constants import SYNTHESIZE_TASK, job_events_channel
from ttsq.events import EventKind, JobEvent, parse_event
from ttsq.job_record import JobStatus, utcnow
from ttsq.job_store import JobStore
from ttsq.settings import Settings


def objects_under(s3_client: S3Client, job_id: str) -> list[str]:
    listing = s3_client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"anonymous/jobs/{job_id}/")
    return [item["Key"] for item in listing.get("Contents", [])]


@pytest.mark.usefixtures("worker")
@pytest.mark.parametrize(
    ("fields", "code"),
    [({"format": "aiff"}, "unsupported_format"), ({"voice": "missing-voice"}, "voice_not_found")],
)
def test_bad_job_fails_once_with_a_code(
    store: JobStore, settings: Settings, client: httpx.Client, fields: dict[str, str], code: str
) -> None:
    record = create_record(store, **fields)
    enqueue(settings, record.id)
    done = wait_for_job(client, record.id)
    assert done["status"] == "failed"
    assert done["error"]["code"] == code
    assert done["result"] is None
    assert store.get(record.id).attempts == 1, "bad input must not be retried"


def test_redelivered_task_of_a_finished_job_changes_nothing(
    store: JobStore, settings: Settings, client: httpx.Client, s3_client: S3Client, worker: ManagedProcess
) -> None:
    record = create_record(store)
    enqueue(settings, record.id)
    first = wait_for_job(client, record.id)
    assert first["status"] == "succeeded"
    wait_for_tasks(worker, [enqueue(settings, record.id)])
    assert store.get(record.id).attempts == 1
    assert client.get(f"/v1/jobs/{record.id}").json()["finished_at"] == first["finished_at"]
    assert objects_under(s3_client, record.id) == [first["result"]["key"]]


def test_task_redelivered_after_a_crash_overwrites_its_object(
    store: JobStore, settings: Settings, client: httpx.Client, s3_client: S3Client, worker: ManagedProcess
) -> None:
    """A job left running by a dead worker runs again and writes the same single object."""
    record = create_record(store, status=JobStatus.RUNNING, started_at=utcnow(), attempts=1)
    deliveries = [enqueue(settings, record.id), enqueue(settings, record.id)]
    done = wait_for_job(client, record.id)
    assert done["status"] == "succeeded"
    assert done["started_at"] == record.started_at.isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]
    wait_for_tasks(worker, deliveries)
    assert store.get(record.id).attempts == 2, "the second delivery must see the job finished and skip it"
    assert objects_under(s3_client, record.id) == [done["result"]["key"]]


def test_task_message_carries_the_job_id_not_the_text(idle_queue_api: IdleQueueApi, redis_client: redis.Redis) -> None:
    secret_text = "Confidential sentence about project Nightingale."
    job = idle_queue_api.client.post("/v1/jobs", json={"text": secret_text}).json()
    raw = redis_client.lrange(idle_queue_api.queue, 0, -1)
    assert len(raw) == 1
    message = json.loads(raw[0])
    body = json.loads(base64.b64decode(message["body"]))
    assert body[0] == [job["id"]]
    assert message["headers"]["task"] == SYNTHESIZE_TASK
    assert message["headers"]["id"] == job["id"]
    assert b"Nightingale" not in raw[0]
    assert "Nightingale" not in json.dumps(message["headers"])


def test_worker_loads_the_model_once_and_logs_no_user_text(worker: ManagedProcess, client: httpx.Client) -> None:
    text = "Unmistakable marker phrase Zanzibar quokka."
    for _ in range(2):
        wait_for_job(client, client.post("/v1/jobs", json={"text": text}).json()["id"])
    assert worker.log_path is not None
    log = worker.log_path.read_text()
    assert "succeeded" in log
    assert "Zanzibar" not in log
    assert log.count(f"loaded voice {DEFAULT_VOICE_ID}") == 1
    assert log.index(f"loaded voice {DEFAULT_VOICE_ID}") < log.index(" ready.")


@pytest.mark.parametrize(("crashed", "outcome"), [(2, "succeeded"), (3, "failed")])
def test_a_step_that_took_down_its_workers_fails_instead_of_running_again(
    store: JobStore, settings: Settings, client: httpx.Client, worker: ManagedProcess, crashed: int, outcome: str
) -> None:
    """A step whose deliveries started and never ended (their worker died in them: a crash in
    native code, a kill) is counted per step in Redis; past ``max_step_starts`` of those, the next
    delivery fails the job as ``worker_crashed`` before the step runs again (issue 19, finding 2:
    a poison text killed every worker in turn). The starts of dead workers are written here as
    their deliveries leave them; ``tests/test_faults.py`` kills real workers."""
    assert settings.max_step_starts == 3
    record = create_record(store, "Spoken once the crashes are counted.")
    for n in range(crashed):
        store.step_started(record.id, "entry", f"dead-worker-{n}")
    wait_for_tasks(worker, [enqueue(settings, record.id)])
    done = wait_for_job(client, record.id)
    assert done["status"] == outcome
    if outcome == "failed":
        assert done["error"]["code"] == "worker_crashed"
        assert "stopped its worker 3 times" in done["error"]["message"]
        assert done["progress"]["segments_total"] is None, "the step did not run again"


@pytest.mark.parametrize(("text", "segments"), [("One sentence, one segment.", 1), (THREE_SEGMENTS, 3)])
def test_a_job_record_is_written_once_per_state_change(
    store: JobStore, settings: Settings, worker: ManagedProcess, redis_client: redis.Redis, text: str, segments: int
) -> None:
    """Each record write publishes one status event: the worker claims the job with its plan in one
    write and ends it in one; segments done are counted beside the record, not written into it."""
    record = create_record(store, text)
    messages: list[JobEvent] = []
    with redis_client.pubsub() as events:  # type: ignore[no-untyped-call]  # untyped in redis-py
        events.subscribe(job_events_channel(record.id))
        enqueue(settings, record.id)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not store.get(record.id).status.terminal and time.monotonic() < deadline:
            if (message := events.get_message(ignore_subscribe_messages=True, timeout=0.5)) is not None:
                messages.append(cast(JobEvent, parse_event(message["data"])))
        while (message := events.get_message(ignore_subscribe_messages=True, timeout=0.5)) is not None:
            messages.append(cast(JobEvent, parse_event(message["data"])))
    done = store.get(record.id)
    assert done.status is JobStatus.SUCCEEDED
    assert done.progress.segments_total == segments
    assert [event.status for event in messages if event.kind is EventKind.STATUS] == ["running", "succeeded"]
    ticks = [event for event in messages if event.kind is EventKind.SEGMENT]
    assert len(ticks) == (segments if segments > 1 else 0)


def test_celery_inspect_batches_reports_the_workers_batching_and_its_recent_calls(
    settings: Settings, client: httpx.Client, worker: ManagedProcess
) -> None:
    """``celery inspect batches`` reads the process's voice host, built as the worker started."""
    job = client.post("/v1/jobs", json={"text": "Counted in the batch history."}).json()
    assert wait_for_job(client, job["id"])["status"] == "succeeded"
    producer = make_producer(settings)
    try:
        replies = cast(dict[str, Any], producer.control.inspect(timeout=5)._request("batches", limit=3) or {})
    finally:
        producer.close()
    mine = [answer for node, answer in replies.items() if "main-worker" in node]
    assert len(mine) == 1, replies
    answer = mine[0]
    assert answer["device"] == "cpu", answer
    assert answer["max_batch"] >= 1, answer
    assert answer["calls"] >= 1, answer
    assert answer["items"] >= answer["calls"], answer
    assert 1 <= len(answer["recent"]) <= 3, answer


def _batches(settings: Settings, limit: int) -> dict[str, Any]:
    """The session worker's ``celery inspect batches`` answer."""
    producer = make_producer(settings)
    try:
        replies = cast(dict[str, Any], producer.control.inspect(timeout=5)._request("batches", limit=limit) or {})
    finally:
        producer.close()
    (answer,) = [answer for node, answer in replies.items() if "main-worker" in node]
    return cast(dict[str, Any], answer)


def test_a_call_beside_another_runs_and_the_models_one_thread_twin_loads(
    settings: Settings, client: httpx.Client, worker: ManagedProcess
) -> None:
    """Two calls at once (``parallel_calls``, 2 on CPU): a segment's sentences are handed to the
    batcher together, so the second starts while the first runs; calls that meet have the model's
    one-thread twin loaded (``workers.twin_sessions``), which the worker then names."""
    text = "The first sentence is here. A second one follows it. Then comes a third. And a fourth ends it."
    job = client.post("/v1/jobs", json={"text": text}).json()
    assert wait_for_job(client, job["id"])["status"] == "succeeded"
    answer = wait_for(lambda: _batches(settings, 1000), lambda a: DEFAULT_VOICE_ID in a["twins"], 30, "the twin loaded")
    assert answer["parallel_calls"] == 2
    mine = [r for r in answer["recent"] if any(tag.startswith(job["id"]) for tag in r["tags"])]
    assert len(mine) >= 4, answer["recent"][-8:]
    assert any(r["beside"] >= 1 for r in mine), mine
    assert worker.log_path is not None
    assert f"loaded the one-thread twin of model {DEFAULT_VOICE_ID}" in worker.log_path.read_text()
