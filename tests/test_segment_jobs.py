"""Multi-segment jobs through real Redis, SeaweedFS and workers: ordered assembly, progress,
cross-job batching, and a worker killed mid-job."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import numpy as np
import pytest
import redis
import soundfile
from mypy_boto3_s3 import S3Client

from api.main import create_app
from cli.commands import webhook_worker_argv
from cli.processes import ManagedProcess, wait_until
from cli.workerpool import wait_for_node
from tests.conftest import (
    JOB_TIMEOUT_S,
    database_url,
    production_sweep,
    serve,
    start_worker,
    stop_all,
    wait_for,
    wait_for_job,
)
from tests.voices import BROKEN_VOICE_ID
from tts_core.base.audio import PCM16
from tts_core.base.config import SynthesisConfig
from tts_core.frontend.segments import group_segments, plain
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.piper_engine import piper_source
from tts_core.voices.voice import Voice
from ttsq.broker import make_producer
from ttsq.constants import job_done_key, job_part_key, job_segments_key, job_stats_key
from ttsq.job_record import JobStatus
from ttsq.settings import Settings, settings_env

PARAGRAPH = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness. It was the epoch of belief, it was the epoch of incredulity. It was the season of Light, "
    "it was the season of Darkness, it was the spring of hope, it was the winter of despair. We had "
    "everything before us, we had nothing before us. We were all going direct to Heaven, we were all going "
    "direct the other way. In short, the period was so far like the present period, that some of its "
    "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
    "of comparison only."
)
DETERMINISTIC = {"noise_scale": 0.0, "noise_w": 0.0}
NEARLY_FULL: Final = (
    "The narrator reads one more sentence of the chapter aloud, slowly and clearly, so that every listener in "
    "the room can follow the story of the long dark night right to its very end."
)
"""One sentence that fills most of a segment (377 phoneme ids, with its pause 387 of 400): a sentence of
a few words beside it does not fit, so each makes a segment of its own."""
ALSO_NEARLY_FULL: Final = (
    "A long sentence of plain words goes on and on here, past the point where a reader would pause, and it "
    "keeps going for a good while longer so that its segment is full, yet not over."
)
"""Another such sentence (381 ids), without a "θ"."""
THREE_SEGMENTS: Final = f"Here we go. {NEARLY_FULL} That is all."
"""Three segments at the default budget in a third of PARAGRAPH's audio (which makes four): two short
sentences that do not fit in the long one's segment."""


@pytest.fixture(scope="module")
def voice() -> Voice:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    return Voice.load(piper_source(info).model_path, piper_source(info).config_path, intra_op_threads=2)


PARTS_GONE_S = 10.0
"""Longest the assembly may take, after its success write, to delete a job's parts."""


def expected_parts(voice: Voice, text: str, settings: Settings) -> list[PCM16]:
    """Each segment as the worker should make it, synthesised here one utterance at a time."""
    config = SynthesisConfig(noise_scale=0.0, noise_w=0.0, sentence_pause_s=settings.sentence_pause_s)
    planned = plain(voice.utterances(text, settings.segment_max_ids))  # pauses weigh in a segment too
    segments = group_segments(planned, settings.segment_max_ids, settings.sentence_pause_s)
    return [voice.speak_ids([u.ids for u in segment], config) for segment in segments]


def download_pcm(client: httpx.Client, job_id: str) -> PCM16:
    response = client.get(f"/v1/jobs/{job_id}/audio", follow_redirects=True)
    assert response.status_code == 200
    pcm, rate = soundfile.read(io.BytesIO(response.content), dtype="int16")
    assert rate == 22050
    return np.asarray(pcm, dtype=np.int16)


def assert_assembled_in_order(pcm: PCM16, parts: list[PCM16], pause_s: float) -> None:
    """Total = parts + pauses; digital silence exactly where segments meet; content in order."""
    gap = round(pause_s * 22050)
    assert pcm.size == sum(p.size for p in parts) + gap * (len(parts) - 1)
    offset = 0
    for part in parts:
        np.testing.assert_allclose(pcm[offset : offset + part.size], part, atol=64)
        offset += part.size
        if offset < pcm.size:
            assert not pcm[offset : offset + gap].any(), "segment boundary is not a pause"
            offset += gap


def test_multi_segment_job_assembles_in_order(
    client: httpx.Client, voice: Voice, settings: Settings, redis_client: redis.Redis
) -> None:
    parts = expected_parts(voice, THREE_SEGMENTS, settings)
    assert len(parts) >= 3
    job = client.post("/v1/jobs", json={"text": THREE_SEGMENTS, "format": "wav", **DETERMINISTIC}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done
    progress = done["progress"]
    assert progress["segments_total"] == progress["segments_done"] == len(parts)
    assert_assembled_in_order(download_pcm(client, job["id"]), parts, settings.sentence_pause_s)
    assert progress["audio_s"] == done["result"]["duration_s"]
    assert progress["synthesis_ms"] > 0
    assert progress["queued_ms"] >= 0
    assert progress["rtf"] == pytest.approx(progress["synthesis_ms"] / 1000 / progress["audio_s"], rel=1e-2)
    # Parts and plan are dropped just after the succeeded status is written (which the API may show
    # first); the done set stays as the record of what was counted.
    wait_until(lambda: not redis_client.exists(job_segments_key(job["id"])), 30, "the plan dropped")
    wait_until(lambda: not redis_client.keys(f"{job_part_key(job['id'], 0, '')}*"), 30, "parts removed")
    assert redis_client.hlen(job_done_key(job["id"])) == len(parts)


def test_single_segment_job_finishes_in_its_entry_task(client: httpx.Client, redis_client: redis.Redis) -> None:
    job = client.post("/v1/jobs", json={"text": "Short and sweet."}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded"
    assert done["progress"]["segments_total"] == done["progress"]["segments_done"] == 1
    assert not redis_client.exists(job_done_key(job["id"]))  # no segment tasks, no done set


def test_progress_counters_move(client: httpx.Client) -> None:
    """Three segments: after the first, short one, the long one's synthesis is a stretch of polls in
    which one segment of three is done."""
    job = client.post("/v1/jobs", json={"text": THREE_SEGMENTS}).json()
    seen: list[dict[str, Any]] = []

    def read() -> dict[str, Any]:
        seen.append(client.get(f"/v1/jobs/{job['id']}").json())
        return seen[-1]

    status = wait_for(read, lambda s: JobStatus(s["status"]).terminal, JOB_TIMEOUT_S, "the job finished")
    assert status["status"] == "succeeded", status
    running = [s["progress"] for s in seen if s["status"] == "running" and s["progress"]["segments_total"]]
    assert all(progress["audio_s"] is not None for progress in running)
    counts = [progress["segments_done"] for progress in running]
    total = status["progress"]["segments_total"]
    assert total >= 3
    assert counts == sorted(counts), "segments_done went backwards"
    assert any(0 < n < total for n in counts), f"no intermediate progress seen: {counts}"
    assert status["progress"]["segments_done"] == total


def worker_settings(settings: Settings, queue: str, **changes: Any) -> Settings:
    worker = settings.worker.model_copy(update=changes.pop("worker", {}))
    return settings.model_copy(update={"queue": queue, "worker": worker, **changes})


@dataclass
class SideStack:
    """Workers on a queue of their own with settings of the test's choosing, and an API sending there."""

    settings: Settings
    client: httpx.Client
    folder: Path
    workers: list[ManagedProcess] = field(default_factory=list)

    def add_worker(self, name: str) -> ManagedProcess:
        process = start_worker(self.settings, self.folder / f"{name}.log", name)
        self.workers.append(process)
        return process


@contextmanager
def side_stack(custom: Settings, folder: Path, first: ManagedProcess) -> Iterator[SideStack]:
    """An API for ``first``, a worker on ``custom``; stops it and any worker added, at the end."""
    with serve(create_app(custom)) as url, httpx.Client(base_url=url, timeout=30) as http:
        stack = SideStack(custom, http, folder, [first])
        try:
            yield stack
        finally:
            stop_all(stack.workers)


MAX_JOB_SEGMENTS = 3
TUNED = {"worker": {"max_batch": 2, "max_wait_ms": 500.0}, "max_job_segments": MAX_JOB_SEGMENTS}
"""Settings two tests need of a worker, in one worker: batches of two items whose first waits 500 ms
for company, and at most three segments a job. The batching test's jobs are one segment each; the
segment limit's job fails before any inference call. (Two, not more: a worker warms up every batch
size up to its largest, four of them a few seconds of inference.)"""


CRASH_DATABASE: Final = 9
"""The crash test's Redis database: its service worker sweeps at the production's settings, which
the suite's records (left unqueued on purpose by other tests) must not meet."""


def crash_safe(settings: Settings) -> Settings:
    """The shortest visibility timeout and step lease the settings allow, so that a dead worker's
    segments come back soon; parts in S3; a Redis database of its own, swept as in production."""
    crash = worker_settings(
        settings,
        "tts-crash",
        redis_url=database_url(settings.redis_url, CRASH_DATABASE),
        visibility_timeout_s=10,
        step_lease_s=5,
        task_retry_backoff_max_s=5,
        part_store="s3",
    )
    return production_sweep(crash)


@pytest.fixture(scope="module")
def tuned_stack(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideStack]:
    """The module's worker of ``TUNED`` settings, on a queue of its own, and an API sending there."""
    folder = tmp_path_factory.mktemp("side")
    custom = worker_settings(settings, "tts-tuned", **TUNED)
    with side_stack(custom, folder, start_worker(custom, folder / "tuned.log", "tuned")) as stack:
        yield stack


def test_two_jobs_submitted_together_share_an_inference_call(tuned_stack: SideStack) -> None:
    client = tuned_stack.client
    first = client.post("/v1/jobs", json={"text": "The first job says hello."}).json()
    second = client.post("/v1/jobs", json={"text": "The second job says goodbye."}).json()
    for job in (first, second):
        assert wait_for_job(client, job["id"])["status"] == "succeeded"
    producer = make_producer(tuned_stack.settings)
    try:
        node = f"{tuned_stack.workers[0].name}@{socket.gethostname()}"
        replies = producer.control.broadcast(
            "batches", reply=True, destination=[node], limit=1, arguments={"limit": 50}, timeout=5
        )
    finally:
        producer.close()
    assert replies, "worker did not answer"
    stats = replies[0][node]
    assert stats["max_batch"] == 2
    shared = [r for r in stats["recent"] if {f"{first['id']}/0/0", f"{second['id']}/0/0"} <= set(r["tags"])]
    assert len(shared) == 1, stats["recent"]
    assert shared[0]["size"] == 2


def test_a_text_planned_past_max_job_segments_fails_before_any_synthesis(
    tuned_stack: SideStack, redis_client: redis.Redis
) -> None:
    """The bound on what a job keeps in Redis: a plan of more segments than ``max_job_segments`` is
    never stored nor sent; the job fails with ``plan_too_long``, naming the count and the limit."""
    client = tuned_stack.client
    job = client.post("/v1/jobs", json={"text": PARAGRAPH}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "plan_too_long"
    assert f"at most {MAX_JOB_SEGMENTS} (TTSQ_MAX_JOB_SEGMENTS)" in done["error"]["message"]
    assert done["progress"]["segments_done"] == 0
    assert not redis_client.exists(job_segments_key(job["id"]), job_done_key(job["id"]))


@pytest.fixture
def crash_redis(settings: Settings) -> Iterator[redis.Redis]:
    """The crash test's own Redis database, empty before and after."""
    client = redis.Redis.from_url(crash_safe(settings).redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def crash_stack(settings: Settings, crash_redis: redis.Redis, tmp_path: Path) -> Iterator[SideStack]:
    """The worker the crash test kills, started for that test alone (a run without the recovery tests
    starts none), beside a service worker as every deployment runs one: its sweeper sends again a
    segment whose message the kill lost. kombu's Redis transport takes a message with ``BRPOP`` and
    records it as held in a second command; a worker killed between the two loses it, and the kill
    comes as a segment ends, just when the worker asks for its next one."""
    custom = crash_safe(settings)
    env = {**os.environ, **settings_env(custom)}
    service = ManagedProcess("crash-service", webhook_worker_argv(2, "crash-service@%h"), tmp_path / "service.log", env)
    service.start()
    try:
        victim = start_worker(custom, tmp_path / "crash-victim.log", "crash-victim")
        wait_for_node(custom, "crash-service", service, 60)
        with side_stack(custom, tmp_path, victim) as stack:
            yield stack
    finally:
        service.stop()


@pytest.mark.recovery
def test_worker_killed_mid_job_the_job_still_succeeds_once(
    crash_stack: SideStack, voice: Voice, s3_client: S3Client, crash_redis: redis.Redis
) -> None:
    client = crash_stack.client
    custom = crash_stack.settings
    text = " ".join([PARAGRAPH] * 2)
    job = client.post("/v1/jobs", json={"text": text, "format": "wav", **DETERMINISTIC}).json()
    wait_for(
        lambda: client.get(f"/v1/jobs/{job['id']}").json(),
        lambda status: status["progress"]["segments_done"] >= 3,
        JOB_TIMEOUT_S,
        "three segments done",
    )
    victim = crash_stack.workers[0]
    victim.kill()  # SIGKILL: no warm shutdown, unacknowledged segments stay in Redis
    victim.stop()
    running = client.get(f"/v1/jobs/{job['id']}").json()
    assert running["status"] == "running"
    assert running["progress"]["segments_done"] < running["progress"]["segments_total"]

    crash_stack.add_worker(f"crash-replacement-{job['id'][:8]}")
    done = wait_for_job(client, job["id"], timeout_s=120)
    assert done["status"] == "succeeded", done
    total = done["progress"]["segments_total"]
    assert done["progress"]["segments_done"] == total
    bucket = custom.s3.bucket
    finals = s3_client.list_objects_v2(Bucket=bucket, Prefix=f"anonymous/jobs/{job['id']}/").get("Contents", [])
    assert [o["Key"] for o in finals] == [done["result"]["key"]]
    # The assembly deletes the parts right after its success write: a reading taken between the two
    # on a loaded machine still sees them, so they must be gone soon after, not at the same instant.
    wait_for(
        lambda: s3_client.list_objects_v2(Bucket=bucket, Prefix=f"tmp/{job['id']}/").get("KeyCount"),
        lambda count: count == 0,
        PARTS_GONE_S,
        "the job's parts deleted",
    )
    # Each segment counted once: the done set has every index once and the audio sums add up.
    assert crash_redis.hlen(job_done_key(job["id"])) == total
    parts_audio_s = int(crash_redis.hget(job_stats_key(job["id"]), "audio_us") or 0) / 1e6
    assert parts_audio_s == pytest.approx(done["result"]["duration_s"], abs=2e-3)  # parts hold their pauses
    assert_assembled_in_order(
        download_pcm(client, job["id"]), expected_parts(voice, text, custom), custom.sentence_pause_s
    )


def test_a_failing_segment_fails_the_job_and_leaves_nothing_behind(
    client: httpx.Client, settings: Settings, s3_client: S3Client, redis_client: redis.Redis
) -> None:
    """A voice of the suite's folder fails inside the model on "θ" (tests/voices.py): the second
    segment of this text fails, between one made before it and one made while or after it runs."""
    text = f"{NEARLY_FULL} I think this one fails. {ALSO_NEARLY_FULL}"
    job = client.post("/v1/jobs", json={"text": text, "voice": BROKEN_VOICE_ID}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "synthesis_error"
    assert done["progress"]["segments_total"] == 3
    assert done["result"] is None
    assert s3_client.list_objects_v2(Bucket=settings.s3.bucket, Prefix=f"anonymous/jobs/{job['id']}/")["KeyCount"] == 0
    # The plan is dropped just after the failed status is written (which the API may show first);
    # segments still running when the job failed remove their own parts once they finish.
    parts_prefix = job_part_key(job["id"], 0, "").removesuffix("0:")
    wait_until(lambda: not redis_client.exists(job_segments_key(job["id"])), 30, "the plan dropped")
    wait_until(lambda: not redis_client.keys(f"{parts_prefix}*"), 30, "parts removed")
