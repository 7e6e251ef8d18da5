"""Where a multi-segment job's PCM waits until assembly: Redis with a TTL, or S3 under ``tmp/``.

A part is keyed by job id, segment index and the attempt that made it (:class:`PartRef`). Two
attempts at one segment (a redelivery beside a worker that was only paused) write two parts; the
segment's done mark records which attempt won (``ttsq.segment_store.SegmentStore.mark_done``), readers
take that one, and the loser deletes its own. So no attempt ever overwrites or deletes a part that
another attempt's count stands for.

Redis is the default: a part is written once and read once within seconds or minutes, and Redis
does that in well under a millisecond where S3 takes several (docs/PERFORMANCE.md); the price is
memory (a 2-hour book holds ~320 MB until assembled), so very long jobs may prefer ``s3``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, cast

import redis
from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from ttsq.constants import job_part_bytes_key, job_part_key, job_spilled_key, part_object_key
from ttsq.errors import SegmentLost
from ttsq.settings import Settings
from ttsq.storage import ObjectStore

PCM_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True)
class PartRef:
    """One attempt's PCM of one segment of a job."""

    job_id: str
    index: int
    attempt: str


class PartStore(Protocol):
    def put(self, part: PartRef, pcm: bytes) -> None: ...

    def put_while_held(self, part: PartRef, pcm: bytes, claim: Lock) -> bool:
        """Renew ``claim`` and store the part, or store nothing and return False if ``claim`` is no
        longer this run's (``workers.steps.StepRun.ensure_current`` then decides what happens)."""
        ...

    def get(self, part: PartRef) -> bytes: ...

    def delete(self, parts: Iterable[PartRef]) -> None: ...


def counted_parts(job_id: str, winners: Mapping[int, str]) -> list[PartRef]:
    """The parts that count, from a job's done marks (index → winning attempt)."""
    return [PartRef(job_id, index, attempt) for index, attempt in sorted(winners.items())]


def iter_parts(store: PartStore, job_id: str, winners: Mapping[int, str], count: int) -> Iterator[bytes]:
    """The counted parts in order, fetched one at a time so assembly holds one part, not the whole job."""
    for index in range(count):
        attempt = winners.get(index)
        if attempt is None:
            raise SegmentLost(f"segment {index} of job {job_id} is not counted done")
        yield store.get(PartRef(job_id, index, attempt))


_PUT_WITHIN_BUDGET: Final = """
local claim, bytes_key, part_key = KEYS[1], KEYS[2], KEYS[3]
local token, claim_ms, size, ttl, budget, pcm = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if claim ~= '' then
    if redis.call('GET', claim) ~= token then return -1 end
    redis.call('PEXPIRE', claim, claim_ms)
end
local used = redis.call('INCRBY', bytes_key, size)
redis.call('EXPIRE', bytes_key, ttl)
if used <= tonumber(budget) then
    redis.call('SET', part_key, pcm, 'EX', ttl)
    return 1
end
redis.call('DECRBY', bytes_key, size)
return 0
"""
"""Renew the run's claim (if named) and store the part within the job's budget, in one round trip:
-1 the claim is not the run's (nothing written), 1 stored, 0 over budget (nothing written)."""

NOT_HELD: Final = -1
OVER_BUDGET: Final = 0


class RedisPartStore:
    """Parts in Redis while the job's share stays under ``max_bytes_per_job``; past it, in S3 (so
    one long job cannot fill Redis and fail everyone else's)."""

    def __init__(self, client: redis.Redis, ttl_s: int, overflow: S3PartStore, max_bytes_per_job: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._overflow = overflow
        self._max_bytes = max_bytes_per_job
        self._put_within_budget = client.register_script(_PUT_WITHIN_BUDGET)

    def put(self, part: PartRef, pcm: bytes) -> None:
        if self._stored(part, pcm, "", "", 0) == OVER_BUDGET:
            self._spill(part, pcm)

    def put_while_held(self, part: PartRef, pcm: bytes, claim: Lock) -> bool:
        """One round trip for the claim's renewal and the part (a short answer waits on each one)."""
        token = claim.local.token
        if token is None or claim.timeout is None:
            return False
        outcome = self._stored(part, pcm, claim.name, token, int(claim.timeout * 1000))
        if outcome == OVER_BUDGET:
            self._spill(part, pcm)
        return outcome != NOT_HELD

    def _stored(self, part: PartRef, pcm: bytes, claim: str, token: bytes | str, claim_ms: int) -> int:
        keys = [claim, job_part_bytes_key(part.job_id), job_part_key(part.job_id, part.index, part.attempt)]
        args = [token, claim_ms, len(pcm), self._ttl_s, self._max_bytes, pcm]
        return int(self._put_within_budget(keys=keys, args=args))

    def _spill(self, part: PartRef, pcm: bytes) -> None:
        self._redis.set(job_spilled_key(part.job_id), 1, ex=self._ttl_s)
        self._overflow.put(part, pcm)

    def get(self, part: PartRef) -> bytes:
        data = cast(bytes | None, self._redis.get(job_part_key(part.job_id, part.index, part.attempt)))
        if data is not None:
            return data
        return self._overflow.get(part)

    def delete(self, parts: Iterable[PartRef]) -> None:
        """Delete the parts, wherever they are."""
        chosen = list(parts)
        keys = [job_part_key(p.job_id, p.index, p.attempt) for p in chosen]
        for start in range(0, len(keys), 1000):
            self._redis.delete(*keys[start : start + 1000])
        jobs = {p.job_id for p in chosen}
        spilled = {job_id for job_id in jobs if self._redis.exists(job_spilled_key(job_id))}
        if spilled:
            self._overflow.delete(p for p in chosen if p.job_id in spilled)


class S3PartStore:
    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    def put(self, part: PartRef, pcm: bytes) -> None:
        self._objects.put(part_object_key(part.job_id, part.index, part.attempt), pcm, PCM_CONTENT_TYPE)

    def put_while_held(self, part: PartRef, pcm: bytes, claim: Lock) -> bool:
        try:
            claim.reacquire()
        except LockNotOwnedError:
            return False
        self.put(part, pcm)
        return True

    def get(self, part: PartRef) -> bytes:
        data = self._objects.get(part_object_key(part.job_id, part.index, part.attempt))
        if data is None:
            raise SegmentLost(f"segment {part.index} of job {part.job_id} has no stored audio")
        return data

    def delete(self, parts: Iterable[PartRef]) -> None:
        self._objects.delete_many([part_object_key(p.job_id, p.index, p.attempt) for p in parts])


def make_part_store(settings: Settings, client: redis.Redis, objects: ObjectStore) -> PartStore:
    """The part store the settings choose (``part_store``), for workers and the streaming API alike."""
    if settings.part_store == "redis":
        return RedisPartStore(client, settings.part_ttl_s, S3PartStore(objects), settings.part_redis_max_bytes_per_job)
    return S3PartStore(objects)
