"""The broker transport every ttsq process uses: a channel of a closed connection fails as a lost
connection, which Celery retries, not as an AttributeError, which stopped workers for good after a
Redis restart (issue 19, finding 3; ``ttsq.broker_transport``). ``tests/test_faults.py`` restarts a
real Redis under load."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from kombu import Connection

from ttsq.broker import make_producer
from ttsq.broker_transport import AffinityCycle, Transport, affinity_order, prefer
from ttsq.settings import Settings

USES: dict[str, Callable[[Any], object]] = {
    "acknowledge": lambda channel: channel.qos.ack("a-delivery-tag"),
    "give back": lambda channel: channel.qos.reject("a-delivery-tag", requeue=True),
    "publish": lambda channel: channel._put("a-queue", {"body": "x"}),
    "pool": lambda channel: channel.pool,
}
"""What a worker may still do with a channel while its consumer reconnects."""


def closed_channel(connection: Connection) -> Any:
    channel: Any = connection.channel()
    channel.client.ping()
    connection.close()  # what Celery's consumer does when Redis goes away
    return channel


@pytest.mark.parametrize("use", list(USES))
def test_a_channel_of_a_closed_connection_fails_as_a_lost_connection(settings: Settings, use: str) -> None:
    connection = make_producer(settings).connection_for_write()
    assert isinstance(connection.transport, Transport)
    channel = closed_channel(connection)
    with pytest.raises(redis.ConnectionError, match="was closed"):
        USES[use](channel)
    assert issubclass(redis.ConnectionError, connection.connection_errors)


def test_kombus_own_transport_raises_what_stopped_the_workers(settings: Settings) -> None:
    """The upstream behaviour this transport exists for (if kombu fixes it, this test says so)."""
    channel = closed_channel(Connection(settings.redis_url))
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute"):
        USES["acknowledge"](channel)


FIXED = ["tts.interactive", "tts", "tts.segments"]
A, B, C = "tts.model.a", "tts.model.b", "tts.model.kokoro"
IA, IC = "tts.model.a.interactive", "tts.model.kokoro.interactive"


def test_held_models_queues_come_first_and_each_group_takes_turns() -> None:
    """What the channel sends to BRPOP: each fixed queue followed by the model queues of its class
    (interactive ones after tts.interactive, bulk ones after tts.segments), those of held models
    first; a queue that just gave a message goes last in its group."""
    cycle = AffinityCycle()
    cycle.update([*FIXED, IA, IC, A, B, C])  # as a worker lists them: model queues added last
    try:
        prefer([C, IC])
        assert cycle.consume(8) == ["tts.interactive", IC, IA, "tts", "tts.segments", C, A, B]
        cycle.rotate(A)  # A gave a message: B's turn comes before A's among the models not held
        assert cycle.consume(8)[5:] == [C, B, A]
        prefer([A, C, IA, IC])  # both held: in their turns, C (served longest ago) first
        assert cycle.consume(8)[5:] == [C, A, B]
        cycle.rotate(C)
        assert cycle.consume(8)[5:] == [A, C, B]
        cycle.rotate(IA)
        assert cycle.consume(8)[:3] == ["tts.interactive", IC, IA]
        cycle.rotate("tts")  # a fixed queue keeps its place
        assert [q for q in cycle.consume(8) if q in FIXED] == FIXED
        prefer([])
        cycle.update([*FIXED, C, "tts.model.new"])  # a queue added later takes the last turn
        assert cycle.consume(5) == [*FIXED, C, "tts.model.new"]
    finally:
        prefer([])


def test_a_worker_without_model_queues_or_without_their_home_queue() -> None:
    assert affinity_order(FIXED, [], frozenset({A})) == FIXED
    # An interactive-only worker reading bulk model queues would still read them, after its own.
    assert affinity_order(["tts.interactive", IA, A], [IA, A], frozenset()) == ["tts.interactive", IA, A]


def test_models_only_other_workers_hold_come_last() -> None:
    """Held here first, held by nobody next, held only by another live worker last (its holder
    takes that work; this worker only when it has nothing else)."""
    assert affinity_order([*FIXED, A, B, C], [A, B, C], frozenset({C}), frozenset({A})) == [*FIXED, C, B, A]
    # Held here and elsewhere: here wins.
    assert affinity_order([*FIXED, A, B], [A, B], frozenset({A}), frozenset({A, B})) == [*FIXED, A, B]


def test_a_channel_shares_one_client_until_its_pool_is_replaced(settings: Settings) -> None:
    """kombu built a new redis-py client for every publish and acknowledgement; the channel keeps
    one per connection pool, and a new pool (a reconnect) gets a new one, which works."""
    connection = make_producer(settings).connection_for_write()
    channel: Any = connection.channel()
    try:
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.connection_pool is channel.pool
        channel._put("ttsq-test-shared-client", {"body": "x"})
        channel._pool = None  # what kombu does when it drops a pool
        with channel.conn_or_acquire() as renewed:
            assert renewed is not first
            assert renewed.connection_pool is channel.pool
            assert renewed.llen("ttsq-test-shared-client") == 1
            renewed.delete("ttsq-test-shared-client")
        given = redis.Redis.from_url(settings.redis_url)
        with channel.conn_or_acquire(given) as passed:
            assert passed is given
        given.close()
    finally:
        connection.close()
