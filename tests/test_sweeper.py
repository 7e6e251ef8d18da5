"""The sweeper and the cleanup against real Redis, S3 and workers, on a Redis database of their own
(the sweeper looks at every active job of its Redis)."""

from __future__ import annotations

import ast
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from mypy_boto3_s3 import S3Client

from tests.conftest import create_record, start_worker
from tts_core.plan import PlannedUtterance
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import OBJECT_EXPIRY_KEY, consumed_queues, job_objects_prefix, part_object_key
from ttsq.jobs import JobStatus, JobStore
from ttsq.lifecycle import Lifecycle
from ttsq.maintenance import Sweeper, cleanup
from ttsq.ops.commands import beat_argv, webhook_worker_argv
from ttsq.ops.processes import ManagedProcess, wait_until
from ttsq.ops.workerpool import wait_for_node
from ttsq.parts import make_part_store
from ttsq.progress import SegmentStore
from ttsq.settings import Settings, settings_env
from ttsq.storage import ObjectStore

DATABASE = 3


@pytest.fixture(scope="module")
def own_settings(settings: Settings) -> Settings:
    url = settings.redis_url.rsplit("/", 1)[0] + f"/{DATABASE}"
    return settings.model_copy(
        update={
            "redis_url": url,
            "queue": "sweep",
            "sweep_grace_s": 0,
            "sweep_interval_s": 2,
            "cleanup_interval_s": 2,
        }
    )


@pytest.fixture(scope="module")
def own_redis(own_settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(own_settings.redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(scope="module")
def own_worker(own_settings: Settings, own_redis: redis.Redis, tmp_path_factory: pytest.TempPathFactory) -> Any:
    process = start_worker(own_settings, tmp_path_factory.mktemp("sweep") / "worker.log", "sweep-worker")
    yield process
    process.stop()


def sweeper_for(settings: Settings, client: redis.Redis) -> Sweeper:
    jobs = JobStore(client, settings.job_ttl_s)
    segments = SegmentStore(client, settings.job_ttl_s)
    objects = ObjectStore(settings.s3)
    send = TaskPublisher(make_producer(settings), settings.queue)
    lifecycle = Lifecycle(
        jobs, segments, make_part_store(settings, client, objects), objects, send.webhook, send.finish_batch
    )
    return Sweeper(settings, client, jobs, segments, lifecycle, send)


def wait_for_status(jobs: JobStore, job_id: str, timeout_s: float = 60) -> JobStatus:
    wait_until(lambda: jobs.get(job_id).status.terminal, timeout_s, f"job {job_id} finished")
    return jobs.get(job_id).status


def test_a_job_whose_work_vanished_is_queued_again_on_the_second_look(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess
) -> None:
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    record = create_record(jobs)  # stored, never queued: as if its message was lost
    sweeper = sweeper_for(own_settings, own_redis)
    now = time.time()
    first = sweeper.sweep(now)
    assert record.id in first.suspected
    assert first.requeued == []
    second = sweeper.sweep(now + own_settings.sweep_interval_s)
    assert second.requeued == [record.id]
    assert wait_for_status(jobs, record.id) is JobStatus.SUCCEEDED
    assert jobs.get(record.id).requeues == 1
    assert record.id not in sweeper.sweep(now + 3 * own_settings.sweep_interval_s).suspected  # finished: not active


def test_a_job_with_a_message_waiting_is_left_alone(own_settings: Settings, own_redis: redis.Redis) -> None:
    idle = own_settings.model_copy(update={"queue": "sweep-idle"})
    jobs = JobStore(own_redis, idle.job_ttl_s)
    record = create_record(jobs)
    TaskPublisher(make_producer(idle), idle.queue).entry(record.id, record.priority)
    sweeper = sweeper_for(idle, own_redis)
    now = time.time()
    assert record.id not in sweeper.sweep(now).suspected
    assert record.id not in sweeper.sweep(now + idle.sweep_interval_s).requeued
    own_redis.delete(*consumed_queues(idle.queue))
    jobs.forget_active(record.id, record.tenant)


def test_only_the_missing_segments_of_a_running_job_are_queued_again(
    own_settings: Settings, own_redis: redis.Redis
) -> None:
    idle = own_settings.model_copy(update={"queue": "sweep-segments"})
    jobs = JobStore(own_redis, idle.job_ttl_s)
    segments = SegmentStore(own_redis, idle.job_ttl_s)
    record = create_record(jobs, status="running", progress={"segments_total": 3}, priority="bulk")
    segments.save_plan(record.id, [[PlannedUtterance([1, 2, 3])] for _ in range(3)])
    segments.mark_done(record.id, 0, 10.0, 1.0)
    sweeper = sweeper_for(idle, own_redis)
    now = time.time()
    sweeper.sweep(now)
    assert sweeper.sweep(now + idle.sweep_interval_s).requeued == [record.id]
    waiting = own_redis.lrange(f"{idle.queue}.segments", 0, -1)
    args = [ast.literal_eval(json.loads(m)["headers"]["argsrepr"]) for m in waiting]
    assert sorted(args) == [[record.id, 1], [record.id, 2]]
    own_redis.delete(*consumed_queues(idle.queue))
    jobs.forget_active(record.id, record.tenant)


def test_a_job_with_a_claimed_step_is_not_requeued_until_the_claim_is_gone(
    own_settings: Settings, own_redis: redis.Redis
) -> None:
    """A claim that outlived its task (Redis died before the release) would make a re-queued step
    skip: the sweeper waits for it to expire instead of spending a re-queue."""
    idle = own_settings.model_copy(update={"queue": "sweep-claimed"})
    jobs = JobStore(own_redis, idle.job_ttl_s)
    record = create_record(jobs)
    claim = jobs.step_lock(record.id, "entry", ttl_s=60)
    assert claim.acquire()
    sweeper = sweeper_for(idle, own_redis)
    now = time.time()
    sweeper.sweep(now)
    second = sweeper.sweep(now + idle.sweep_interval_s)
    assert second.requeued == []
    assert record.id in second.suspected
    assert jobs.get(record.id).requeues == 0
    claim.release()
    later = time.time() + 2 * idle.sweep_interval_s
    assert sweeper.sweep(later).requeued == [record.id]
    own_redis.delete(*consumed_queues(idle.queue))
    jobs.forget_active(record.id, record.tenant)


def test_a_job_that_keeps_losing_its_work_fails_as_stalled(own_settings: Settings, own_redis: redis.Redis) -> None:
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    record = create_record(jobs, requeues=own_settings.max_requeues)
    sweeper = sweeper_for(own_settings, own_redis)
    now = time.time()
    sweeper.sweep(now)
    assert sweeper.sweep(now + own_settings.sweep_interval_s).failed == [record.id]
    failed = jobs.get(record.id)
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert failed.error.code == "stalled"


def test_cleanup_deletes_expired_jobs_objects_and_stale_parts(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess
) -> None:
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    record = create_record(jobs)
    TaskPublisher(make_producer(own_settings), own_settings.queue).entry(record.id, record.priority)
    assert wait_for_status(jobs, record.id) is JobStatus.SUCCEEDED
    done = jobs.get(record.id)
    assert done.result is not None
    expires = own_redis.zscore(OBJECT_EXPIRY_KEY, done.result.key)
    assert expires is not None
    assert expires == pytest.approx(done.created_at.timestamp() + own_settings.job_ttl_s)
    objects = ObjectStore(own_settings.s3)
    objects.put(part_object_key("dead-job", 0), b"\x00\x00", "application/octet-stream")
    assert cleanup(own_redis, objects, own_settings.part_ttl_s).expired_objects == 0  # nothing due yet
    assert objects.list_keys(job_objects_prefix(done.tenant, done.id)) == [done.result.key]
    report = cleanup(own_redis, objects, own_settings.part_ttl_s, now=expires + own_settings.part_ttl_s)
    assert report.expired_objects >= 1
    assert report.stale_parts >= 1
    assert objects.list_keys(job_objects_prefix(done.tenant, done.id)) == []
    assert objects.list_keys("tmp/dead-job/") == []
    assert own_redis.zscore(OBJECT_EXPIRY_KEY, done.result.key) is None


def test_beat_and_the_service_worker_recover_a_lost_job(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess, tmp_path: Path, s3_client: S3Client
) -> None:
    """The real path: ``ttsq beat`` sends the sweep and the cleanup every 2 s, the service worker runs
    them; the cleanup also asks the store to expire ``tmp/`` itself."""
    env = {**os.environ, **settings_env(own_settings)}
    service = ManagedProcess("service", webhook_worker_argv(2, "sweep-service@%h"), tmp_path / "service.log", env)
    beat = ManagedProcess("beat", beat_argv(tmp_path / "beat-schedule"), tmp_path / "beat.log", env)
    service.start()
    try:
        wait_for_node(own_settings, "sweep-service", service, 60)
        beat.start()
        jobs = JobStore(own_redis, own_settings.job_ttl_s)
        record = create_record(jobs)
        assert wait_for_status(jobs, record.id, timeout_s=90) is JobStatus.SUCCEEDED
        assert "ttsq.sweep" in (tmp_path / "service.log").read_text()

        def tmp_rule() -> list[Any]:
            try:
                rules = s3_client.get_bucket_lifecycle_configuration(Bucket=own_settings.s3.bucket)["Rules"]
            except s3_client.exceptions.ClientError:
                return []
            return [r for r in rules if r["Filter"].get("Prefix") == "tmp/" and r["Expiration"]["Days"] == 1]

        wait_until(lambda: bool(tmp_rule()), 30, "a lifecycle rule on tmp/")
    finally:
        beat.stop()
        service.stop()
