"""The lease keeper against kombu's own redelivery (real Redis, kombu's restore): a message a live
worker holds is never given back, one nobody renews is."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery
from celery.worker import state as worker_state
from celery.worker.request import Request
from kombu import Connection

from cli.processes import wait_until
from ttsq.broker import make_producer
from ttsq.job_store import JobStore
from ttsq.settings import Settings
from workers.leases import UNACKED_INDEX_KEY, LeaseKeeper


class HeldRequest:
    """A request the keeper reads only the kombu message of (a message nobody received)."""

    def __init__(self, tag: str) -> None:
        self.message = SimpleNamespace(delivery_tag=tag)


def nothing(value: str) -> None:
    """The task the held messages name."""


@pytest.fixture
def producer(settings: Settings) -> Iterator[Celery]:
    app = make_producer(settings.model_copy(update={"visibility_timeout_s": 10, "step_lease_s": 6}))
    app.task(name="ttsq.nothing")(nothing)
    yield app
    app.close()


def hold_one_message(connection: Connection, queue: str, app: Celery) -> Request:
    """Take a message the way a late-acknowledging worker does: Celery's own request for it, as the
    worker's state holds it."""
    channel: Any = connection.default_channel  # kombu's Redis channel (its stub type lacks these)
    message = channel.basic_get(queue, no_ack=False)
    assert message is not None
    return Request(message, app=app, task=app.tasks["ttsq.nothing"])


def age(client: redis.Redis, tag: str, seconds: float) -> None:
    client.zadd(UNACKED_INDEX_KEY, {tag: time.time() - seconds})


def restore(connection: Connection) -> None:
    """One of kombu's scans for expired messages. It does nothing while another consumer holds the
    scan's mutex (the suite's workers scan every second), so a test that needs it to run retries."""
    channel: Any = connection.default_channel
    channel.qos.restore_visible(num=1000, interval=1)


def restored(connection: Connection, client: redis.Redis, queue: str) -> bool:
    restore(connection)
    return client.llen(queue) == 1


HELD_KINDS = {
    "reserved": worker_state.reserved_requests,
    "active": worker_state.active_requests,
    "scheduled": worker_state.scheduled_requests,  # type: ignore[attr-defined]  # a retry waiting for its ETA, longer than the timeout
}


@pytest.mark.parametrize("kind", sorted(HELD_KINDS))
def test_a_held_message_is_renewed_and_an_abandoned_one_comes_back(
    producer: Celery, redis_client: redis.Redis, kind: str
) -> None:
    held: Any = HELD_KINDS[kind]
    queue = f"lease-{uuid.uuid4()}"
    producer.send_task("ttsq.nothing", args=["x"], queue=queue)
    keeper = LeaseKeeper(redis_client, lease_s=6)
    with producer.connection_for_write() as connection:
        request = hold_one_message(connection, queue, producer)
        tag = str(request.message.delivery_tag)
        assert redis_client.llen(queue) == 0
        held.add(request)
        try:
            age(redis_client, tag, 60)  # past the 10 s visibility timeout
            keeper.renew()
            assert time.time() - (redis_client.zscore(UNACKED_INDEX_KEY, tag) or 0) < 5
            restore(connection)
            assert redis_client.llen(queue) == 0  # still this worker's
        finally:
            held.discard(request)
        age(redis_client, tag, 60)
        keeper.renew()  # no longer held by this worker: not renewed
        wait_until(lambda: restored(connection, redis_client, queue), 10, "given back for another worker")
    redis_client.delete(queue)


def test_an_acknowledged_message_is_not_brought_back_by_a_late_renewal(redis_client: redis.Redis) -> None:
    tag = f"gone-{uuid.uuid4()}"
    request = HeldRequest(tag)
    worker_state.reserved_requests.add(request)
    try:
        LeaseKeeper(redis_client, lease_s=6).renew()
    finally:
        worker_state.reserved_requests.discard(request)
    assert redis_client.zscore(UNACKED_INDEX_KEY, tag) is None


def test_the_keeper_renews_every_second() -> None:
    """What a dead worker costs is the lease, not the pace: renewals every second let the default
    lease (5 s) and visibility timeout (8 s) be short."""
    assert LeaseKeeper(redis.Redis(), lease_s=Settings(_env_file=None).step_lease_s).interval_s == 1.0
    assert LeaseKeeper(redis.Redis(), lease_s=2).interval_s < 1.0


def test_step_claims_are_renewed_while_held_and_expire_after(redis_client: redis.Redis) -> None:
    jobs = JobStore(redis_client, 600)
    keeper = LeaseKeeper(redis_client, lease_s=5)
    claim = jobs.step_lock(f"lease-{uuid.uuid4()}", "assemble", ttl_s=5)
    assert claim.acquire()
    with keeper.holding(claim):
        redis_client.pexpire(claim.name, 2500)  # as if its lease were half over
        keeper.renew()
        assert redis_client.pttl(claim.name) > 4000
    redis_client.pexpire(claim.name, 2500)
    keeper.renew()  # released from the keeper: left to expire
    assert redis_client.pttl(claim.name) <= 2500
