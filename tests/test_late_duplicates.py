"""A late duplicate of a step never deletes or overwrites what the winner committed (issue 19,
finding 1: a worker frozen past its lease resumed, lost the status race and deleted the object the
winner had written).

The steps run here, in the test process, against the real Redis, SeaweedFS and the real model: one
run is held inside synthesis (as a frozen worker would be) while its claim lapses, a second run takes
the step and commits, then the first resumes. ``tests/test_faults.py`` does the same with a real
worker process frozen by SIGSTOP.
"""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import soundfile

from tests.conftest import create_record
from tts_core.base.device import Device
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import (
    ASSEMBLE_STEP,
    ENTRY_STEP,
    OBJECT_EXPIRY_KEY,
    job_claim_key,
    job_objects_prefix,
    result_key,
    segment_step,
    usage_key,
)
from ttsq.job_record import JobStatus, utcnow
from ttsq.job_store import JobStore
from ttsq.parts import PartRef
from ttsq.quotas import usage_day
from ttsq.settings import Settings
from ttsq.storage import ObjectStore
from ttsq.stores import Stores
from workers.job_context import JobContext
from workers.pipeline import _claim_planned, assemble_job, run_segment, start_job
from workers.steps import StepRun, StepSuperseded, new_attempt_id
from workers.voice_host import VoiceHost

LONG_SENTENCE = "A sentence long enough to take the model a moment, spoken once by each of two runs of one step."


class HeldOnce:
    """The real engine, except that the first synthesis call waits until released: a run frozen
    inside synthesis, as a SIGSTOPped worker would be."""

    def __init__(self, engine: VoiceHost) -> None:
        self._engine = engine
        self.entered = threading.Event()
        self.release = threading.Event()
        self._held = False

    def synthesize(self, *args: Any, **kwargs: Any) -> Any:
        if not self._held:
            self._held = True
            self.entered.set()
            assert self.release.wait(60), "the held run was never released"
        return self._engine.synthesize(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def engine(settings: Settings) -> Iterator[VoiceHost]:
    loaded = VoiceHost(settings, Device.CPU)
    yield loaded
    loaded.close()


def context(settings: Settings, engine: Any) -> JobContext:
    """What a worker process builds (``workers.synthesis_process.SynthesisProcess.context``), around
    ``engine``; tasks it sends go to a queue no worker reads."""
    quiet = settings.model_copy(update={"queue": "late-duplicates-unread"})
    return JobContext(Stores.connect(quiet, 30), engine, TaskPublisher(make_producer(quiet), quiet.queue))


def claimed_run(store: JobStore, job_id: str, step: str, settings: Settings) -> StepRun:
    run = StepRun(job_id, step, new_attempt_id(), store.step_lock(job_id, step, settings.step_lease_s))
    assert run.claim.acquire()
    return run


def run_held(target: Any, *args: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target(*args)
        except BaseException as e:  # reported to the test
            errors.append(e)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors


def decoded_duration(objects: ObjectStore, key: str) -> float:
    data = objects.get(key)
    assert data is not None, f"{key} is gone"
    audio, rate = soundfile.read(io.BytesIO(data))
    return float(len(audio) / rate)


@pytest.mark.parametrize("winner_still_holds_the_step", [False, True])
def test_a_late_entry_step_never_touches_the_winners_object(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost, winner_still_holds_the_step: bool
) -> None:
    store = JobStore(redis_client, settings.job_ttl_s)
    record = create_record(store, LONG_SENTENCE)
    held = HeldOnce(engine)
    late = claimed_run(store, record.id, "entry", settings)
    thread, errors = run_held(start_job, record.id, context(settings, held), late)
    assert held.entered.wait(60)
    redis_client.delete(job_claim_key(record.id, "entry"))  # the frozen worker's lease lapsed

    winner = claimed_run(store, record.id, "entry", settings)
    ctx = context(settings, engine)
    start_job(record.id, ctx, winner)
    done = store.get(record.id)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result is not None
    if winner_still_holds_the_step:  # its worker's lease thread would keep renewing it; nothing here does
        assert winner.claim.extend(300, replace_ttl=True)
    else:
        winner.claim.release()

    held.release.set()
    thread.join(60)
    if winner_still_holds_the_step:  # noticed before any side effect: it stops
        assert [type(e) for e in errors] == [StepSuperseded]
    else:  # took the lapsed claim back, stored its own copy, lost the success write, deleted its own
        assert errors == []
    after = store.get(record.id)
    assert after.result == done.result
    assert after.finished_at == done.finished_at
    assert decoded_duration(ctx.stores.objects, done.result.key) == pytest.approx(done.result.duration_s, abs=0.01)
    assert ctx.stores.objects.list_keys(job_objects_prefix(done.tenant, done.id)) == [done.result.key]


def test_the_winner_deletes_what_a_run_that_died_before_committing_stored(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """A worker SIGKILLed between storing a job's object and its success write left that object for
    the job's lifetime beside the winner's (issue 25's soak, seed 92): the run that commits deletes
    what the step's attempts that started and never ended stored under its own names."""
    store = JobStore(redis_client, settings.job_ttl_s)
    record = create_record(store, LONG_SENTENCE)
    ctx = context(settings, engine)
    dead = new_attempt_id()
    store.step_started(record.id, "entry", dead)  # never ended: its worker died
    dead_key = result_key(record.tenant, record.id, dead, "wav")
    store.schedule_objects(record, [dead_key])
    ctx.stores.objects.put(dead_key, b"RIFF", "audio/wav")

    start_job(record.id, ctx, claimed_run(store, record.id, "entry", settings))
    done = store.get(record.id)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result is not None
    assert ctx.stores.objects.list_keys(job_objects_prefix(done.tenant, done.id)) == [done.result.key]
    assert redis_client.zscore(OBJECT_EXPIRY_KEY, dead_key) is None
    assert redis_client.zscore(OBJECT_EXPIRY_KEY, done.result.key) is not None


def test_the_assembly_deletes_what_a_dead_entry_run_stored(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """A streamed job's entry makes the job whole and stores its object; when its worker died in that
    store and the sweeper queued the job's assembly, the assembly committed its own object and the
    dead entry's copy stayed beside it (issue 25's soak, seed 11774874): the committing run deletes
    what dead runs of either object-storing step stored."""
    store = JobStore(redis_client, settings.job_ttl_s)
    record = create_record(store, " ".join([LONG_SENTENCE] * 3))
    ctx = context(settings.model_copy(update={"segment_max_ids": 200}), engine)
    entry = claimed_run(store, record.id, ENTRY_STEP, settings)
    start_job(record.id, ctx, entry)
    entry.claim.release()
    total = store.get(record.id).progress.segments_total
    assert total is not None
    assert total > 1
    dead = new_attempt_id()
    store.step_started(record.id, ENTRY_STEP, dead)  # a run of the entry that never ended
    dead_key = result_key(record.tenant, record.id, dead, "wav")
    store.schedule_objects(record, [dead_key])
    ctx.stores.objects.put(dead_key, b"RIFF", "audio/wav")

    for index in range(total):
        run = claimed_run(store, record.id, segment_step(index), settings)
        run_segment(record.id, index, ctx, run)
        run.claim.release()
    assemble_job(record.id, ctx, claimed_run(store, record.id, ASSEMBLE_STEP, settings))
    done = store.get(record.id)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result is not None
    assert ctx.stores.objects.list_keys(job_objects_prefix(done.tenant, done.id)) == [done.result.key]
    assert redis_client.zscore(OBJECT_EXPIRY_KEY, dead_key) is None


def test_a_late_segment_never_replaces_the_counted_part(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """The late run's part (other noise, other length) is not what the job counts or assembles: the
    first attempt to finish the segment wins it, with its part and its timing."""
    store = JobStore(redis_client, settings.job_ttl_s)
    text = " ".join([LONG_SENTENCE] * 6)
    record = create_record(store, text, options={"marks": ["sentence"]})
    ctx = context(settings.model_copy(update={"segment_max_ids": 200}), engine)
    entry = claimed_run(store, record.id, "entry", settings)
    start_job(record.id, ctx, entry)
    entry.claim.release()
    total = store.get(record.id).progress.segments_total
    assert total is not None
    assert total > 1

    held = HeldOnce(engine)
    late = claimed_run(store, record.id, "segment:0", settings)
    thread, errors = run_held(run_segment, record.id, 0, context(ctx.settings, held), late)
    assert held.entered.wait(60)
    redis_client.delete(job_claim_key(record.id, "segment:0"))
    winner = claimed_run(store, record.id, "segment:0", settings)
    run_segment(record.id, 0, ctx, winner)
    winner.claim.release()
    held.release.set()
    thread.join(60)
    assert errors == []

    assert ctx.stores.segments.winners(record.id)[0] == winner.attempt
    assert ctx.stores.parts.get(PartRef(record.id, 0, winner.attempt))
    with pytest.raises(Exception, match="no stored audio"):
        ctx.stores.parts.get(PartRef(record.id, 0, late.attempt))
    for index in range(1, total):
        run = claimed_run(store, record.id, f"segment:{index}", settings)
        run_segment(record.id, index, ctx, run)
        run.claim.release()
    assembly = claimed_run(store, record.id, "assemble", settings)
    assemble_job(record.id, ctx, assembly)
    done = store.get(record.id)
    assert done.status is JobStatus.SUCCEEDED
    assert done.result is not None
    assert done.progress.audio_s == pytest.approx(done.result.duration_s, abs=0.002), "sums and audio agree"
    assert decoded_duration(ctx.stores.objects, done.result.key) == pytest.approx(done.result.duration_s, abs=0.01)


def test_two_runs_replanning_one_job_charge_its_audio_once(
    settings: Settings, redis_client: redis.Redis, engine: VoiceHost
) -> None:
    """Both runs read the reservation made at submit and replace it with the plan's: only the first
    replacement is charged to the tenant's day, the second gives its difference back."""
    store = JobStore(redis_client, settings.job_ttl_s)
    tenant = f"replan-{uuid.uuid4().hex[:8]}"
    record = create_record(store, LONG_SENTENCE, status="running", tenant=tenant, reserved_audio_ms=1000)
    ctx = context(settings, engine)
    day = usage_day(record.created_at)
    redis_client.hincrby(usage_key(tenant, day), "audio_ms", 1000)  # what admission charged
    plan = engine.plan_segments(record.voice, LONG_SENTENCE, settings.segment_max_ids)
    first = _claim_planned(record, plan, utcnow(), ctx)
    second = _claim_planned(record, plan, utcnow(), ctx)  # read the same record, before the first wrote
    assert first is not None
    assert second is not None
    assert first.reserved_audio_ms == second.reserved_audio_ms != 1000
    assert second.attempts == first.attempts + 1
    assert store.get(record.id).reserved_audio_ms == first.reserved_audio_ms
    assert ctx.stores.quotas.usage(tenant, day)[1] == pytest.approx(first.reserved_audio_ms / 1000)
