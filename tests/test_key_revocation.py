"""What revoking a key does to its jobs and links (issue 19, finding 13), through the real ``ttsq keys``
CLI, the real API and the suite's worker: queued and running jobs are canceled (a queued one then
never runs), ``--keep-jobs`` lets them finish, presigned links live until they expire unless
``--delete-audio`` deletes the results."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import httpx
import pytest
import redis
from mypy_boto3_s3 import S3Client

from api.main import create_app
from cli.processes import ManagedProcess, wait_until
from tests.conftest import TEST_BUCKET, serve, wait_for_job, wait_for_tasks
from ttsq.constants import consumed_queues, interactive_queue, job_objects_prefix
from ttsq.job_record import JobStatus
from ttsq.job_store import JobStore
from ttsq.settings import Settings, settings_env

SHORT = {"text": "Said for a key about to go.", "format": "wav"}
LONG = " ".join(["The keeper climbed the stairs and lit the lamp, then wrote the weather in his book."] * 40)
LONG_PAUSE_S: Final = 2.0
"""LONG's sentence pause: a sentence (163 ids) and its pause (80) weigh over half a segment's 400, so
each segment is one sentence and the segments still in flight when the key goes are short."""
TTSQ = [sys.executable, "-m", "cli.main"]
"""``ttsq`` as this checkout's code (the installed script may point at another)."""


def ttsq(settings: Settings, *args: str) -> str:
    """Run the real CLI with the suite's settings; its output."""
    env = {**os.environ, **settings_env(settings)}
    done = subprocess.run([*TTSQ, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_key(settings: Settings) -> tuple[str, str]:
    """A key made by ``ttsq keys create``: its name and the key."""
    name = f"revoke-{uuid.uuid4().hex[:6]}"
    return name, ttsq(settings, "keys", "create", name).strip().splitlines()[-1]


@dataclass(frozen=True)
class Api:
    url: str
    queue: str
    """Where its short jobs' entry tasks wait."""

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture
def idle_api(settings: Settings, redis_client: redis.Redis) -> Iterator[Api]:
    """Keys required; its jobs wait in queues no worker reads, until a test hands them over."""
    base = f"idle-{uuid.uuid4()}"
    with serve(
        create_app(settings.model_copy(update={"auth_required": True, "queue": base, "model_affinity": False}))
    ) as url:
        yield Api(url, interactive_queue(base))
    redis_client.delete(*consumed_queues(base))


@pytest.fixture(scope="module")
def working_api(settings: Settings, worker: ManagedProcess) -> Iterator[Api]:
    """Keys required, in front of the suite's worker."""
    with serve(create_app(settings.model_copy(update={"auth_required": True}))) as url:
        yield Api(url, settings.queue)


def hand_to_worker(redis_client: redis.Redis, api: Api, settings: Settings, count: int) -> None:
    """Move the ``count`` oldest entry tasks of the idle queue to the worker's."""
    for _ in range(count):
        assert redis_client.lmove(api.queue, settings.queue, "RIGHT", "LEFT") is not None


def test_revoking_a_key_cancels_its_queued_jobs_which_then_never_run(
    idle_api: Api, settings: Settings, worker: ManagedProcess, redis_client: redis.Redis
) -> None:
    jobs = JobStore(redis_client, settings.job_ttl_s)
    name, key = new_key(settings)
    _, bystander = new_key(settings)
    with idle_api.client(key) as client:
        mine = [client.post("/v1/jobs", json=SHORT).json()["id"] for _ in range(2)]
    with idle_api.client(bystander) as client:
        theirs = client.post("/v1/jobs", json=SHORT).json()["id"]

    output = ttsq(settings, "keys", "revoke", name)
    assert "canceled 2 queued or running jobs" in output
    assert [jobs.get(job_id).status for job_id in mine] == [JobStatus.CANCELED] * 2
    assert jobs.get(theirs).status is JobStatus.QUEUED  # another key's job is not touched
    with idle_api.client(key) as client:
        assert client.get(f"/v1/jobs/{mine[0]}").status_code == 401

    hand_to_worker(redis_client, idle_api, settings, 2)  # their entry tasks still exist: they must not run
    wait_for_tasks(worker, mine)
    for job_id in mine:
        record = jobs.get(job_id)
        assert (record.status, record.started_at, record.result) == (JobStatus.CANCELED, None, None)


def test_keep_jobs_lets_them_run(
    idle_api: Api, settings: Settings, worker: ManagedProcess, redis_client: redis.Redis
) -> None:
    jobs = JobStore(redis_client, settings.job_ttl_s)
    name, key = new_key(settings)
    with idle_api.client(key) as client:
        job_id = client.post("/v1/jobs", json=SHORT).json()["id"]
    assert "1 queued or running jobs go on" in ttsq(settings, "keys", "revoke", name, "--keep-jobs")
    assert jobs.get(job_id).status is JobStatus.QUEUED
    hand_to_worker(redis_client, idle_api, settings, 1)
    wait_until(lambda: jobs.get(job_id).status.terminal, 60, "the kept job")
    assert jobs.get(job_id).status is JobStatus.SUCCEEDED


def test_a_running_job_of_a_revoked_key_stops(
    working_api: Api, settings: Settings, redis_client: redis.Redis, s3_client: S3Client
) -> None:
    jobs = JobStore(redis_client, settings.job_ttl_s)
    name, key = new_key(settings)
    body = {"text": LONG, "format": "wav", "sentence_pause_s": LONG_PAUSE_S}
    with working_api.client(key) as client:
        job_id = client.post("/v1/jobs", json=body).json()["id"]
    wait_until(lambda: jobs.get(job_id).status is JobStatus.RUNNING, 60, "the job running")
    assert "canceled 1 queued or running jobs" in ttsq(settings, "keys", "revoke", name)
    assert jobs.get(job_id).status is JobStatus.CANCELED
    # The segments in flight finish, see the status and drop their parts; nothing is assembled.
    wait_until(lambda: not list(redis_client.scan_iter(f"ttsq:job:{job_id}:part:*")), 60, "parts dropped")
    after = jobs.get(job_id)
    assert (after.status, after.result) == (JobStatus.CANCELED, None)
    listing = s3_client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=job_objects_prefix(after.tenant, job_id))
    assert listing.get("Contents", []) == []


def test_links_live_until_they_expire_unless_delete_audio_deletes_the_results(
    working_api: Api, settings: Settings, redis_client: redis.Redis
) -> None:
    name, key = new_key(settings)
    with working_api.client(key) as client:
        done = wait_for_job(client, client.post("/v1/jobs", json=SHORT).json()["id"])
    link = done["result"]["url"]
    audio = httpx.get(link)
    assert audio.status_code == 200
    assert audio.content[:4] == b"RIFF"
    assert len(audio.content) == done["result"]["bytes"]

    ttsq(settings, "keys", "revoke", name)
    kept = httpx.get(link)  # signed by the store's key: it lives out its TTL
    assert (kept.status_code, kept.content) == (200, audio.content)

    output = ttsq(settings, "keys", "revoke", name, "--delete-audio")
    assert "deleted the stored results of 1 finished jobs" in output
    assert httpx.get(link).status_code == 404
    assert JobStore(redis_client, settings.job_ttl_s).get(done["id"]).purged_at is not None
