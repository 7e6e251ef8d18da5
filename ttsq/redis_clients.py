"""Every Redis client of the service, made from the settings in one place: from ``redis_url``, or,
with ``redis_sentinel`` set, through Sentinel, so that every process follows the master.

A Sentinel client asks the sentinels where the master is before each new connection and drops its
connections when the answer changes, so after a failover its next call reaches the new master. While
no master is elected a call raises ``redis.sentinel.MasterNotFoundError``, and a call that reaches a
demoted master gets ``READONLY``, which the sentinel-managed connection turns into a dropped
connection: both are ``redis.ConnectionError``, the outage every caller already handles (tasks retry
it, the API answers 503 with ``Retry-After``: ``api/errors.py``).

The Celery broker follows the master through kombu's Sentinel transport instead
(``ttsq.broker.celery_config``).
"""

from __future__ import annotations

from typing import Any, Final

import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as async_sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from ttsq.settings import SentinelSettings, Settings

REFUSALS_OF_A_MASTER_IN_TROUBLE: Final = ("NOREPLICAS", "MASTERDOWN")
"""Error replies that say Redis cannot take the call now, whatever it is: a master short of replicas
(``min-replicas-to-write``) and a replica cut off from its master (``replica-serve-stale-data no``)."""

SENTINEL_QUERY_TIMEOUT_S: Final = 2.0
"""Longest wait for one sentinel's answer (it answers at once from memory); a sentinel that does not
is skipped for the next, so a dead one costs one such wait per new connection, not a hang."""


class SentinelRedis(redis.Redis):
    """A master client that closes its connections to the sentinels with its own."""

    def close(self) -> None:
        super().close()
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            pool.sentinel_manager.close()


class AsyncSentinelRedis(aioredis.Redis):
    """The asyncio master client, closing its connections to the sentinels with its own."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, async_sentinel.SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


def redis_client(
    settings: Settings, socket_timeout_s: float | None, connect_timeout_s: float, **options: Any
) -> redis.Redis:
    """A client of the deployment's Redis (its master, with Sentinel). ``socket_timeout_s`` bounds each
    call, ``connect_timeout_s`` each connection; ``options`` go to every connection as they would to
    ``redis.Redis`` (``health_check_interval``...)."""
    timeouts: dict[str, Any] = {"socket_timeout": socket_timeout_s, "socket_connect_timeout": connect_timeout_s}
    sentinel = settings.redis_sentinel
    if not sentinel.enabled:
        return redis.Redis.from_url(settings.redis_url, **timeouts, **options)
    manager = Sentinel(  # type: ignore[no-untyped-call]
        sentinel.addresses, sentinel_kwargs=sentinel_kwargs(sentinel), **timeouts, **options
    )
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        _master_name(sentinel), redis_class=SentinelRedis, **_master_kwargs(sentinel)
    )
    return client


def async_redis_client(
    settings: Settings, socket_timeout_s: float | None, connect_timeout_s: float, **options: Any
) -> aioredis.Redis:
    """The same for asyncio code (the API's event hub)."""
    timeouts: dict[str, Any] = {"socket_timeout": socket_timeout_s, "socket_connect_timeout": connect_timeout_s}
    sentinel = settings.redis_sentinel
    if not sentinel.enabled:
        return aioredis.Redis.from_url(settings.redis_url, **timeouts, **options)
    manager = async_sentinel.Sentinel(  # type: ignore[no-untyped-call]
        sentinel.addresses, sentinel_kwargs=sentinel_kwargs(sentinel), **timeouts, **options
    )
    client: aioredis.Redis = manager.master_for(
        _master_name(sentinel), redis_class=AsyncSentinelRedis, **_master_kwargs(sentinel)
    )
    return client


def redis_outage(error: redis.RedisError) -> bool:
    """Whether ``error`` means Redis cannot serve for now (an outage, retried) rather than that the call
    was wrong: a lost connection or a timeout (no master elected among them), a demoted master's
    ``READONLY``, or :data:`REFUSALS_OF_A_MASTER_IN_TROUBLE`."""
    if isinstance(error, redis.ConnectionError | redis.TimeoutError | redis.ReadOnlyError):
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith(REFUSALS_OF_A_MASTER_IN_TROUBLE)


def redis_location(settings: Settings) -> str:
    """Where the settings say Redis is, for a person: the URL, or the master's name and its sentinels
    (whose passwords are settings of their own)."""
    sentinel = settings.redis_sentinel
    if sentinel.enabled:
        return f"master {sentinel.master!r} of the sentinels {', '.join(sentinel.hosts)}"
    return settings.redis_url


def _master_name(sentinel: SentinelSettings) -> str:
    assert sentinel.master is not None  # SentinelSettings refuses hosts without a master
    return sentinel.master


def _master_kwargs(sentinel: SentinelSettings) -> dict[str, Any]:
    """How to reach the master once found: its password and database."""
    password = sentinel.password.get_secret_value() if sentinel.password is not None else None
    return {"password": password, "db": sentinel.db}


def sentinel_kwargs(sentinel: SentinelSettings) -> dict[str, Any]:
    """How to ask a sentinel (redis-py's and kombu's ``sentinel_kwargs``): short timeouts and no
    retries (the next sentinel is the retry), and the sentinels' own password where they have one."""
    kwargs: dict[str, Any] = {
        "socket_timeout": SENTINEL_QUERY_TIMEOUT_S,
        "socket_connect_timeout": SENTINEL_QUERY_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
    }
    if sentinel.sentinel_password is not None:
        kwargs["password"] = sentinel.sentinel_password.get_secret_value()
    return kwargs
