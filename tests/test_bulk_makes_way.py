"""A bulk job's steps make way for interactive work between their stages (``Engine.make_way``),
not only before their inference calls: another tenant's bulk jobs took a short interactive job's
run from 0.11 to 0.32 s by encoding and storing beside it (issue 34's noisy neighbour).

The steps run here, in the test process, against the real Redis, SeaweedFS and model, with the
engine's interactive lane told that work is coming, as the interactive slot tells it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from tests.conftest import create_record
from tts_core.batching import MAX_DEFER_S
from tts_core.device import Device
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import ASSEMBLE_STEP, ENTRY_STEP, segment_step
from ttsq.jobs import JobStatus, JobStore, Priority
from ttsq.settings import Settings
from ttsq.stores import Stores
from workers.engine import Engine
from workers.pipeline import JobContext, assemble_job, run_segment, start_job
from workers.steps import StepRun, new_attempt_id

SENTENCE = "A sentence long enough to make a segment of its own, spoken by a bulk job."


@pytest.fixture(scope="module")
def engine(settings: Settings) -> Iterator[Engine]:
    loaded = Engine(settings, Device.CPU)
    yield loaded
    loaded.close()


def step(ctx: JobContext, job_id: str, name: str) -> StepRun:
    run = StepRun(job_id, name, new_attempt_id(), ctx.stores.jobs.step_lock(job_id, name, ctx.settings.step_lease_s))
    assert run.claim.acquire()
    return run


def test_a_bulk_assembly_waits_while_interactive_work_runs(
    settings: Settings, redis_client: redis.Redis, engine: Engine
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
