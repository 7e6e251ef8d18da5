"""When each pending webhook event is due, kept in Redis by tenant and by receiver.

Every pending delivery (a finished job's or batch's event) is a member ``job:<id>`` or
``batch:<id>`` of its *lane*: a sorted set per tenant and receiver (``host:port``), scored by when
its next attempt is due (Unix seconds). Two indexes let a dispatcher find due work without walking
anybody's backlog: each tenant's lanes scored by their earliest member, and every tenant scored by
its earliest lane. A dispatcher reads the due tenants, then one tenant's due lanes, then claims the
earliest member of one lane; a tenant with thousands of due events takes one entry of that scan, as
a tenant with one event does (``ttsq.webhook_dispatch``).

An event enters its lane in the same transaction as the terminal status that makes it
(``JobStore._write``, ``BatchStore.update``), so no announcement is lost between the two. A claim
moves the member's score to the end of a short lease, which the dispatcher renews every second while
the attempt runs (only while the score is still the lease end it set); the attempt's outcome then
places it at its next attempt or removes it. A dispatcher that dies or freezes mid-attempt leaves
the member at the end of its lease, when the event is due again. Every change goes through one Lua
script that also sets both indexes from what is left (each lane's and each tenant's score is its
earliest member's), and a claim is one script too: two dispatchers never claim the same event.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final, cast

import redis

from ttsq.constants import WEBHOOK_TENANTS_KEY, webhook_lane_key, webhook_receivers_key
from ttsq.errors import WebhookUrlRefused
from ttsq.webhook_guard import check_url

UNPARSABLE_RECEIVER: Final = "-"
"""The lane of a URL that is not one (its attempt fails, naming the problem)."""

_REINDEX: Final = """
local function reindex(tenants, receivers, lane, tenant, receiver)
  local first = redis.call('ZRANGE', lane, 0, 0, 'WITHSCORES')
  if first[1] then redis.call('ZADD', receivers, first[2], receiver) else redis.call('ZREM', receivers, receiver) end
  local top = redis.call('ZRANGE', receivers, 0, 0, 'WITHSCORES')
  if top[1] then redis.call('ZADD', tenants, top[2], tenant) else redis.call('ZREM', tenants, tenant) end
end
"""

PLACE_SCRIPT: Final = (
    _REINDEX
    + """
-- KEYS: tenants, the tenant's receivers, the lane; ARGV: tenant, receiver, member, score ('' removes)
if ARGV[4] == '' then redis.call('ZREM', KEYS[3], ARGV[3]) else redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3]) end
reindex(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return 1
"""
)
"""Put an event at a time in its lane (or take it out), and set both indexes."""

CLAIM_SCRIPT: Final = (
    _REINDEX
    + """
-- KEYS: tenants, the tenant's receivers, the lane; ARGV: tenant, receiver, now, lease end
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[3], 'LIMIT', 0, 1)
if due[1] then redis.call('ZADD', KEYS[3], ARGV[4], due[1]) end
reindex(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return due[1]
"""
)
"""Take the lane's earliest due event, if any, moving it to the end of the lease."""

RENEW_SCRIPT: Final = (
    _REINDEX
    + """
-- KEYS: tenants, the tenant's receivers, the lane; ARGV: tenant, receiver, member, held lease end, new end
local score = redis.call('ZSCORE', KEYS[3], ARGV[3])
if not score or tonumber(score) ~= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
reindex(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return 1
"""
)
"""Move a claimed event's lease end on, if its score is still the end its claim set: an outcome
placed meanwhile (or another dispatcher's claim) is left as it is."""


class EventKind(StrEnum):
    """What an event is about."""

    JOB = "job"
    BATCH = "batch"


@dataclass(frozen=True)
class EventRef:
    """A pending event, by the record that keeps its delivery state."""

    kind: EventKind
    id: str

    @property
    def member(self) -> str:
        return f"{self.kind.value}:{self.id}"

    @classmethod
    def parse(cls, member: str) -> EventRef:
        kind, _, record_id = member.partition(":")
        return cls(EventKind(kind), record_id)

    def __str__(self) -> str:
        return f"{self.kind.value} {self.id}"


@dataclass(frozen=True)
class Lane:
    """One tenant's events for one receiver."""

    tenant: str
    receiver: str


def receiver_of(url: str) -> str:
    """``host:port`` of a webhook URL (``[v6]:port``), the unit of per-receiver limits."""
    try:
        target = check_url(url)
    except WebhookUrlRefused:
        return UNPARSABLE_RECEIVER
    host = target.host.lower()
    return f"[{host}]:{target.port}" if ":" in host else f"{host}:{target.port}"


def lane_of(tenant: str, url: str) -> Lane:
    return Lane(tenant, receiver_of(url))


def _keys(lane: Lane) -> list[str]:
    return [WEBHOOK_TENANTS_KEY, webhook_receivers_key(lane.tenant), webhook_lane_key(lane.tenant, lane.receiver)]


def schedule_in(pipe: redis.client.Pipeline, ref: EventRef, lane: Lane, due: float) -> None:
    """Queue a new event inside the caller's transaction (the write that finishes its record). The
    script goes whole (EVAL), so a Redis that just restarted without it cached still runs it."""
    pipe.eval(PLACE_SCRIPT, 3, *_keys(lane), lane.tenant, lane.receiver, ref.member, repr(due))


class DeliverySchedule:
    """The due events: read the indexes, claim, and place events again after an attempt."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._place = client.register_script(PLACE_SCRIPT)
        self._claim = client.register_script(CLAIM_SCRIPT)
        self._renew = client.register_script(RENEW_SCRIPT)

    def due_tenants(self, now: float, limit: int) -> list[str]:
        """Up to ``limit`` tenants with an event due at ``now``, the longest-waiting first."""
        raw = cast(list[bytes], self._redis.zrangebyscore(WEBHOOK_TENANTS_KEY, "-inf", now, start=0, num=limit))
        return [member.decode() for member in raw]

    def due_receivers(self, tenant: str, now: float, limit: int) -> list[str]:
        """Up to ``limit`` of the tenant's receivers with an event due at ``now``, the longest-waiting first."""
        key = webhook_receivers_key(tenant)
        raw = cast(list[bytes], self._redis.zrangebyscore(key, "-inf", now, start=0, num=limit))
        return [member.decode() for member in raw]

    def claim(self, lane: Lane, now: float, lease_until: float) -> EventRef | None:
        """The lane's earliest event due at ``now``, now leased until ``lease_until``; None if none is
        due (another dispatcher took it)."""
        args = [lane.tenant, lane.receiver, repr(now), repr(lease_until)]
        member = cast(bytes | None, self._claim(keys=_keys(lane), args=args))
        return None if member is None else EventRef.parse(member.decode())

    def renew(self, claims: list[tuple[EventRef, Lane, float]], until: float) -> list[bool]:
        """Move each claim's lease end (``ref``, ``lane``, the end it holds) to ``until``, in one
        round trip; whether each was still held."""
        if not claims:
            return []
        with self._redis.pipeline(transaction=False) as pipe:
            for ref, lane, held in claims:
                args = [lane.tenant, lane.receiver, ref.member, repr(held), repr(until)]
                self._renew(keys=_keys(lane), args=args, client=pipe)
            return [bool(done) for done in pipe.execute()]

    def place(self, ref: EventRef, lane: Lane, due: float) -> None:
        """Make the event due at ``due`` (its next attempt)."""
        self._place(keys=_keys(lane), args=[lane.tenant, lane.receiver, ref.member, repr(due)])

    def remove(self, ref: EventRef, lane: Lane) -> None:
        """The event needs no more attempts (delivered, failed for good, or its record is gone)."""
        self._place(keys=_keys(lane), args=[lane.tenant, lane.receiver, ref.member, ""])

    def due_at(self, ref: EventRef, lane: Lane) -> float | None:
        """When the event is due (or its lease ends); None if it is not scheduled."""
        score = self._redis.zscore(webhook_lane_key(lane.tenant, lane.receiver), ref.member)
        return None if score is None else float(score)
