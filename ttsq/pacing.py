"""Each tenant's share of submissions while other tenants submit too (issue 34: one tenant's flood
of small jobs took the cores another tenant's short job needed).

A submission costs one, plus one per :data:`BYTES_PER_UNIT` of its body, so a long text weighs as
the requests it makes the API read. While no other tenant has submitted for
:data:`CONTENDED_WINDOW_S`, a tenant is never paced: alone, it may use the whole service. Once
another tenant submits too, each tenant's submissions are spaced at its ``submits_per_second``
limit (a generic cell rate algorithm kept in Redis, so every API process shares it), after a burst
of :data:`BURST_S` seconds' worth: a submission over it waits its turn, and one whose turn is more
than :data:`MAX_WAIT_S` away is refused with the time to wait. A flooding client is slowed to its
share by the wait itself, not only told to stop, and costs the API little while it waits.
"""

from __future__ import annotations

import math
from typing import Final

import redis

from ttsq.constants import SUBMITTERS_KEY, pace_key
from ttsq.errors import QuotaExceeded

BYTES_PER_UNIT: Final = 10_000
"""A submission's body weighs one more unit per this many bytes."""
CONTENDED_WINDOW_S: Final = 10.0
"""Another tenant that submitted within this long makes the service contended."""
BURST_S: Final = 5.0
"""Seconds' worth of a tenant's rate it may submit at once before being spaced."""
MAX_WAIT_S: Final = 2.0
"""The longest a submission waits for its turn; further away, it is refused."""
LIMIT: Final = "submits_per_second"

_TURN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
if redis.call('ZCARD', KEYS[1]) < 2 then return '0' end
local interval = tonumber(ARGV[2]) / tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[2]) or '0')
if tat < now then tat = now end
local wait = tat - tonumber(ARGV[4]) - now
if wait < 0 then wait = 0 end
if wait > tonumber(ARGV[6]) then return tostring(-wait) end
local next_tat = tat + interval
redis.call('SET', KEYS[2], tostring(next_tat), 'PX', math.ceil((next_tat - now + 1) * 1000))
return tostring(wait)
"""


def submission_cost(body_bytes: int) -> int:
    """Units one submission of this many body bytes costs."""
    return 1 + max(0, body_bytes) // BYTES_PER_UNIT


class SubmitPacer:
    """Tenants' turns to submit, shared by every API process through Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self._turn = client.register_script(_TURN)

    def turn(self, tenant: str, cost: int, per_second: float | None) -> float:
        """Seconds this submission waits for its turn (0: at once, and always while no other tenant
        submits or without a limit); raises :class:`QuotaExceeded` when its turn is further away
        than :data:`MAX_WAIT_S`. Taking a turn counts the submission."""
        if per_second is None:
            return 0.0
        args: list[str | int | float] = [tenant, cost, per_second, BURST_S, CONTENDED_WINDOW_S, MAX_WAIT_S]
        answer = self._turn(keys=[SUBMITTERS_KEY, pace_key(tenant)], args=args)
        wait = float(answer.decode() if isinstance(answer, bytes) else answer)
        if wait < 0:
            message = (
                f"while other keys submit too, this key's submissions are spaced at {per_second:g} a second "
                f"(one, plus one per {BYTES_PER_UNIT:,} bytes of body) and its turn is {-wait:.1f} s away"
            )
            raise QuotaExceeded(LIMIT, message, max(1, math.ceil(-wait)))
        return wait
