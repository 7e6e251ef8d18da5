"""kombu's Redis transport with one fix: a channel of a closed connection fails as a lost connection.

When Redis goes away, Celery's consumer closes its broker connection, which detaches the transport
from it (``transport.client = None``) and may leave a channel half closed (closing one needs Redis,
which is gone). Any later use of such a channel (an acknowledgement, a cancel, a publish while the
consumer restarts) makes kombu build a new connection pool from ``transport.client.hostname`` and
raises ``AttributeError: 'NoneType' object has no attribute 'hostname'``. Celery treats that as an
unrecoverable error and the worker exits for good: after a Redis restart of a few seconds, every
worker and the service worker were gone (issue 19, finding 3). Raised as ``redis.ConnectionError``
instead, it is what it is, a lost connection, and Celery reconnects as it does for any other.

It also orders the model queues (voice affinity, ``ttsq.constants.model_queue``) each time it asks
Redis for work: each right after the fixed queue of its class (interactive ones after
``<queue>.interactive``, bulk ones after ``<queue>.segments``); the queues of the models this process
holds (:func:`prefer`) first, those of models only other live workers hold (:func:`held_elsewhere`)
last, each group in turns (the queue that just gave a message goes last in its group). Redis
``BRPOP`` answers from the first non-empty list, so a worker takes its own models' work first,
another worker's only when it has nothing else, and interactive work of any model before bulk.

``ttsq.broker.celery_config`` names it (:data:`ALIAS`) as the broker transport of every ttsq process;
the URLs stay ``redis://`` ones. With Redis run by Sentinel it names :class:`SentinelTransport`
instead, kombu's Sentinel transport with the same channel behaviour, under kombu's own ``sentinel``
alias (:func:`register_sentinel` says why).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Final

import kombu.transport
import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

from ttsq.constants import is_model_queue, model_queue_home

ALIAS: Final = "ttsq-redis"
"""The name ``broker_transport`` gives this transport (what kombu shows in its logs' URLs)."""


def register() -> str:
    """Make :data:`ALIAS` name :class:`Transport` for kombu in this process; returns the alias."""
    TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")
    return ALIAS


SENTINEL_ALIAS: Final = "sentinel"
"""kombu's alias and URL scheme of its Sentinel transport, which :func:`register_sentinel` takes over."""


def register_sentinel() -> str:
    """Make kombu's ``sentinel`` alias name :class:`SentinelTransport` in this process; returns it.

    Not an alias of its own, as :func:`register` has: a Sentinel broker URL lists every sentinel
    (``sentinel://a:26379;sentinel://b:26379``), and when a connection fails kombu moves on to the
    next one and takes the transport from that URL's scheme (``Connection.switch``). Under an alias
    of ttsq's the first failover would bring back kombu's own transport, without the fix and the
    queue order above; with the scheme itself naming this transport, every switch keeps it.
    """
    TRANSPORT_ALIASES[SENTINEL_ALIAS] = f"{__name__}:SentinelTransport"
    # Resolved earlier in this process (kombu caches it): resolve it again. Not in kombu's stubs.
    kombu.transport._transport_cache.pop(SENTINEL_ALIAS, None)  # type: ignore[attr-defined]
    return SENTINEL_ALIAS


_preferred: frozenset[str] = frozenset()
_elsewhere: frozenset[str] = frozenset()


def prefer(queues: Iterable[str]) -> None:
    """The model queues this process's consumers ask for before the other model queues (those of the
    models it holds); replaces the previous set."""
    global _preferred
    _preferred = frozenset(queues)


def held_elsewhere(queues: Iterable[str]) -> None:
    """The model queues of models other live workers hold (and this process does not): asked for
    last, so their holders take that work and this process only when it has nothing else to do."""
    global _elsewhere
    _elsewhere = frozenset(queues)


class AffinityCycle:
    """kombu's queue cycle (``consume``, ``rotate``, ``update``) with the model queues ordered as the
    module says; the fixed queues keep their listed order."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._turns: list[str] = []
        """Model queues, the one served longest ago first."""

    def update(self, queues: Iterable[str]) -> None:
        self.items[:] = queues
        present = set(self.items)
        kept = [q for q in self._turns if q in present]
        self._turns = kept + [q for q in self.items if is_model_queue(q) and q not in kept]

    def consume(self, n: int) -> list[str]:
        return affinity_order(self.items[:n], self._turns, _preferred, _elsewhere)

    def rotate(self, last_used: str) -> None:
        if last_used in self._turns:
            self._turns.remove(last_used)
            self._turns.append(last_used)

    def close(self) -> None:
        pass


def affinity_order(
    queues: list[str], turns: list[str], preferred: frozenset[str], elsewhere: frozenset[str] = frozenset()
) -> list[str]:
    """The fixed queues of ``queues`` in their order, each followed by the model queues read after it
    (``model_queue_home``): in ``turns`` order, those in ``preferred`` first, those in ``elsewhere``
    (and not in ``preferred``) last."""
    listed = set(queues)

    def rank(name: str) -> int:
        return 0 if name in preferred else 2 if name in elsewhere else 1

    groups: dict[str, list[str]] = {}
    for name in sorted((q for q in turns if q in listed), key=rank):  # stable: turns within a rank
        groups.setdefault(model_queue_home(name), []).append(name)
    ordered: list[str] = []
    for name in queues:
        if not is_model_queue(name):
            ordered += [name, *groups.pop(name, [])]
    return ordered + [name for rest in groups.values() for name in rest]


class Channel(kombu_redis.Channel):
    """kombu's Redis channel, refusing to connect on behalf of a connection that was closed, and
    asking for model queues in :class:`AffinityCycle`'s order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._shared_client: tuple[redis.ConnectionPool, redis.Redis] | None = None
        super().__init__(*args, **kwargs)
        self._queue_cycle = AffinityCycle()  # before any consume: kombu fills it as queues are added

    @contextlib.contextmanager
    def conn_or_acquire(self, client: redis.Redis | None = None) -> Iterator[redis.Redis]:
        """The client to use, as kombu's, except that one client over the channel's connection pool
        serves every call instead of a new one each time: kombu built a client for every publish,
        acknowledgement and event (0.2 ms each, most of it copying redis-py's table of reply parsers;
        issue 38). A redis-py client is safe to share: each command takes a connection of the pool."""
        yield client if client else self._pooled_client()

    def _pooled_client(self) -> redis.Redis:
        pool = self.pool  # a new pool (after a reconnect) gets a new client
        shared = self._shared_client
        if shared is None or shared[0] is not pool:
            shared = (pool, self._create_client())  # type: ignore[attr-defined]
            self._shared_client = shared
        return shared[1]

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport is None or transport.client is None:
            raise redis.ConnectionError("the broker connection of this channel was closed; reconnect")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """:class:`Channel`'s behaviour over kombu's Sentinel channel, which asks the sentinels for the
    master before each new connection (so, after a failover, reaches the new one)."""


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Redis Sentinel transport with :class:`SentinelChannel`."""

    Channel = SentinelChannel
