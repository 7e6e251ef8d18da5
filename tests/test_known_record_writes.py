"""A record write based on the record as the writer last read or wrote it (``JobStore.transition_by``'s
``known``): one script while the job is stored exactly so, the usual watched read and write once
anything changed it, and the same outcome either way; against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.conftest import create_record
from ttsq.constants import (
    ACTIVE_JOBS_KEY,
    FINISHED_STATS_KEY,
    batch_counts_key,
    job_events_channel,
    webhook_lane_key,
)
from ttsq.events import EventKind, JobEvent
from ttsq.job_record import JobRecord, JobStatus, finish_changes
from ttsq.job_store import JobStore
from ttsq.settings import Settings
from ttsq.webhook_schedule import lane_of

QUEUED, RUNNING, SUCCEEDED = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED


@pytest.fixture
def store(settings: Settings, redis_client: redis.Redis) -> JobStore:
    return JobStore(redis_client, settings.job_ttl_s)


def counted_attempt(current: JobRecord) -> dict[str, Any]:
    return {"attempts": current.attempts + 1}


def succeeded(current: JobRecord) -> dict[str, Any]:
    return finish_changes(current, SUCCEEDED)


def watches(client: redis.Redis) -> int:
    """How many WATCH commands the Redis ran: a watched read and write runs one."""
    return int(client.info("commandstats").get("cmdstat_watch", {}).get("calls", 0))


def events_of(pubsub: redis.client.PubSub) -> list[bytes]:
    found = []
    while (message := pubsub.get_message(timeout=0.5)) is not None:
        if message["type"] == "message":
            found.append(message["data"])
    return found


def test_a_write_from_the_stored_record_is_made_with_its_event_and_the_counts_of_its_end(
    store: JobStore, redis_client: redis.Redis
) -> None:
    record = create_record(store)
    finished_before = int(redis_client.hget(FINISHED_STATS_KEY, "succeeded|") or 0)
    with redis_client.pubsub() as pubsub:  # type: ignore[no-untyped-call]  # untyped in redis-py
        pubsub.subscribe(job_events_channel(record.id))
        known = store.get(record.id)
        watched_before = watches(redis_client)
        running = store.transition_by(record.id, {QUEUED}, RUNNING, counted_attempt, known=known)
        assert running is not None
        assert (running.status, running.attempts) == (RUNNING, 1)
        assert running.stored == redis_client.get(f"ttsq:job:{record.id}")  # what it wrote: the next write's base
        done = store.transition_by(record.id, {RUNNING}, SUCCEEDED, succeeded, known=running)
        events = events_of(pubsub)
        assert watches(redis_client) == watched_before  # both writes were one script each
    assert done is not None
    assert store.get(record.id).model_dump() == done.model_dump()
    assert store.get(record.id).attempts == 1
    assert events[0] == b'{"kind":"status","status":"running"}'  # no record: the job changes on
    ended = JobEvent.model_validate_json(events[1])  # the terminal one carries the record as written
    assert (len(events), ended.kind, ended.status) == (2, EventKind.STATUS, "succeeded")
    assert ended.record is not None
    assert ended.record.encode() == redis_client.get(f"ttsq:job:{record.id}")
    assert redis_client.zscore(ACTIVE_JOBS_KEY, record.id) is None  # it left the active set
    assert int(redis_client.hget(FINISHED_STATS_KEY, "succeeded|") or 0) == finished_before + 1
    assert redis_client.ttl(f"ttsq:job:{record.id}") > 0  # the record keeps its expiry


def test_a_write_from_a_record_changed_since_is_computed_from_the_current_one(
    store: JobStore, redis_client: redis.Redis
) -> None:
    record = create_record(store)
    stale = store.get(record.id)
    store.update_by(record.id, {QUEUED}, counted_attempt)  # another writer, meanwhile
    seen: list[int] = []

    def counted(current: JobRecord) -> dict[str, Any]:
        seen.append(current.attempts)
        return counted_attempt(current)

    watched_before = watches(redis_client)
    running = store.transition_by(record.id, {QUEUED}, RUNNING, counted, known=stale)
    assert running is not None
    assert watches(redis_client) == watched_before + 1  # the script wrote nothing; the watched write did
    assert seen == [0, 1]  # tried from the stale record, not written; then from the current one
    assert store.get(record.id).attempts == 2


def test_a_stale_record_of_a_job_that_ended_meanwhile_writes_nothing(
    store: JobStore, redis_client: redis.Redis
) -> None:
    record = create_record(store)
    stale = store.get(record.id)
    assert store.transition(record.id, {QUEUED}, JobStatus.CANCELED, {}) is not None
    assert store.transition_by(record.id, {QUEUED}, RUNNING, counted_attempt, known=stale) is None
    assert store.get(record.id).status is JobStatus.CANCELED


def test_the_last_item_of_a_batch_written_from_its_known_record_completes_the_batch(
    store: JobStore, redis_client: redis.Redis
) -> None:
    record = create_record(store, batch_id="batch-known-writes", status=RUNNING)
    redis_client.hset(batch_counts_key("batch-known-writes"), "total", 1)
    done = store.transition_by(record.id, {RUNNING}, SUCCEEDED, succeeded, known=store.get(record.id))
    assert done is not None
    assert done.completes_batch
    assert redis_client.hget(batch_counts_key("batch-known-writes"), "succeeded") == b"1"


def test_a_job_with_a_webhook_is_finished_with_its_delivery_queued(store: JobStore, redis_client: redis.Redis) -> None:
    """Its terminal write queues the delivery by a script of its own, which no script can call: it
    goes the usual way, with the same outcome."""
    url = "https://hooks.example.com/ttsq"
    record = create_record(store, status=RUNNING, webhook_url=url)
    lane = lane_of(record.tenant, url)
    with redis_client.pubsub() as pubsub:  # type: ignore[no-untyped-call]  # untyped in redis-py
        pubsub.subscribe(job_events_channel(record.id))
        done = store.transition_by(record.id, {RUNNING}, SUCCEEDED, succeeded, known=store.get(record.id))
        queued = redis_client.zcard(webhook_lane_key(lane.tenant, lane.receiver))  # before a sender can take it
        events = [JobEvent.model_validate_json(raw) for raw in events_of(pubsub)]
    assert done is not None
    assert done.webhook is not None
    assert queued == 1
    assert store.get(record.id).status is SUCCEEDED
    assert events  # its own event carries what it wrote (a webhook's delivery may write again after it)
    assert events[0].record is not None
    assert events[0].record.encode() == done.stored
