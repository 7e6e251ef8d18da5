"""Segment bookkeeping of jobs in Redis: the plan, the done marks and running sums.

Completion is decided by one Lua script: it records the segment's index with the attempt that made
its part in the job's done hash and, only if the index was new, adds its sums, timing and level and
announces it on the job's channel; it returns how many segments are done. The first attempt to
finish a segment wins it: a late duplicate learns it lost and deletes its own part, and readers take
the winner's part. The task that sees ``done == total`` enqueues the assembly, so no chord and no
lost counter on redelivery.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, cast

import redis

from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import SegmentTiming
from tts_core.mastering.level_meter import LevelSummary
from ttsq.constants import (
    job_done_key,
    job_events_channel,
    job_key,
    job_levels_key,
    job_plan_draft_key,
    job_segments_key,
    job_stats_key,
    job_streamed_key,
    job_timings_key,
)
from ttsq.errors import JobNotFound
from ttsq.events import SEGMENT_MESSAGE_TEMPLATE
from ttsq.job_record import JobRecord, JobStatus

_MARK_DONE = """
local added = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[6])
if added == 1 then
  redis.call('HINCRBY', KEYS[2], 'synthesis_us', ARGV[2])
  redis.call('HINCRBY', KEYS[2], 'audio_us', ARGV[3])
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[4], ARGV[1], ARGV[7])
    redis.call('EXPIRE', KEYS[4], ARGV[4])
  end
  if ARGV[8] ~= '' then
    redis.call('HSET', KEYS[5], ARGV[1], ARGV[8])
    redis.call('EXPIRE', KEYS[5], ARGV[4])
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
local done = redis.call('HLEN', KEYS[1])
if added == 1 then
  redis.call('PUBLISH', KEYS[3], string.format(ARGV[5], ARGV[1], done))
end
return {added, done}
"""

_PUBLISH_PLAN = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RENAME', KEYS[2], KEYS[1])
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  return 1
end
redis.call('DEL', KEYS[2])
return 0
"""

PLAN_CHUNK_SEGMENTS: Final = 1000
"""Segments written per ``RPUSH`` of a plan: a book has more segments (6,648 for 1,000,000 characters
of prose) than one script call could take (Lua unpacks fewer than 8,000 values), and chunks keep the
encoded plan from being held whole."""


@dataclass(frozen=True)
class Progress:
    """Finished segments of a running job and what they took."""

    done: int
    synthesis_ms: int
    audio_s: float


class SegmentStore:
    """Plans, done sets and sums of segments, with the job's TTL on every key."""

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._mark_done = client.register_script(_MARK_DONE)
        self._publish_plan = client.register_script(_PUBLISH_PLAN)

    def save_plan(self, job_id: str, segments: Sequence[Sequence[PlannedUtterance]]) -> bool:
        """Store each segment's planned utterances (ids, rate, pauses), unless a plan exists (a
        redelivered entry task keeps the first plan). Returns whether this call wrote it.

        The plan is written in chunks to a draft key of its own, then renamed into place only if no
        plan exists, so a reader never sees half a plan and two writers never mix theirs."""
        key = job_segments_key(job_id)
        if self._redis.exists(key):
            return False
        draft = job_plan_draft_key(job_id, uuid.uuid4().hex)
        try:
            for start in range(0, len(segments), PLAN_CHUNK_SEGMENTS):
                chunk = segments[start : start + PLAN_CHUNK_SEGMENTS]
                encoded = [json.dumps([u.to_json() for u in segment], separators=(",", ":")) for segment in chunk]
                with self._redis.pipeline(transaction=False) as pipe:
                    pipe.rpush(draft, *encoded)
                    pipe.expire(draft, self._ttl_s)
                    pipe.execute()
            return bool(self._publish_plan(keys=[key, draft], args=[self._ttl_s]))
        except BaseException:
            with contextlib.suppress(redis.RedisError):  # the draft's TTL removes it otherwise
                self._redis.delete(draft)
            raise

    def segment(self, job_id: str, index: int) -> list[PlannedUtterance] | None:
        raw = cast(bytes | None, self._redis.lindex(job_segments_key(job_id), index))
        return None if raw is None else [PlannedUtterance.from_json(item) for item in json.loads(raw)]

    def is_done(self, job_id: str, index: int) -> bool:
        return bool(self._redis.hexists(job_done_key(job_id), str(index)))

    def mark_done(
        self,
        job_id: str,
        index: int,
        attempt: str,
        synthesis_ms: float,
        audio_s: float,
        timing: SegmentTiming | None = None,
        level: LevelSummary | None = None,
    ) -> tuple[bool, int]:
        """Count segment ``index`` once, as made by ``attempt`` (whose part, ``timing`` and ``level``
        then stand for it); returns (this attempt won it, segments done so far)."""
        keys = [
            job_done_key(job_id),
            job_stats_key(job_id),
            job_events_channel(job_id),
            job_timings_key(job_id),
            job_levels_key(job_id),
        ]
        # UTF-8, not \u escapes: a phoneme's IPA letter is 2 bytes so, 6 escaped (phoneme marks).
        encoded_timing = (
            "" if timing is None else json.dumps(timing.to_json(), separators=(",", ":"), ensure_ascii=False)
        )
        encoded_level = "" if level is None else json.dumps(level.to_json(), separators=(",", ":"))
        args: list[int | str] = [
            index,
            round(synthesis_ms * 1000),
            round(audio_s * 1_000_000),
            self._ttl_s,
            SEGMENT_MESSAGE_TEMPLATE,
            attempt,
            encoded_timing,
            encoded_level,
        ]
        added, done = cast(list[int], self._mark_done(keys=keys, args=args))
        return bool(added), int(done)

    def winners(self, job_id: str) -> dict[int, str]:
        """Each counted segment's index with the attempt whose part counts for it."""
        return _winners(cast(dict[bytes, bytes], self._redis.hgetall(job_done_key(job_id))))

    def record_and_winners(self, job_id: str, mark_streamed: bool = False) -> tuple[JobRecord, dict[int, str]]:
        """The job's record and :meth:`winners`, in one round trip (a part reader's look, on the
        answer's path); with ``mark_streamed``, :meth:`mark_streamed` first, in the same trip and
        before the reads, as that handshake needs."""
        with self._redis.pipeline(transaction=False) as pipe:
            if mark_streamed:
                pipe.set(job_streamed_key(job_id), b"1", ex=self._ttl_s)
            pipe.get(job_key(job_id))
            pipe.hgetall(job_done_key(job_id))
            *_, raw, done = pipe.execute()
        if raw is None:
            raise JobNotFound(job_id)
        return JobRecord.model_validate_json(raw), _winners(done)

    def progress(self, job_id: str) -> Progress:
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.hlen(job_done_key(job_id))
            pipe.hgetall(job_stats_key(job_id))
            done, stats = pipe.execute()
        sums = {k.decode(): int(v) for k, v in cast(dict[bytes, bytes], stats).items()}
        return Progress(int(done), round(sums.get("synthesis_us", 0) / 1000), sums.get("audio_us", 0) / 1_000_000)

    def done_indexes(self, job_id: str) -> set[int]:
        """Which segments are counted done."""
        members = cast(list[bytes], self._redis.hkeys(job_done_key(job_id)))
        return {int(m) for m in members}

    def mark_streamed(self, job_id: str) -> None:
        self._redis.set(job_streamed_key(job_id), b"1", ex=self._ttl_s)

    def was_streamed(self, job_id: str) -> bool:
        return bool(self._redis.exists(job_streamed_key(job_id)))

    def timing(self, job_id: str, index: int) -> SegmentTiming | None:
        """Where segment ``index``'s utterances and words lie in its counted part (a job with marks),
        saved with its done mark and kept until assembly turns them into the job's marks."""
        raw = cast(bytes | None, self._redis.hget(job_timings_key(job_id), str(index)))
        return None if raw is None else SegmentTiming.from_json(json.loads(raw))

    def level(self, job_id: str, index: int) -> LevelSummary | None:
        """Segment ``index``'s level summary (a job with a loudness target), kept until assembly."""
        raw = cast(bytes | None, self._redis.hget(job_levels_key(job_id), str(index)))
        return None if raw is None else LevelSummary.from_json(json.loads(raw))

    def drop_plan(self, job_id: str) -> None:
        """The plan is the bulky part (every segment's ids); drop it, and the segments' timings and
        levels, once the job is finished."""
        self._redis.delete(job_segments_key(job_id), job_timings_key(job_id), job_levels_key(job_id))


def live_progress(record: JobRecord, segments: SegmentStore) -> JobRecord:
    """A running multi-segment job's record with the sums of its finished segments."""
    total = record.progress.segments_total
    if record.status is not JobStatus.RUNNING or not total or total < 2:
        return record
    sums = segments.progress(record.id)
    progress = record.progress.with_sums(sums.done, sums.synthesis_ms, sums.audio_s)
    return record.model_copy(update={"progress": progress})


def _winners(raw: dict[bytes, bytes]) -> dict[int, str]:
    return {int(index): attempt.decode() for index, attempt in raw.items()}
