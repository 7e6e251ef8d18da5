"""Per-tenant limits, checked and charged atomically in Redis.

At submit, one Lua script checks a tenant's active jobs, characters today and audio seconds today
(estimated from the text, :mod:`ttsq.estimate`) against its limits and, only if all fit, admits the
job: it joins the tenant's active set and its characters and estimated audio are charged to the day.
When the worker has planned the job, the estimate is replaced by the plan's (:func:`replan`), which
may refuse a job over the remaining quota before any synthesis. When the job finishes, the
:class:`~ttsq.job_store.JobStore` settles it in the same transaction as its terminal status
(:func:`settle_in`): it leaves the active set and the day is charged the audio actually delivered
(none for a failed or canceled job) instead of the reservation. Requests per second are counted in
one-second windows.

The same moves keep the usage history (``GET /v1/usage``, ``ttsq usage``), so what a report says of
today is what admission checks. A job counts on the UTC day it was created, whenever it settles. A
tenant's day is one hash (``ttsq.constants.usage_key``), kept :data:`USAGE_HISTORY_DAYS` days::

    chars, audio_ms         what the limits count: characters admitted, audio charged (reserved or delivered)
    jobs                    jobs admitted (failed and canceled ones too; a queue that refused one gives it back)
    reserved_ms             the part of audio_ms still reserved by jobs not finished yet
    chars:<voice>, audio_ms:<voice>, jobs:<voice>    the same, for each voice
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, cast

import redis

from ttsq.constants import rate_key, tenant_active_key, usage_key
from ttsq.errors import QuotaExceeded
from ttsq.tenants import Limits

USAGE_HISTORY_DAYS: Final = 90
"""Days of usage a report may cover (``GET /v1/usage?days=``, ``ttsq usage --days``)."""

USAGE_TTL_S: Final = (USAGE_HISTORY_DAYS + 2) * 24 * 3600
"""A day's usage outlives the longest report by two days: each write renews it, and a job created
late on a day may settle after midnight."""

CHARS: Final = "chars"
AUDIO_MS: Final = "audio_ms"
JOBS: Final = "jobs"
RESERVED_MS: Final = "reserved_ms"
"""Fields of a day's usage hash (the module docstring draws it); each per-voice field is one of the
first three, a colon and the voice id."""

UNLIMITED: Final = -1

_ADMIT = """
local fields_end = 8 + 2 * tonumber(ARGV[8])
local jobs = #ARGV - fields_end
local max_active = tonumber(ARGV[4])
if max_active >= 0 and redis.call('ZCARD', KEYS[1]) + jobs > max_active then return 'max_active_jobs' end
local chars_limit = tonumber(ARGV[5])
local chars = tonumber(redis.call('HGET', KEYS[2], 'chars') or '0')
if chars_limit >= 0 and chars + tonumber(ARGV[2]) > chars_limit then return 'chars_per_day' end
local audio_limit = tonumber(ARGV[6])
local audio = tonumber(redis.call('HGET', KEYS[2], 'audio_ms') or '0')
if audio_limit >= 0 and audio + tonumber(ARGV[3]) > audio_limit then return 'audio_seconds_per_day' end
for i = fields_end + 1, #ARGV do redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i]) end
for i = 9, fields_end, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[2], ARGV[7])
return 'ok'
"""
"""Checks the limits with the totals (ARGV 2 and 3), then adds every field of the admission (ARGV 9
on: field and increment pairs, totals among them) and lists the jobs (the ARGV after them)."""

_REPLAN = """
local delta = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local audio = tonumber(redis.call('HGET', KEYS[1], 'audio_ms') or '0')
if delta > 0 and limit >= 0 and audio + delta > limit then return 0 end
for i = 4, #ARGV do redis.call('HINCRBY', KEYS[1], ARGV[i], delta) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
"""Moves every field named from ARGV 4 on (the day's audio, its reservations, the voice's audio) by
the delta, unless a larger reservation would pass the limit."""

_COUNT_REQUEST = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], 2) end
return count
"""


@dataclass(frozen=True)
class Charge:
    """What one job asks of its tenant's day."""

    voice: str
    characters: int
    audio_ms: int


@dataclass(frozen=True)
class Usage:
    """Characters, audio and jobs charged to a day, or to one voice on that day."""

    characters: int = 0
    audio_ms: int = 0
    jobs: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.characters + other.characters, self.audio_ms + other.audio_ms, self.jobs + other.jobs)


@dataclass(frozen=True)
class DayUsage:
    """One day of a tenant's usage, as its hash holds it."""

    total: Usage
    reserved_ms: int
    """The part of ``total.audio_ms`` still reserved by jobs not finished yet."""
    voices: dict[str, Usage]


def _voice_field(name: str, voice: str) -> str:
    return f"{name}:{voice}"


def _admission_fields(charges: Iterable[Charge]) -> dict[str, int]:
    """What admitting these jobs adds to their day: the totals, the reservation and each voice's."""
    fields: Counter[str] = Counter()
    for charge in charges:
        for name, value in ((CHARS, charge.characters), (AUDIO_MS, charge.audio_ms), (JOBS, 1)):
            fields[name] += value
            fields[_voice_field(name, charge.voice)] += value
        fields[RESERVED_MS] += charge.audio_ms
    return dict(fields)


def _audio_fields(voice: str) -> list[str]:
    """The fields a change of a job's reserved audio moves."""
    return [AUDIO_MS, RESERVED_MS, _voice_field(AUDIO_MS, voice)]


def _day_usage(raw: Mapping[bytes, bytes]) -> DayUsage:
    """A day's hash read back. A field below zero reads as zero: a job admitted before the history was
    kept (no reservation of its voice) that settled after could take its voice there."""
    totals: dict[str, int] = {}
    voices: dict[str, dict[str, int]] = {}
    for key, value in raw.items():
        name, _, voice = key.decode().partition(":")
        (voices.setdefault(voice, {}) if voice else totals)[name] = max(0, int(value))

    def usage(fields: Mapping[str, int]) -> Usage:
        return Usage(fields.get(CHARS, 0), fields.get(AUDIO_MS, 0), fields.get(JOBS, 0))

    return DayUsage(usage(totals), totals.get(RESERVED_MS, 0), {v: usage(f) for v, f in sorted(voices.items())})


def settle_in(
    pipe: redis.client.Pipeline, tenant: str, day: str, voice: str, reserved_ms: int, delivered_ms: int
) -> None:
    """Charge a finished job's day (and voice) the audio it delivered instead of its reservation, in
    the caller's transaction (the job's terminal status)."""
    key = usage_key(tenant, day)
    if delivered_ms != reserved_ms:
        pipe.hincrby(key, AUDIO_MS, delivered_ms - reserved_ms)
        pipe.hincrby(key, _voice_field(AUDIO_MS, voice), delivered_ms - reserved_ms)
    if reserved_ms:
        pipe.hincrby(key, RESERVED_MS, -reserved_ms)
    if delivered_ms or reserved_ms:
        pipe.expire(key, USAGE_TTL_S)


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
        self.admit_many(tenant, {job_id: charge}, limits, now)

    def admit_many(self, tenant: str, charges: Mapping[str, Charge], limits: Limits, now: datetime) -> None:
        """Admit every job at once (a batch: job id → its charge, voices mixed or not), or none of
        them: each job counts against the active-jobs limit, and their characters and audio together
        against the day's."""
        fields = _admission_fields(charges.values())
        keys = [tenant_active_key(tenant), usage_key(tenant, usage_day(now))]
        args: list[str | int | float] = [
            now.timestamp(),
            fields[CHARS],
            fields[AUDIO_MS],
            _limit(limits.max_active_jobs),
            _limit(limits.chars_per_day),
            _limit(limits.audio_seconds_per_day, 1000),
            USAGE_TTL_S,
            len(fields),
            *(item for pair in fields.items() for item in pair),
            *charges,
        ]
        outcome = self._admit(keys=keys, args=args)
        refused = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
        if refused == "ok":
            return
        what = "this job's" if len(charges) == 1 else f"this batch's {len(charges)} jobs'"
        if refused == "max_active_jobs":
            message = f"this key already has {limits.max_active_jobs} jobs queued or running (max_active_jobs)"
            if len(charges) > 1:
                message = (
                    f"this batch's {len(charges)} jobs would pass the key's {limits.max_active_jobs} jobs queued "
                    "or running (max_active_jobs; a batch counts as its items)"
                )
            raise QuotaExceeded(refused, message, ACTIVE_RETRY_AFTER_S)
        if refused == "chars_per_day":
            message = f"{what} {fields[CHARS]} characters would pass the key's {limits.chars_per_day} per day"
        else:
            message = (
                f"{what} estimated {fields[AUDIO_MS] / 1000:.0f} s of audio would pass the key's "
                f"{limits.audio_seconds_per_day:g} s per day"
            )
        raise QuotaExceeded(refused, message, seconds_to_midnight(now))

    def release(self, tenant: str, job_id: str, charge: Charge, day: str) -> None:
        """Undo an admission whose job was never queued (the queue refused it)."""
        self.release_many(tenant, {job_id: charge}, day)

    def release_many(self, tenant: str, charges: Mapping[str, Charge], day: str) -> None:
        """Undo the admission of jobs never queued (job id → its charge): every field it added."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.zrem(tenant_active_key(tenant), *charges)
            for field, value in _admission_fields(charges.values()).items():
                pipe.hincrby(usage_key(tenant, day), field, -value)
            pipe.execute()

    def replan(self, tenant: str, day: str, voice: str, delta_ms: int, limits: Limits) -> bool:
        """Change a job's audio reservation by ``delta_ms`` (its day's and its voice's); False (nothing
        changed) if a larger one would pass the day's limit."""
        limit = _limit(limits.audio_seconds_per_day, 1000)
        args: list[str | int] = [delta_ms, limit, USAGE_TTL_S, *_audio_fields(voice)]
        return bool(self._replan(keys=[usage_key(tenant, day)], args=args))

    def usage(self, tenant: str, day: str) -> tuple[int, float]:
        """Characters and audio seconds charged to ``tenant`` on ``day``."""
        raw = cast(dict[bytes, bytes], self._redis.hgetall(usage_key(tenant, day)))
        values = {k.decode(): int(v) for k, v in raw.items()}
        return values.get(CHARS, 0), values.get(AUDIO_MS, 0) / 1000

    def history(self, tenant: str, days: Sequence[str]) -> tuple[list[DayUsage], int]:
        """``tenant``'s usage on each of ``days`` and its active jobs now, read at one moment."""
        with self._redis.pipeline(transaction=True) as pipe:
            for day in days:
                pipe.hgetall(usage_key(tenant, day))
            pipe.zcard(tenant_active_key(tenant))
            *raw, active = pipe.execute()
        return [_day_usage(cast(dict[bytes, bytes], fields)) for fields in raw], int(active)

    def count_request(self, tenant: str, limits: Limits) -> None:
        """Count one request; raise :class:`QuotaExceeded` past the requests-per-second limit."""
        if limits.requests_per_second is None:
            return
        now = time.time()
        count = int(self._count(keys=[rate_key(tenant, int(now))]))
        if count > limits.requests_per_second:
            message = f"more than {limits.requests_per_second:g} requests per second with this key"
            raise QuotaExceeded("requests_per_second", message, 1)
