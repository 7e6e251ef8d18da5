"""Where a multi-segment job's PCM waits until assembly: Redis with a TTL, or S3 under ``tmp/``.

Both key parts by job id and segment index, so a redelivered segment overwrites its own part.
Redis is the default: a part is written once and read once within seconds or minutes, and Redis
does that in well under a millisecond where S3 takes several (docs/PERFORMANCE.md); the price is
memory (a 2-hour book holds ~320 MB until assembled), so very long jobs may prefer ``s3``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, cast

import redis

from ttsq.constants import job_part_bytes_key, job_part_key, job_spilled_key, part_object_key
from ttsq.errors import SegmentLost
from ttsq.settings import Settings
from ttsq.storage import ObjectStore

PCM_CONTENT_TYPE = "application/octet-stream"


class PartStore(Protocol):
    def put(self, job_id: str, index: int, pcm: bytes) -> None: ...

    def get(self, job_id: str, index: int) -> bytes: ...

    def delete(self, job_id: str, indexes: Iterable[int]) -> None: ...


def iter_parts(store: PartStore, job_id: str, count: int) -> Iterator[bytes]:
    """Parts in order, fetched one at a time so assembly holds one part, not the whole job."""
    for index in range(count):
        yield store.get(job_id, index)


class RedisPartStore:
    """Parts in Redis while the job's share stays under ``max_bytes_per_job``; past it, in S3 (so
    one long job cannot fill Redis and fail everyone else's)."""

    def __init__(self, client: redis.Redis, ttl_s: int, overflow: S3PartStore, max_bytes_per_job: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._overflow = overflow
        self._max_bytes = max_bytes_per_job

    def put(self, job_id: str, index: int, pcm: bytes) -> None:
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.incrby(job_part_bytes_key(job_id), len(pcm))
            pipe.expire(job_part_bytes_key(job_id), self._ttl_s)
            used = int(pipe.execute()[0])
        if used <= self._max_bytes:
            self._redis.set(job_part_key(job_id, index), pcm, ex=self._ttl_s)
            return
        self._redis.decrby(job_part_bytes_key(job_id), len(pcm))
        self._redis.set(job_spilled_key(job_id), 1, ex=self._ttl_s)
        self._overflow.put(job_id, index, pcm)

    def get(self, job_id: str, index: int) -> bytes:
        data = cast(bytes | None, self._redis.get(job_part_key(job_id, index)))
        if data is not None:
            return data
        return self._overflow.get(job_id, index)

    def delete(self, job_id: str, indexes: Iterable[int]) -> None:
        """Delete the parts, wherever they are; the job's byte count goes with the last of them."""
        chosen = list(indexes)
        keys = [job_part_key(job_id, i) for i in chosen]
        for start in range(0, len(keys), 1000):
            self._redis.delete(*keys[start : start + 1000])
        if self._redis.get(job_spilled_key(job_id)) is not None:
            self._overflow.delete(job_id, chosen)


class S3PartStore:
    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    def put(self, job_id: str, index: int, pcm: bytes) -> None:
        self._objects.put(part_object_key(job_id, index), pcm, PCM_CONTENT_TYPE)

    def get(self, job_id: str, index: int) -> bytes:
        data = self._objects.get(part_object_key(job_id, index))
        if data is None:
            raise SegmentLost(f"segment {index} of job {job_id} has no stored audio")
        return data

    def delete(self, job_id: str, indexes: Iterable[int]) -> None:
        self._objects.delete_many([part_object_key(job_id, i) for i in indexes])


def make_part_store(settings: Settings, client: redis.Redis, objects: ObjectStore) -> PartStore:
    """The part store the settings choose (``part_store``), for workers and the streaming API alike."""
    if settings.part_store == "redis":
        return RedisPartStore(client, settings.part_ttl_s, S3PartStore(objects), settings.part_redis_max_bytes_per_job)
    return S3PartStore(objects)
