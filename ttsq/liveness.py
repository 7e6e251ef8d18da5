"""Which synthesis workers are alive, by heartbeats in Redis: what ``/readyz`` counts.

Each synthesis worker renews its own entry every :data:`~ttsq.constants.HEARTBEAT_INTERVAL_S` from a
thread of its own, with an expiry :data:`~ttsq.constants.HEARTBEAT_TTL_S` ahead. A worker that is
killed, frozen (SIGSTOP, a VM paused) or cut off from Redis stops renewing, and its entry counts for
nothing a few seconds later. A Celery ping is no such proof: any node answers it, the service worker
too, so a pool whose only synthesis worker is frozen still looked ready.

Times are Redis's own (``TIME`` inside the scripts), so hosts with skewed clocks agree on who is
alive.
"""

from __future__ import annotations

from typing import Final

import redis

from ttsq.constants import alive_workers_key

_BEAT: Final = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
return now_ms
"""
"""KEYS: the queue's sorted set of workers. ARGV: worker id, expiry in ms. Scores are expiry times."""

_ALIVE: Final = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')
"""
"""KEYS: the queue's sorted set of workers. Returns the ids whose entry has not expired."""


class WorkerLiveness:
    """The heartbeats of one queue's synthesis workers."""

    def __init__(self, client: redis.Redis, queue: str) -> None:
        self._redis = client
        self._key = alive_workers_key(queue)
        self._beat = client.register_script(_BEAT)
        self._alive = client.register_script(_ALIVE)

    def beat(self, worker: str, ttl_s: float) -> None:
        """``worker`` is alive for ``ttl_s`` more seconds (unless it beats again)."""
        self._beat(keys=[self._key], args=[worker, int(ttl_s * 1000)])

    def alive(self) -> list[str]:
        """The workers whose last heartbeat has not expired."""
        return sorted(raw.decode() for raw in self._alive(keys=[self._key]))

    def leave(self, worker: str) -> None:
        """``worker`` stops on purpose: it counts for nothing from now on."""
        self._redis.zrem(self._key, worker)
