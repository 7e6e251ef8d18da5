"""The store's folded round trips on a short answer's path: a step's start counted with its job read,
and a claim renewed with its objects scheduled, each doing what the separate calls did."""

from __future__ import annotations

import redis

from tests.conftest import create_record
from ttsq.constants import OBJECT_EXPIRY_KEY
from ttsq.job_store import JobStore
from ttsq.settings import Settings

LEASE_S = 30


def test_a_starts_count_and_its_jobs_record_and_text_come_in_one_read(store: JobStore) -> None:
    record = create_record(store, "Read with the start.")
    first = store.step_started_reading(record.id, "entry", "first")
    assert (first.runs, first.text) == (1, "Read with the start.")
    assert first.record is not None
    assert first.record.id == record.id
    assert first.record.stored is not None  # a write may run only if the job is still stored so
    assert store.step_started_reading(record.id, "entry", "second").runs == 2  # the first never ended
    store.step_ended(record.id, "entry", "first")
    assert store.step_started(record.id, "entry", "third") == 2


def test_a_start_reads_no_record_for_a_job_that_has_none(store: JobStore) -> None:
    start = store.step_started_reading("no-such-job", "entry", "only")
    assert (start.runs, start.record, start.text) == (1, None, None)


def test_a_held_claim_is_renewed_and_its_objects_scheduled_at_once(
    store: JobStore, redis_client: redis.Redis, settings: Settings
) -> None:
    record = create_record(store)
    claim = store.step_lock(record.id, "entry", LEASE_S)
    assert claim.acquire()
    redis_client.pexpire(claim.name, 1_000)  # most of the lease gone
    keys = [f"tests/{record.id}/a/audio.wav", f"tests/{record.id}/a/marks.json"]
    assert store.schedule_objects_while_held(record, keys, claim)
    assert redis_client.pttl(claim.name) > 20_000
    expected = record.created_at.timestamp() + settings.job_ttl_s
    for key in keys:
        assert redis_client.zscore(OBJECT_EXPIRY_KEY, key) == expected


def test_a_claim_held_by_another_run_renews_and_schedules_nothing(store: JobStore, redis_client: redis.Redis) -> None:
    record = create_record(store)
    mine = store.step_lock(record.id, "entry", LEASE_S)
    assert mine.acquire()
    redis_client.delete(mine.name)  # lapsed, and another run took it
    theirs = store.step_lock(record.id, "entry", LEASE_S)
    assert theirs.acquire()
    redis_client.pexpire(theirs.name, 1_000)
    key = f"tests/{record.id}/late/audio.wav"
    assert not store.schedule_objects_while_held(record, [key], mine)
    assert redis_client.pttl(theirs.name) <= 1_000
    assert redis_client.zscore(OBJECT_EXPIRY_KEY, key) is None
