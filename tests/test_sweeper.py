"""The sweeper and the cleanup against real Redis, S3 and workers, on a Redis database of their own
(the sweeper looks at every active job of its Redis)."""

from __future__ import annotations

import ast
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import redis
from mypy_boto3_s3 import S3Client

from cli.commands import beat_argv, webhook_worker_argv
from cli.processes import ManagedProcess, wait_until
from cli.workerpool import wait_for_node
from tests.conftest import create_record, database_url, production_sweep, start_worker
from tts_core.base.plan import PlannedUtterance
from ttsq.batch_bundles import BundleKind, BundleState, BundleStatus
from ttsq.batches import BatchRecord, BatchStatus, BatchStore, cancel_batch, finish_batch, new_batch_id
from ttsq.broker import TaskPublisher, make_producer, register_model_queues
from ttsq.bundling import make_bundles
from ttsq.constants import (
    ACTIVE_BATCHES_KEY,
    MAINTENANCE_QUEUE,
    MODEL_QUEUES_KEY,
    OBJECT_EXPIRY_KEY,
    batch_counts_key,
    batch_items_key,
    batch_key,
    bulk_segments_queue,
    consumed_queues,
    job_objects_prefix,
    model_queue,
    part_object_key,
)
from ttsq.job_record import JobError, JobRecord, JobStatus, Priority, utcnow
from ttsq.job_store import JobStore
from ttsq.lifecycle import Lifecycle, cancel_job
from ttsq.maintenance import Sweeper, cleanup
from ttsq.segment_store import SegmentStore
from ttsq.settings import Settings, settings_env
from ttsq.storage import ObjectStore
from ttsq.stores import Stores

DATABASE = 3


@pytest.fixture(scope="module")
def own_settings(settings: Settings) -> Settings:
    url = database_url(settings.redis_url, DATABASE)
    return settings.model_copy(
        update={
            "redis_url": url,
            "queue": "sweep",
            "sweep_grace_s": 0,
            "sweep_interval_s": 1,
            "cleanup_interval_s": 1,
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


def lifecycle_for(settings: Settings) -> Lifecycle:
    """As the sweeper's, over the stores a service worker builds ."""
    send = TaskPublisher(make_producer(settings), settings.queue)
    return Stores.connect(settings, 30).lifecycle(send.finish_batch)


def sweeper_for(settings: Settings) -> Sweeper:
    send = TaskPublisher(make_producer(settings), settings.queue)
    stores = Stores.connect(settings, 30)
    return Sweeper(stores, stores.lifecycle(send.finish_batch), send)


def wait_for_status(jobs: JobStore, job_id: str, timeout_s: float = 60) -> JobStatus:
    wait_until(lambda: jobs.get(job_id).status.terminal, timeout_s, f"job {job_id} finished")
    return jobs.get(job_id).status


def test_a_job_whose_work_vanished_is_queued_again_on_the_second_look(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess
) -> None:
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    record = create_record(jobs)  # stored, never queued: as if its message was lost
    sweeper = sweeper_for(own_settings)
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
    sweeper = sweeper_for(idle)
    now = time.time()
    assert record.id not in sweeper.sweep(now).suspected
    assert record.id not in sweeper.sweep(now + idle.sweep_interval_s).requeued
    own_redis.delete(*consumed_queues(idle.queue))
    jobs.forget_active(record.id, record.tenant)


def test_a_job_whose_segments_wait_in_a_model_queue_is_left_alone(
    own_settings: Settings, own_redis: redis.Redis
) -> None:
    """Voice affinity puts bulk segments in their model's queue: the sweeper finds them there once a
    worker said it reads that queue; in a model queue no worker reads, they are lost work, sent
    again to the fixed segment queue that every worker reads."""
    idle = own_settings.model_copy(update={"queue": "sweep-models"})
    jobs = JobStore(own_redis, idle.job_ttl_s)
    segments = SegmentStore(own_redis, idle.job_ttl_s)
    record = create_record(jobs, status="running", progress={"segments_total": 2}, priority="bulk")
    segments.save_plan(record.id, [[PlannedUtterance([1, 2, 3])] for _ in range(2)])
    kokoro, unread = model_queue(idle.queue, "kokoro"), model_queue(idle.queue, "nobody")
    TaskPublisher(make_producer(idle), idle.queue).segments(record.id, [0, 1], Priority.BULK, "kokoro")
    assert own_redis.llen(kokoro) == 2
    register_model_queues(own_redis, [kokoro])
    sweeper = sweeper_for(idle)
    now = time.time()
    assert record.id not in sweeper.sweep(now).suspected
    assert record.id not in sweeper.sweep(now + idle.sweep_interval_s).requeued

    own_redis.rename(kokoro, unread)  # as if sent to a model no worker has
    assert record.id in sweeper.sweep(now + 2 * idle.sweep_interval_s).suspected
    assert sweeper.sweep(now + 3 * idle.sweep_interval_s).requeued == [record.id]
    assert own_redis.llen(bulk_segments_queue(idle.queue)) == 2
    own_redis.delete(unread, *consumed_queues(idle.queue))
    own_redis.srem(MODEL_QUEUES_KEY, kokoro)
    jobs.forget_active(record.id, record.tenant)


def test_only_the_missing_segments_of_a_running_job_are_queued_again(
    own_settings: Settings, own_redis: redis.Redis
) -> None:
    idle = own_settings.model_copy(update={"queue": "sweep-segments"})
    jobs = JobStore(own_redis, idle.job_ttl_s)
    segments = SegmentStore(own_redis, idle.job_ttl_s)
    record = create_record(jobs, status="running", progress={"segments_total": 3}, priority="bulk")
    segments.save_plan(record.id, [[PlannedUtterance([1, 2, 3])] for _ in range(3)])
    segments.mark_done(record.id, 0, "a1", 10.0, 1.0)
    sweeper = sweeper_for(idle)
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
    sweeper = sweeper_for(idle)
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
    sweeper = sweeper_for(own_settings)
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
    objects.put(part_object_key("dead-job", 0, "a1"), b"\x00\x00", "application/octet-stream")
    assert cleanup(own_redis, objects, own_settings.part_ttl_s).expired_objects == 0  # nothing due yet
    assert objects.list_keys(job_objects_prefix(done.tenant, done.id)) == [done.result.key]
    report = cleanup(own_redis, objects, own_settings.part_ttl_s, now=expires + own_settings.part_ttl_s)
    assert report.expired_objects >= 1
    assert report.stale_parts >= 1
    assert objects.list_keys(job_objects_prefix(done.tenant, done.id)) == []
    assert objects.list_keys("tmp/dead-job/") == []
    assert own_redis.zscore(OBJECT_EXPIRY_KEY, done.result.key) is None


def test_the_service_worker_recovers_a_lost_job_within_seconds_without_beat(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess, tmp_path: Path, s3_client: S3Client
) -> None:
    """The real path at the production's sweep settings: no beat; the service worker that holds the
    sweeping lease finds a job that no message names (stored, never queued, as if Redis lost its
    entry task) and queues its work again: it succeeds within seconds (before issue 35 only beat's
    sweep task, every minute, after a 120 s grace, found it). Beat then only sends the cleanup, which
    also asks the store to expire ``tmp/`` itself."""
    env = {**os.environ, **settings_env(production_sweep(own_settings))}
    service = ManagedProcess("service", webhook_worker_argv(2, "sweep-service@%h"), tmp_path / "service.log", env)
    beat = ManagedProcess("beat", beat_argv(tmp_path / "beat-schedule"), tmp_path / "beat.log", env)
    service.start()
    try:
        wait_for_node(own_settings, "sweep-service", service, 60)
        jobs = JobStore(own_redis, own_settings.job_ttl_s)
        record = create_record(jobs)
        # The grace (5 s), a confirming look 1 s later and the job itself: about 7 s here; the wait
        # is generous for a loaded machine, and well short of the old sweep's 2 to 4 minutes.
        assert wait_for_status(jobs, record.id, timeout_s=LOST_JOB_WAIT_S) is JobStatus.SUCCEEDED
        assert jobs.get(record.id).requeues == 1
        assert "Task ttsq.sweep[" not in (tmp_path / "service.log").read_text()  # no sweep task took part

        beat.start()

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


LOST_JOB_WAIT_S: Final = 60.0
"""Before issue 35 the first sweep to re-queue it came at least 120 s (the grace) after it was lost."""


def create_batch(jobs: JobStore, batches: BatchStore, size: int) -> tuple[BatchRecord, list[JobRecord]]:
    """A batch and its queued items written straight to Redis, as the API would (nothing sent)."""
    batch_id = new_batch_id()
    items = [create_record(jobs, f"Item number {n}.", batch_id=batch_id, ref=str(n)) for n in range(size)]
    record = BatchRecord(
        id=batch_id,
        tenant=items[0].tenant,
        total=size,
        characters=sum(i.characters for i in items),
        created_at=utcnow(),
    )
    batches.create(record, [item.id for item in items])
    return record, items


def messages_naming(client: redis.Redis, batch_id: str) -> int:
    return sum(batch_id.encode() in message for message in client.lrange(MAINTENANCE_QUEUE, 0, -1))


@contextmanager
def service_worker(settings: Settings, log_path: Path, name: str) -> Iterator[ManagedProcess]:
    """The service worker (webhooks, maintenance, batches' finishing tasks) on the module's Redis."""
    env = {**os.environ, **settings_env(settings)}
    process = ManagedProcess(name, webhook_worker_argv(2, f"{name}@%h"), log_path, env).start()
    try:
        wait_for_node(settings, name, process, 60)
        yield process
    finally:
        process.stop()


def test_a_batch_whose_finishing_task_was_lost_is_finished_on_the_second_look(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess, tmp_path: Path
) -> None:
    """The items run and the last one sends ``ttsq.finish_batch``; no service worker takes it here,
    and the message is deleted (as a Redis crash would lose it). The sweeper sends it again."""
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    batches = BatchStore(own_redis, own_settings.job_ttl_s)
    batch, items = create_batch(jobs, batches, 2)
    send = TaskPublisher(make_producer(own_settings), own_settings.queue)
    for item in items:
        send.entry(item.id, item.priority)
    assert [wait_for_status(jobs, item.id) for item in items] == [JobStatus.SUCCEEDED] * 2
    wait_until(lambda: messages_naming(own_redis, batch.id) == 1, 30, "the batch's finishing task sent")
    own_redis.delete(MAINTENANCE_QUEUE)
    assert batches.get(batch.id).status is BatchStatus.RUNNING
    assert own_redis.zscore(ACTIVE_BATCHES_KEY, batch.id) is not None
    sweeper = sweeper_for(own_settings)
    now = time.time()
    first = sweeper.sweep(now).batches
    assert batch.id in first.suspected
    assert first.resent == []
    assert messages_naming(own_redis, batch.id) == 0
    assert sweeper.sweep(now + own_settings.sweep_interval_s).batches.resent == [batch.id]
    assert messages_naming(own_redis, batch.id) == 1
    with service_worker(own_settings, tmp_path / "service.log", "batch-service"):
        wait_until(lambda: batches.get(batch.id).manifest_key is not None, 60, "the batch finished")
    finished = batches.get(batch.id)
    assert finished.status is BatchStatus.COMPLETED
    assert finished.manifest_key is not None
    assert finished.manifest_key.startswith(f"{batch.tenant}/batches/{batch.id}/")
    stored = ObjectStore(own_settings.s3).get(finished.manifest_key)
    assert stored is not None
    manifest = json.loads(stored)
    assert manifest["status"] == "completed"
    assert [(e["job_id"], e["status"]) for e in manifest["items"]] == [(i.id, "succeeded") for i in items]
    assert own_redis.zscore(ACTIVE_BATCHES_KEY, batch.id) is None
    later = sweeper.sweep(now + 3 * own_settings.sweep_interval_s).batches
    assert batch.id not in later.suspected + later.resent


def test_a_batch_with_its_finishing_task_waiting_is_left_alone(own_settings: Settings, own_redis: redis.Redis) -> None:
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    batches = BatchStore(own_redis, own_settings.job_ttl_s)
    batch, items = create_batch(jobs, batches, 1)
    canceled = jobs.transition(items[0].id, {JobStatus.QUEUED}, JobStatus.CANCELED, {})
    assert canceled is not None
    assert canceled.completes_batch
    TaskPublisher(make_producer(own_settings), own_settings.queue).finish_batch(batch.id)
    sweeper = sweeper_for(own_settings)
    now = time.time()
    for later in (0, own_settings.sweep_interval_s, 2 * own_settings.sweep_interval_s):
        report = sweeper.sweep(now + later).batches
        assert batch.id not in report.suspected + report.resent
    assert messages_naming(own_redis, batch.id) == 1
    own_redis.delete(MAINTENANCE_QUEUE)
    batches.forget_active([batch.id])


def test_the_batch_index_keeps_only_unfinished_batches(own_settings: Settings, own_redis: redis.Redis) -> None:
    """A finished batch leaves the index when its manifest is written; one whose record expired, or
    one finished while its entry was kept, is dropped by the sweep; one with items to go stays."""
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    batches = BatchStore(own_redis, own_settings.job_ttl_s)
    objects = ObjectStore(own_settings.s3)
    finished, [item] = create_batch(jobs, batches, 1)
    assert own_redis.zscore(ACTIVE_BATCHES_KEY, finished.id) is not None
    jobs.transition(item.id, {JobStatus.QUEUED}, JobStatus.CANCELED, {})
    assert finish_batch(finished.id, batches, jobs, objects, "a1") is not None
    assert own_redis.zscore(ACTIVE_BATCHES_KEY, finished.id) is None
    expired, expired_items = create_batch(jobs, batches, 1)
    own_redis.delete(batch_key(expired.id), batch_items_key(expired.id), batch_counts_key(expired.id))
    kept, kept_items = create_batch(jobs, batches, 1)
    jobs.transition(kept_items[0].id, {JobStatus.QUEUED}, JobStatus.CANCELED, {})
    assert finish_batch(kept.id, batches, jobs, objects, "a1") is not None
    own_redis.zadd(ACTIVE_BATCHES_KEY, {kept.id: kept.created_at.timestamp()})  # left by an interrupted write
    running, running_items = create_batch(jobs, batches, 2)
    jobs.transition(running_items[0].id, {JobStatus.QUEUED}, JobStatus.CANCELED, {})
    report = sweeper_for(own_settings).sweep(time.time()).batches
    assert sorted(report.forgotten) == sorted([expired.id, kept.id])
    assert running.id not in report.suspected
    assert own_redis.zrange(ACTIVE_BATCHES_KEY, 0, -1) == [running.id.encode()]
    for record in (*expired_items, running_items[1]):
        jobs.forget_active(record.id, record.tenant)
    batches.forget_active([running.id])


def test_canceling_a_batch_sends_one_finishing_task(
    own_settings: Settings, own_redis: redis.Redis, own_worker: ManagedProcess
) -> None:
    """Every canceled item's entry task still runs (and finds its job canceled); none of them sends
    the batch's finishing task again: the cancel of the last item sent the only one (issue 19,
    finding 11: a 10,000-item batch sent 9,387)."""
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    batches = BatchStore(own_redis, own_settings.job_ttl_s)
    batch, items = create_batch(jobs, batches, 25)
    send = TaskPublisher(make_producer(own_settings), own_settings.queue)
    lifecycle = lifecycle_for(own_settings)
    cancel_batch(batch.id, batches, jobs, lambda job_id: cancel_job(job_id, lifecycle, purge=False))
    assert messages_naming(own_redis, batch.id) == 1
    for item in items:
        send.entry(item.id, item.priority)
    log_path = own_worker.log_path
    assert log_path is not None
    wait_until(
        lambda: sum(f"job {item.id} is no longer runnable" in log_path.read_text() for item in items) == len(items),
        60,
        "every canceled item's entry task ran",
    )
    assert messages_naming(own_redis, batch.id) == 1
    own_redis.delete(MAINTENANCE_QUEUE)
    batches.forget_active([batch.id])


def test_a_finished_batch_with_a_bundle_to_make_stays_in_the_index_until_it_is_settled(
    own_settings: Settings, own_redis: redis.Redis
) -> None:
    """The manifest is written but the finishing task was lost before the bundle was made: the
    sweeper sends the task again; once the bundle is settled (failed here: no item has audio), the
    batch leaves the index."""
    jobs = JobStore(own_redis, own_settings.job_ttl_s)
    batches = BatchStore(own_redis, own_settings.job_ttl_s)
    objects = ObjectStore(own_settings.s3)
    batch, [item] = create_batch(jobs, batches, 1)
    batches.update(batch.id, (BatchStatus.RUNNING,), lambda _: {"bundles": {BundleKind.ZIP: BundleState()}})
    jobs.transition(item.id, {JobStatus.QUEUED}, JobStatus.CANCELED, {})
    assert finish_batch(batch.id, batches, jobs, objects, "a1") is not None
    assert own_redis.zscore(ACTIVE_BATCHES_KEY, batch.id) is not None
    sweeper = sweeper_for(own_settings)
    now = time.time() + own_settings.sweep_interval_s
    assert batch.id in sweeper.sweep(now).batches.suspected
    assert sweeper.sweep(now + own_settings.sweep_interval_s).batches.resent == [batch.id]
    assert messages_naming(own_redis, batch.id) == 1
    own_redis.delete(MAINTENANCE_QUEUE)
    settled = make_bundles(batch.id, batches, jobs, objects, "a2")
    assert settled is not None
    assert settled.bundles[BundleKind.ZIP].status is BundleStatus.FAILED
    assert settled.bundles[BundleKind.ZIP].error == JobError(
        code="no_item_succeeded", message="no item of the batch has audio to put in a zip"
    )
    assert own_redis.zscore(ACTIVE_BATCHES_KEY, batch.id) is None
    assert make_bundles(batch.id, batches, jobs, objects, "a3") is None
