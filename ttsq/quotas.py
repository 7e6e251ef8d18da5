"""Per-tenant limits, checked and charged atomically in Redis.

At submit, one Lua script checks a tenant's active jobs, characters today and audio seconds today
(estimated from the text, :mod:`ttsq.estimate`) against its limits and, only if all fit, admits the
job: it joins the tenant's active set and its characters and estimated audio are charged to the day.
When the worker has planned the job, the estimate is replaced by the plan's (:func:`replan`), which
may refuse a job over the remaining quota before any synthesis. When the job finishes, the
:class:`~ttsq.job_store.JobStore` settles it in the same transaction as its terminal status: it leaves
the active set and the day is charged the audio actually delivered (none for a failed or canceled
job) instead of the reservation. Requests per second are counted in one-second windows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, cast

import redis

from ttsq.constants import rate_key, tenant_active_key, usage_key
from ttsq.errors import QuotaExceeded
from ttsq.tenants import Limits

USAGE_TTL_S: Final = 3 * 24 * 3600
"""A day's usage is kept a little longer than the day, for jobs settled after midnight."""

UNLIMITED: Final = -1

_ADMIT = """
local jobs = #ARGV - 7
local max_active = tonumber(ARGV[4])
if max_active >= 0 and redis.call('ZCARD', KEYS[1]) + jobs > max_active then return 'max_active_jobs' end
local chars_limit = tonumber(ARGV[5])
local chars = tonumber(redis.call('HGET', KEYS[2], 'chars') or '0')
if chars_limit >= 0 and chars + tonumber(ARGV[2]) > chars_limit then return 'chars_per_day' end
local audio_limit = tonumber(ARGV[6])
local audio = tonumber(redis.call('HGET', KEYS[2], 'audio_ms') or '0')
if audio_limit >= 0 and audio + tonumber(ARGV[3]) > audio_limit then return 'audio_seconds_per_day' end
for i = 8, #ARGV do redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i]) end
redis.call('HINCRBY', KEYS[2], 'chars', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'audio_ms', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[7])
return 'ok'
"""

_REPLAN = """
local delta = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local audio = tonumber(redis.call('HGET', KEYS[1], 'audio_ms') or '0')
if delta > 0 and limit >= 0 and audio + delta > limit then return 0 end
redis.call('HINCRBY', KEYS[1], 'audio_ms', delta)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""

_COUNT_REQUEST = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], 2) end
return count
"""


@dataclass(frozen=True)
class Charge:
    """What one job asks of its tenant's day."""

    characters: int
    audio_ms: int


def usage_day(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def seconds_to_midnight(now: datetime) -> int:
    tomorrow = (now.astimezone(UTC) + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(1, math.ceil((tomorrow - now).total_seconds()))


def _limit(value: float | None, scale: float = 1) -> int:
    return UNLIMITED if value is None else round(value * scale)


ACTIVE_RETRY_AFTER_S: Final = 5
"""What a client over its active-jobs limit is told to wait: a short job takes about this long."""


class Quotas:
    """Admission, re-planning and request counting of tenants."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._admit = client.register_script(_ADMIT)
        self._replan = client.register_script(_REPLAN)
        self._count = client.register_script(_COUNT_REQUEST)

    def admit(self, tenant: str, job_id: str, charge: Charge, limits: Limits, now: datetime) -> None:
        """Admit the job and charge its day, or raise :class:`QuotaExceeded` naming the limit."""
        self.admit_many(tenant, [job_id], charge, limits, now)

    def admit_many(self, tenant: str, job_ids: list[str], charge: Charge, limits: Limits, now: datetime) -> None:
        """Admit every job at once (a batch), ``charge`` being their sum, or none of them: each job
        counts against the active-jobs limit, and their characters and audio against the day's."""
        keys = [tenant_active_key(tenant), usage_key(tenant, usage_day(now))]
        args: list[str | int | float] = [
            now.timestamp(),
            charge.characters,
            charge.audio_ms,
            _limit(limits.max_active_jobs),
            _limit(limits.chars_per_day),
            _limit(limits.audio_seconds_per_day, 1000),
            USAGE_TTL_S,
            *job_ids,
        ]
        outcome = self._admit(keys=keys, args=args)
        refused = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
        if refused == "ok":
            return
        what = "this job's" if len(job_ids) == 1 else f"this batch's {len(job_ids)} jobs'"
        if refused == "max_active_jobs":
            message = f"this key already has {limits.max_active_jobs} jobs queued or running (max_active_jobs)"
            if len(job_ids) > 1:
                message = (
                    f"this batch's {len(job_ids)} jobs would pass the key's {limits.max_active_jobs} jobs queued "
                    "or running (max_active_jobs; a batch counts as its items)"
                )
            raise QuotaExceeded(refused, message, ACTIVE_RETRY_AFTER_S)
        if refused == "chars_per_day":
            message = f"{what} {charge.characters} characters would pass the key's {limits.chars_per_day} per day"
        else:
            message = (
                f"{what} estimated {charge.audio_ms / 1000:.0f} s of audio would pass the key's "
                f"{limits.audio_seconds_per_day:g} s per day"
            )
        raise QuotaExceeded(refused, message, seconds_to_midnight(now))

    def release(self, tenant: str, job_id: str, charge: Charge, day: str) -> None:
        """Undo an admission whose job was never queued (the queue refused it)."""
        self.release_many(tenant, [job_id], charge, day)

    def release_many(self, tenant: str, job_ids: list[str], charge: Charge, day: str) -> None:
        """Undo the admission of jobs never queued; ``charge`` is their sum."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(tenant_active_key(tenant), *job_ids)
            pipe.hincrby(usage_key(tenant, day), "chars", -charge.characters)
            pipe.hincrby(usage_key(tenant, day), "audio_ms", -charge.audio_ms)
            pipe.execute()

    def replan(self, tenant: str, day: str, delta_ms: int, limits: Limits) -> bool:
        """Change a job's audio reservation by ``delta_ms``; False (nothing changed) if a larger one
        would pass the day's limit."""
        limit = _limit(limits.audio_seconds_per_day, 1000)
        return bool(self._replan(keys=[usage_key(tenant, day)], args=[delta_ms, limit, USAGE_TTL_S]))

    def usage(self, tenant: str, day: str) -> tuple[int, float]:
        """Characters and audio seconds charged to ``tenant`` on ``day``."""
        raw = cast(dict[bytes, bytes], self._redis.hgetall(usage_key(tenant, day)))
        values = {k.decode(): int(v) for k, v in raw.items()}
        return values.get("chars", 0), values.get("audio_ms", 0) / 1000

    def count_request(self, tenant: str, limits: Limits) -> None:
        """Count one request; raise :class:`QuotaExceeded` past the requests-per-second limit."""
        if limits.requests_per_second is None:
            return
        now = time.time()
        count = int(self._count(keys=[rate_key(tenant, int(now))]))
        if count > limits.requests_per_second:
            message = f"more than {limits.requests_per_second:g} requests per second with this key"
            raise QuotaExceeded("requests_per_second", message, 1)
