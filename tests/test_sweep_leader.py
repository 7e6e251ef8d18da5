"""The service workers' leases against a real Redis. The sweeping lease (``ttsq.leader``): one
candidate leads, another takes over within the lease when the leader stops renewing (frozen, killed)
or gives it up, and a leader that lost its lease cannot act on it: the writes it fences fail in Redis
itself. A webhook event's claim (``ttsq.webhook_schedule``): renewed only while it is the claim the
renewing dispatcher made."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Final

import pytest
import redis

from cli.processes import wait_until
from tests.conftest import create_record, database_url
from ttsq.broker import TaskPublisher, make_producer
from ttsq.job_record import JobStatus
from ttsq.job_store import JobStore
from ttsq.leader import Elector, Fence, LeaseLost
from ttsq.maintenance import Sweeper
from ttsq.settings import Settings
from ttsq.stores import Stores
from ttsq.webhook_schedule import DeliverySchedule, EventKind, EventRef, Lane

DATABASE: Final = 7
"""A database of its own: the sweeper here looks at every active job of its Redis."""

LEASE_S: Final = 1.0
"""Short, so that the tests wait little; production's is ``sweep_lease_s`` (3 s)."""

HELD_LEASE_S: Final = 60.0
"""A lease that outlasts a test's every step, for a term that must not lapse while it runs."""

TAKEOVER_BOUND_S: Final = LEASE_S + 3.0
"""The lease and one renewal round, plus a margin for a loaded machine."""


@pytest.fixture(scope="module")
def own_settings(settings: Settings) -> Settings:
    url = database_url(settings.redis_url, DATABASE)
    return settings.model_copy(update={"redis_url": url, "queue": "leader", "sweep_grace_s": 0})


@pytest.fixture
def client(own_settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(own_settings.redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def key() -> str:
    return f"ttsq:test:lease:{uuid.uuid4().hex}"


def test_one_candidate_leads_and_another_takes_over_once_it_stops_renewing(client: redis.Redis, key: str) -> None:
    first, second = Elector(client, key, LEASE_S, "first"), Elector(client, key, LEASE_S, "second")
    term = first.round()
    assert term is not None
    assert second.round() is None
    assert first.round() == term  # renewed: the same term
    stopped_at = time.monotonic()  # "frozen": no more renewals
    wait_until(lambda: second.round() is not None, 10, "the second candidate leading")
    assert time.monotonic() - stopped_at <= TAKEOVER_BOUND_S
    assert first.round() is None  # it came back and finds the lease taken: it does not lead
    assert first.term() is None


def test_a_frozen_leader_thread_is_replaced_within_the_lease(client: redis.Redis, key: str) -> None:
    """Both candidates renew from their own threads; the leader's thread then blocks (as a frozen
    process's would): the other leads once the lease ends; the frozen one's term has lapsed locally
    too, before anyone else could take it."""
    first, second = Elector(client, key, LEASE_S, "first"), Elector(client, key, LEASE_S, "second")
    first.start()
    wait_until(lambda: first.term() is not None, 10, "the first candidate leading")
    second.start()
    frozen = threading.Event()
    release = threading.Event()
    renew = first.round

    def stuck() -> Fence | None:
        frozen.set()
        release.wait(30)
        return renew()

    first.round = stuck  # type: ignore[method-assign]
    try:
        assert frozen.wait(10)
        frozen_at = time.monotonic()
        wait_until(lambda: second.term() is not None, 10, "the second candidate leading")
        assert time.monotonic() - frozen_at <= TAKEOVER_BOUND_S
        assert first.term() is None
    finally:
        release.set()
        first.stop()
        second.stop()


def test_a_leader_that_stops_gives_the_lease_up_at_once(client: redis.Redis, key: str) -> None:
    first, second = Elector(client, key, 30.0, "first"), Elector(client, key, 30.0, "second")
    first.start()
    wait_until(lambda: first.term() is not None, 10, "the first candidate leading")
    second.start()
    first.stop()
    wait_until(lambda: second.term() is not None, 10, "the second candidate leading, long before the 30 s lease")
    second.stop()
    assert client.get(key) is None


def test_a_leader_that_lost_its_lease_does_not_act(own_settings: Settings, client: redis.Redis, key: str) -> None:
    """A sweeper that looked while it led, froze past its lease, and came back while another leads:
    its fenced write of a re-queue fails (``LeaseLost``), the job's budget is untouched and nothing is
    sent; under the current term the same sweep re-queues the job."""
    stores = Stores.connect(own_settings, 10)
    send = TaskPublisher(make_producer(own_settings), own_settings.queue)
    sweeper = Sweeper(stores, stores.lifecycle(send.finish_batch), send)
    jobs = JobStore(client, own_settings.job_ttl_s)
    record = create_record(jobs)  # no message names it
    # Nothing renews the second term while the sweeps below run, so it lasts longer than they can
    # take on a loaded machine; the first, short, lapses soon.
    first, second = Elector(client, key, LEASE_S, "first"), Elector(client, key, HELD_LEASE_S, "second")
    stale = first.round()
    assert stale is not None
    now = time.time()
    assert record.id in sweeper.sweep(now, fence=stale).suspected
    wait_until(lambda: second.round() is not None, 10, "the second candidate leading")
    current = second.term()
    assert current is not None
    with pytest.raises(LeaseLost):
        sweeper.sweep(now + 2, fence=stale)
    assert jobs.get(record.id).requeues == 0
    assert client.llen(own_settings.queue) == 0
    assert record.id in sweeper.sweep(now + 3, fence=current).suspected  # its own two looks
    assert sweeper.sweep(now + 5, fence=current).requeued == [record.id]
    assert jobs.get(record.id).requeues == 1
    assert client.llen(own_settings.queue) == 1
    with pytest.raises(LeaseLost):  # a write fenced by a term that is gone, whatever it writes
        jobs.update_by(record.id, (JobStatus.QUEUED,), lambda r: {"requeues": 0}, stale)
    assert jobs.get(record.id).requeues == 1
    spent = jobs.update_by(record.id, (JobStatus.QUEUED,), lambda r: {"requeues": own_settings.max_requeues}, current)
    assert spent is not None  # its budget spent: the next vanishing fails it, but not from a lost term
    client.delete(own_settings.queue)  # its work vanished once more
    assert record.id in sweeper.sweep(now + 7, fence=stale).suspected
    with pytest.raises(LeaseLost):
        sweeper.sweep(now + 9, fence=stale)
    assert jobs.get(record.id).status is JobStatus.QUEUED
    assert record.id in sweeper.sweep(now + 11, fence=current).suspected
    assert sweeper.sweep(now + 13, fence=current).failed == [record.id]
    stores.close()


def test_a_webhook_claim_is_renewed_only_while_it_is_the_claim_made(client: redis.Redis) -> None:
    """A dispatcher renews the claims of its attempts every second; a claim that another dispatcher
    took over (after it lapsed), or that an outcome replaced (the next attempt's time), or an event
    removed, is left as it is."""
    schedule = DeliverySchedule(client)
    lane = Lane("tenant-a", "receiver.example:443")
    ref = EventRef(EventKind.JOB, str(uuid.uuid4()))
    now = time.time()
    schedule.place(ref, lane, now - 1)
    assert schedule.claim(lane, now, now + 5) == ref
    assert schedule.renew([(ref, lane, now + 5)], now + 9) == [True]
    assert schedule.due_at(ref, lane) == pytest.approx(now + 9)
    assert schedule.due_tenants(now + 6, 10) == []  # the indexes follow the renewed lease
    assert schedule.due_tenants(now + 10, 10) == ["tenant-a"]
    assert schedule.renew([(ref, lane, now + 5)], now + 20) == [False]  # not the claim it holds now
    schedule.place(ref, lane, now + 1)  # the outcome: the next attempt
    assert schedule.renew([(ref, lane, now + 9)], now + 30) == [False]
    assert schedule.due_at(ref, lane) == pytest.approx(now + 1)
    schedule.remove(ref, lane)
    assert schedule.renew([(ref, lane, now + 1)], now + 30) == [False]
    assert schedule.due_at(ref, lane) is None
    assert schedule.due_tenants(now + 60, 10) == []
