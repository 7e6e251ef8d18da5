"""``priority`` section: interactive latency on an idle worker, then on the same worker while a
half-hour bulk narration runs, and the bulk throughput of a narration with no interactive work; each
with the interactive slot and bulk preemption off (``before``) and on (``after``). The goals (issue
24): the loaded p99 within 1.5x the idle p99; bulk throughput alone at least 0.9x that without them."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import corpus
from bench.stack import BenchStack
from ttsq.job_record import JobStatus


def latency_percentiles(values: list[float]) -> dict[str, float]:
    ordered = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
    return {"p50": ordered[49], "p95": ordered[94], "p99": ordered[98]}


def interactive_round(stack: BenchStack, texts: list[str], more: Callable[[int], bool]) -> dict[str, Any]:
    """Short interactive jobs, one a second while ``more(jobs sent so far)``: submit, long-poll, and
    time both the server's finish (``finished_at`` minus the client's clock before the POST; same
    host) and the answer; with the jobs' own queue wait and model time, and their audio."""
    finished: list[float] = []
    answered: list[float] = []
    queued: list[float] = []
    synthesis: list[float] = []
    audio = 0.0
    start = time.monotonic()
    n = 0
    while more(n):
        time.sleep(max(0.0, start + n - time.monotonic()))
        submitted = time.time()
        body = {"text": texts[n % len(texts)], "priority": "interactive"}
        job = stack.http.post("/v1/jobs", json=body).json()
        done = stack.http.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
        answered.append(1000 * (time.time() - submitted))
        if done["status"] != JobStatus.SUCCEEDED or done["priority"] != "interactive":
            raise RuntimeError(f"interactive job {job['id']}: {done['status']} {done['priority']}")
        record = stack.jobs.get(job["id"])
        assert record.finished_at is not None
        assert record.result is not None
        finished.append(1000 * (record.finished_at.timestamp() - submitted))
        queued.append(float(record.progress.queued_ms or 0))
        synthesis.append(float(record.progress.synthesis_ms or 0))
        audio += record.result.duration_s
        n += 1
    return {"jobs": n, "finished_ms": latency_percentiles(finished), "answered_ms": latency_percentiles(answered),
            "queued_ms": latency_percentiles(queued), "synthesis_ms": latency_percentiles(synthesis),
            "audio_s": audio}  # fmt: skip


BULK_ALONE_CHARS = 8000
"""Characters of the narration timed alone (about 7 minutes of speech)."""


BULK_ALONE_RUNS = 2
"""Runs of the bulk job alone per round; the fastest counts (other load on a shared machine only
ever slows a run down)."""


def bulk_alone(stack: BenchStack) -> dict[str, Any]:
    """One bulk narration job on the idle worker, :data:`BULK_ALONE_RUNS` times: seconds of audio per
    second, submit to finish, of the fastest run, and every run's."""
    runs = []
    for _ in range(BULK_ALONE_RUNS):
        job = stack.submit(corpus.narration()[:BULK_ALONE_CHARS], priority="bulk")
        (record,) = stack.wait_all([job])
        assert record.result is not None
        assert record.finished_at is not None
        wall = record.finished_at.timestamp() - job.submitted_at
        runs.append(
            {"audio_s": record.result.duration_s, "wall_s": wall, "audio_s_per_s": record.result.duration_s / wall}
        )
    best = max(runs, key=lambda run: run["audio_s_per_s"])
    return {**best, "runs_audio_s_per_s": [run["audio_s_per_s"] for run in runs]}


MODES: dict[str, dict[str, bool]] = {
    "off": {"interactive_slot": False, "preempt_bulk": False},
    "slot": {"interactive_slot": True, "preempt_bulk": False},
    "preempt": {"interactive_slot": False, "preempt_bulk": True},
    "both": {"interactive_slot": True, "preempt_bulk": True},
}
"""The worker settings each round runs with: the interactive slot and bulk preemption, off, each
alone, and both; ``off`` is the reference for bulk throughput."""


def priority(
    stack: BenchStack, samples: int, narration_copies: int = 2, modes: Sequence[str] = tuple(MODES)
) -> dict[str, Any]:
    """:func:`priority_round` in each of ``modes`` (:data:`MODES`; ``off`` always, first), and each
    one's bulk throughput alone over that with both off."""
    chosen = ["off", *(mode for mode in modes if mode != "off")]
    rounds = {mode: priority_round(stack, samples, narration_copies, **MODES[mode]) for mode in chosen}
    reference = rounds["off"]["bulk_alone"]["audio_s_per_s"]
    for found in rounds.values():
        found["bulk_alone_over_off"] = found["bulk_alone"]["audio_s_per_s"] / reference
    return rounds


def priority_round(stack: BenchStack, samples: int, narration_copies: int, **worker: Any) -> dict[str, Any]:
    """Bulk throughput alone; an idle round; then the same texts while ``narration_copies`` x the
    ~17-minute narration runs as one bulk job on the same single worker (``worker``: its settings);
    the bulk job must still be running at the end, and is then canceled (its rest is not measured)."""
    stack.start_workers(1, **worker)
    alone = bulk_alone(stack)
    texts = corpus.short_messages()
    idle = interactive_round(stack, texts, lambda n: n < samples)
    narration = " ".join([corpus.narration()] * narration_copies)
    bulk = stack.submit(narration, priority="bulk")
    while stack.jobs.get(bulk.job_id).progress.segments_total is None:
        time.sleep(0.2)
    loaded = interactive_round(stack, texts, lambda n: n < samples)
    still = stack.jobs.get(bulk.job_id)
    if still.status is not JobStatus.RUNNING:
        raise RuntimeError(f"the bulk job was {still.status.value} before the loaded round ended: raise its size")
    progress = {
        "chars": len(narration),
        "segments_done_at_end": stack.segments_done(bulk.job_id),
        "segments_total": still.progress.segments_total,
    }
    stack.http.delete(f"/v1/jobs/{bulk.job_id}").raise_for_status()
    stack.stop_workers()
    stack.purge_queues()  # the canceled job's segments left would start the next round
    return {
        "worker": worker,
        "bulk_alone": alone,
        "idle": idle,
        "loaded": loaded,
        "bulk_job": progress,
        "p99_loaded_over_idle": loaded["finished_ms"]["p99"] / idle["finished_ms"]["p99"],
        "p50_loaded_over_idle": loaded["finished_ms"]["p50"] / idle["finished_ms"]["p50"],
    }
