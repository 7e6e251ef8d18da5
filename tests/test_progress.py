"""Segment bookkeeping and part storage against the real Redis and SeaweedFS."""

from __future__ import annotations

import io
import tempfile
import tracemalloc
import uuid

import pytest
import redis
from mypy_boto3_s3 import S3Client
from redis.exceptions import LockError

from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import SegmentTiming
from ttsq.constants import job_part_bytes_key, job_part_key, job_plan_draft_key, job_segments_key, part_object_key
from ttsq.errors import SegmentLost
from ttsq.job_store import JobStore
from ttsq.parts import PartRef, RedisPartStore, S3PartStore
from ttsq.segment_store import PLAN_CHUNK_SEGMENTS, SegmentStore
from ttsq.settings import Settings
from ttsq.storage import MULTIPART_THRESHOLD, UPLOAD_PARTS_IN_MEMORY, ObjectStore


@pytest.fixture
def segments(redis_client: redis.Redis) -> SegmentStore:
    return SegmentStore(redis_client, 600)


def test_parts_past_a_jobs_redis_share_go_to_s3(redis_client: redis.Redis, settings: Settings) -> None:
    """A job's parts stay in Redis up to its share; the rest go to S3, and reads and deletes find
    them wherever they are."""
    objects = ObjectStore(settings.s3)
    store = RedisPartStore(redis_client, 600, S3PartStore(objects), max_bytes_per_job=250)
    parts = [PartRef("job-spill", index, "a1") for index in range(4)]
    for part in parts:
        store.put(part, bytes([part.index + 1]) * 100)
    assert redis_client.exists(job_part_key("job-spill", 0, "a1"), job_part_key("job-spill", 1, "a1")) == 2
    assert not redis_client.exists(job_part_key("job-spill", 2, "a1"))
    assert objects.list_keys("tmp/job-spill/") == [part_object_key("job-spill", i, "a1") for i in (2, 3)]
    assert [store.get(part) for part in parts] == [bytes([i + 1]) * 100 for i in range(4)]
    store.delete(parts)
    assert objects.list_keys("tmp/job-spill/") == []
    assert not redis_client.exists(job_part_key("job-spill", 0, "a1"))
    with pytest.raises(SegmentLost):
        store.get(parts[3])


def test_two_attempts_at_a_segment_keep_their_own_parts(redis_client: redis.Redis, settings: Settings) -> None:
    """A late duplicate of a segment stores its part beside the winner's, never over it; deleting its
    own leaves the winner's whole."""
    store = RedisPartStore(redis_client, 600, S3PartStore(ObjectStore(settings.s3)), max_bytes_per_job=1000)
    winner, loser = PartRef("job-pair", 0, "first"), PartRef("job-pair", 0, "second")
    store.put(winner, b"w" * 10)
    store.put(loser, b"l" * 12)
    store.delete([loser])
    assert store.get(winner) == b"w" * 10
    with pytest.raises(SegmentLost):
        store.get(loser)


def test_a_segment_is_counted_once_for_the_first_attempt(segments: SegmentStore) -> None:
    timing = SegmentTiming(100, [])
    assert segments.mark_done("job-a", 0, "first", 100.0, 2.0, timing) == (True, 1)
    late = SegmentTiming(999, [])
    assert segments.mark_done("job-a", 0, "second", 100.0, 2.0, late) == (False, 1)  # no double count
    assert segments.mark_done("job-a", 1, "first", 50.0, 1.5) == (True, 2)
    progress = segments.progress("job-a")
    assert (progress.done, progress.synthesis_ms, progress.audio_s) == (2, 150, 3.5)
    assert segments.is_done("job-a", 1)
    assert not segments.is_done("job-a", 2)
    assert segments.winners("job-a") == {0: "first", 1: "first"}
    stored = segments.timing("job-a", 0)
    assert stored is not None
    assert stored.samples == 100, "the winner's timing stands, not the late one's"


def test_the_first_plan_is_kept(segments: SegmentStore) -> None:
    second = [PlannedUtterance([1, 6, 2]), PlannedUtterance([1, 7, 2], rate=0.8, pause_after_s=2.0)]
    assert segments.save_plan("job-b", [[PlannedUtterance([1, 5, 2], pause_before_s=0.5)], second])
    assert not segments.save_plan("job-b", [[PlannedUtterance([9])]])  # a redelivered entry task keeps the plan
    assert segments.segment("job-b", 1) == second
    assert segments.segment("job-b", 0) == [PlannedUtterance([1, 5, 2], pause_before_s=0.5)]
    assert segments.segment("job-b", 2) is None
    segments.drop_plan("job-b")
    assert segments.segment("job-b", 0) is None


def test_a_book_sized_plan_is_stored_whole(segments: SegmentStore, redis_client: redis.Redis) -> None:
    """More segments than one Lua call can unpack (about 8,000): written in chunks to a draft, then
    renamed into place whole, with the job's TTL and no draft left behind."""
    job_id = f"job-book-{uuid.uuid4().hex[:8]}"
    count = 9 * PLAN_CHUNK_SEGMENTS + 7  # 9,007: past Lua's limit, and a last chunk that is not full
    plan = [
        [PlannedUtterance([1, index % 200, 2], pause_after_s=0.6 if index % 5 == 0 else None)] for index in range(count)
    ]
    assert segments.save_plan(job_id, plan)
    assert redis_client.llen(job_segments_key(job_id)) == count
    assert 0 < redis_client.ttl(job_segments_key(job_id)) <= 600
    assert [segments.segment(job_id, i) for i in (0, 4321, count - 1)] == [plan[0], plan[4321], plan[-1]]
    assert list(redis_client.scan_iter(match=job_plan_draft_key(job_id, "*"))) == []
    assert not segments.save_plan(job_id, plan[:2])  # the first plan stays
    assert redis_client.llen(job_segments_key(job_id)) == count
    segments.drop_plan(job_id)
    assert not redis_client.exists(job_segments_key(job_id))


@pytest.mark.parametrize("kind", ["redis", "s3"])
def test_part_stores_round_trip(kind: str, redis_client: redis.Redis, settings: Settings) -> None:
    overflow = S3PartStore(ObjectStore(settings.s3))
    store = RedisPartStore(redis_client, 600, overflow, 1 << 20) if kind == "redis" else overflow
    parts = [PartRef("job-c", index, "a1") for index in range(2)]
    store.put(parts[0], b"\x01\x00" * 100)
    store.put(parts[1], b"\x02\x00" * 50)
    assert store.get(parts[1]) == b"\x02\x00" * 50
    store.delete(parts)
    with pytest.raises(SegmentLost):
        store.get(parts[0])


def test_large_objects_upload_in_parts(settings: Settings, s3_client: S3Client) -> None:
    objects = ObjectStore(settings.s3)
    data = bytes(range(256)) * ((MULTIPART_THRESHOLD + 1_000_000) // 256)
    objects.upload("jobs/large/audio.wav", io.BytesIO(data), "audio/wav")
    head = s3_client.head_object(Bucket=settings.s3.bucket, Key="jobs/large/audio.wav")
    assert head["ContentType"] == "audio/wav"
    assert head["ContentLength"] == len(data)
    assert "-" in head["ETag"]  # a multipart ETag: "<md5 of part md5s>-<part count>"
    assert objects.get("jobs/large/audio.wav") == data
    objects.delete_many(["jobs/large/audio.wav"])
    assert objects.get("jobs/large/audio.wav") is None


def test_a_small_upload_is_one_put_from_where_the_file_stands(settings: Settings, s3_client: S3Client) -> None:
    """A short job's file goes up whole in one request (no transfer manager and its threads), from
    the file's position on."""
    objects = ObjectStore(settings.s3)
    key = f"jobs/small-{uuid.uuid4().hex[:8]}/audio.wav"
    source = io.BytesIO(b"ignored-" + bytes(range(256)) * 40)
    source.seek(len(b"ignored-"))
    objects.upload(key, source, "audio/wav")
    head = s3_client.head_object(Bucket=settings.s3.bucket, Key=key)
    assert head["ContentType"] == "audio/wav"
    assert "-" not in head["ETag"]  # one PUT, not a multipart upload
    assert objects.get(key) == bytes(range(256)) * 40
    objects.delete_many([key])


def test_an_upload_reads_two_parts_into_memory_at_most(settings: Settings, s3_client: S3Client) -> None:
    """A book's audio goes up from the assembly's temporary file; however large it is, the upload
    holds ``UPLOAD_PARTS_IN_MEMORY`` parts in memory, not s3transfer's default of ten."""
    objects = ObjectStore(settings.s3)
    key = f"jobs/book-{uuid.uuid4().hex[:8]}/audio.wav"
    parts = 8
    with tempfile.TemporaryFile() as source:
        block = bytes(range(256)) * 4096  # 1 MiB
        for _ in range(parts * MULTIPART_THRESHOLD // len(block)):
            source.write(block)
        source.seek(0)
        tracemalloc.start()
        try:
            objects.upload(key, source, "audio/wav")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    head = s3_client.head_object(Bucket=settings.s3.bucket, Key=key)
    assert head["ContentLength"] == parts * MULTIPART_THRESHOLD
    assert head["ETag"].strip('"').endswith(f"-{parts}")
    objects.delete_many([key])
    # Those parts, and about one more on its way in (s3transfer's default held 133 MiB of these 128).
    assert peak < (UPLOAD_PARTS_IN_MEMORY + 2) * MULTIPART_THRESHOLD, f"{peak / 2**20:.0f} MiB held"


@pytest.mark.parametrize("kind", ["redis", "s3"])
def test_a_part_is_stored_only_while_its_runs_claim_holds(
    kind: str, redis_client: redis.Redis, settings: Settings
) -> None:
    """The claim's renewal and the part's write go together: a held claim is renewed and the part
    stored; a claim that lapsed and went to another task stores nothing and renews nothing."""
    job_id = f"job-held-{kind}"
    overflow = S3PartStore(ObjectStore(settings.s3))
    store = RedisPartStore(redis_client, 600, overflow, 1 << 20) if kind == "redis" else overflow
    jobs = JobStore(redis_client, 600)
    claim = jobs.step_lock(job_id, "segment:0", ttl_s=60)
    assert claim.acquire()
    redis_client.pexpire(claim.name, 3000)  # nearly over: the write renews it
    mine = PartRef(job_id, 0, "mine")
    assert store.put_while_held(mine, b"m" * 20, claim)
    assert store.get(mine) == b"m" * 20
    assert redis_client.pttl(claim.name) > 50_000  # renewed to the step's lease
    redis_client.delete(claim.name)  # it lapsed...
    thief = jobs.step_lock(job_id, "segment:0", ttl_s=60)
    assert thief.acquire()  # ...and another task took the step
    late = PartRef(job_id, 1, "mine")
    assert not store.put_while_held(late, b"l" * 20, claim)
    with pytest.raises(SegmentLost):
        store.get(late)
    assert redis_client.get(claim.name) == thief.local.token
    store.delete([mine])


def test_a_held_part_past_the_jobs_redis_share_goes_to_s3(redis_client: redis.Redis, settings: Settings) -> None:
    objects = ObjectStore(settings.s3)
    store = RedisPartStore(redis_client, 600, S3PartStore(objects), max_bytes_per_job=150)
    claim = JobStore(redis_client, 600).step_lock("job-held-spill", "entry", ttl_s=60)
    assert claim.acquire()
    parts = [PartRef("job-held-spill", index, "a1") for index in range(2)]
    assert all(store.put_while_held(part, bytes([part.index + 1]) * 100, claim) for part in parts)
    assert redis_client.exists(job_part_key("job-held-spill", 0, "a1")) == 1
    assert objects.list_keys("tmp/job-held-spill/") == [part_object_key("job-held-spill", 1, "a1")]
    assert int(redis_client.get(job_part_bytes_key("job-held-spill")) or 0) == 100  # the spilled one is not counted
    assert [store.get(part) for part in parts] == [b"\x01" * 100, b"\x02" * 100]
    store.delete(parts)


def test_a_step_is_held_by_one_task_at_a_time(redis_client: redis.Redis) -> None:
    jobs = JobStore(redis_client, 600)
    first = jobs.step_lock("job-d", "segment:3", ttl_s=60)
    assert first.acquire()
    assert not jobs.step_lock("job-d", "segment:3", ttl_s=60).acquire()  # a duplicate delivery
    other_step = jobs.step_lock("job-d", "segment:4", ttl_s=60)
    assert other_step.acquire()  # other steps are free
    with pytest.raises(LockError):
        jobs.step_lock("job-d", "segment:3", ttl_s=60).release()  # not the holder: refused, no effect
    assert not jobs.step_lock("job-d", "segment:3", ttl_s=60).acquire()
    assert 0 < int(redis_client.ttl("ttsq:job:job-d:claim:segment:3")) <= 60  # a dead holder's claim expires
    first.release()
    assert jobs.step_lock("job-d", "segment:3", ttl_s=60).acquire()
    other_step.release()
