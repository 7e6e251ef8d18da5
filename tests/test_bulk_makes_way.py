"""A bulk job's steps make way for interactive work between their stages (``VoiceHost.make_way``),
not only before their inference calls: another tenant's bulk jobs took a short interactive job's
run from 0.11 to 0.32 s by encoding and storing beside it (issue 34's noisy neighbour). Its fan-out
also stops sending segment tasks once the job was canceled, which a worker would each take and skip.

The steps run here, in the test process, against the real Redis, SeaweedFS and model, with the
engine's interactive lane told that work is coming, as the interactive slot tells it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

import pytest
import redis

from tests.conftest import create_record
from tts_core.base.device import Device
from tts_core.voices.batching import MAX_DEFER_S, MAX_EXPECT_S
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import ASSEMBLE_STEP, ENTRY_STEP, segment_step
from ttsq.job_record import JobStatus, Priority
from ttsq.job_store import JobStore
from ttsq.lifecycle import Lifecycle, cancel_job
from ttsq.settings import Settings
from ttsq.stores import Stores
from workers.job_context import JobContext
from workers.pipeline import FAN_OUT_CHUNK, FAN_OUT_LOOK_EVERY, assemble_job, run_segment, start_job
from workers.steps import StepRun, new_attempt_id
from workers.voice_host import VoiceHost

SENTENCE = "A sentence long enough to make a segment of its own, spoken by a bulk job."


@pytest.fixture(scope="module")
def engine(settings: Settings) -> Iterator[VoiceHost]:
    loaded = VoiceHost(settings, Device.CPU)
    yield loaded
    loaded.close()


def step(ctx: JobContext, job_id: str, name: str) -> StepRun:
    run = StepRun(job_id, name, new_attempt_id(), ctx.stores.jobs.step_lock(job_id, name, ctx.settings.step_lease_s))
    assert run.claim.acquire()
    return run


def test_a_bulk_assembly_waits_while_interactive_work_runs(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """Its segments made, a bulk job's assembly (no inference in it) does not encode and store while
    the interactive lane has work; it finishes once the lane is idle."""
    small = settings.model_copy(update={"queue": "bulk-makes-way-unread", "segment_max_ids": 200})
    ctx = JobContext(Stores.connect(small, 30), engine, TaskPublisher(make_producer(small), small.queue))
    store = JobStore(redis_client, settings.job_ttl_s)
    record = create_record(store, " ".join([SENTENCE] * 3), priority=Priority.BULK)
    start_job(record.id, ctx, step(ctx, record.id, ENTRY_STEP))
    total = store.get(record.id).progress.segments_total
    assert total is not None
    assert total > 1
    for index in range(total):
        run_segment(record.id, index, ctx, step(ctx, record.id, segment_step(index)))

    release = engine.interactive.expect()
    assembly = threading.Thread(
        target=assemble_job, args=(record.id, ctx, step(ctx, record.id, ASSEMBLE_STEP)), daemon=True
    )
    try:
        assembly.start()
        assembly.join(MAX_DEFER_S / 2)
        assert assembly.is_alive(), "the assembly ran beside interactive work"
        assert store.get(record.id).status is JobStatus.RUNNING
    finally:
        release()
    assembly.join(60)
    assert store.get(record.id).status is JobStatus.SUCCEEDED


class _InteractiveArrivesMidFanOut(TaskPublisher):
    """Sends as the worker does, and interactive work arrives in the engine's lane right after the
    first segment tasks are sent (announced as the slot announces it, for ``MAX_EXPECT_S``)."""

    def __init__(self, settings: Settings, engine: VoiceHost) -> None:
        super().__init__(make_producer(settings), settings.queue)
        self._engine = engine
        self.sent: list[tuple[float, list[int]]] = []

    def segments(self, job_id: str, indexes: Iterable[int], priority: Priority, model: str | None = None) -> None:
        chunk = list(indexes)
        self.sent.append((time.monotonic(), chunk))
        super().segments(job_id, chunk, priority, model)
        if len(self.sent) == 1:
            self._engine.interactive.expect()


def test_a_bulk_fan_out_pauses_while_interactive_work_runs(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """A bulk job's entry sends its segment tasks a few at a time, looking for interactive work in
    between: sending 1,000 at once held the worker's interpreter lock for about a second."""
    small = settings.model_copy(update={"queue": "bulk-fan-out-unread", "segment_max_ids": 60})
    publisher = _InteractiveArrivesMidFanOut(small, engine)
    ctx = JobContext(Stores.connect(small, 30), engine, publisher)
    record = create_record(JobStore(redis_client, settings.job_ttl_s), " ".join([SENTENCE] * 3), priority=Priority.BULK)
    start_job(record.id, ctx, step(ctx, record.id, ENTRY_STEP))
    sent = [index for _, chunk in publisher.sent for index in chunk]
    assert sent == list(range(len(sent)))
    assert len(sent) > FAN_OUT_CHUNK
    assert all(len(chunk) <= FAN_OUT_CHUNK for _, chunk in publisher.sent)
    (first_at, _), (second_at, _) = publisher.sent[:2]
    assert second_at - first_at >= MAX_EXPECT_S * 0.9, "the fan-out went on beside interactive work"
    for queue in redis_client.scan_iter(f"{small.queue}*"):  # the segment tasks nobody reads
        redis_client.delete(queue)


class _CanceledMidFanOut(TaskPublisher):
    """Sends as the worker does, and the job is canceled (as the API cancels it) right after its
    first segment tasks are sent."""

    def __init__(self, settings: Settings, lifecycle: Lifecycle) -> None:
        super().__init__(make_producer(settings), settings.queue)
        self._lifecycle = lifecycle
        self.sent: list[int] = []

    def segments(self, job_id: str, indexes: Iterable[int], priority: Priority, model: str | None = None) -> None:
        chunk = list(indexes)
        super().segments(job_id, chunk, priority, model)
        if not self.sent:
            cancel_job(job_id, self._lifecycle)
        self.sent.extend(chunk)


def test_a_job_canceled_mid_fan_out_gets_no_more_segment_tasks(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """Canceled as its entry sends its segment tasks, a long job stops at the next look at its
    status (every ``FAN_OUT_LOOK_EVERY`` sends): the rest are never sent, for a worker to take and
    skip one by one."""
    small = settings.model_copy(update={"queue": "fan-out-canceled-unread", "segment_max_ids": 60})
    stores = Stores.connect(small, 30)
    publisher = _CanceledMidFanOut(small, stores.lifecycle(lambda _: None))
    ctx = JobContext(stores, engine, publisher)
    text = " ".join([SENTENCE] * 40)
    record = create_record(JobStore(redis_client, settings.job_ttl_s), text, priority=Priority.BULK)
    start_job(record.id, ctx, step(ctx, record.id, ENTRY_STEP))
    total = JobStore(redis_client, settings.job_ttl_s).get(record.id).progress.segments_total
    assert total is not None
    assert total > 2 * FAN_OUT_LOOK_EVERY
    assert publisher.sent == list(range(FAN_OUT_LOOK_EVERY))
    for queue in redis_client.scan_iter(f"{small.queue}*"):  # the segment tasks nobody reads
        redis_client.delete(queue)
