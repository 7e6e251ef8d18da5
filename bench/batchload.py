"""``batchload`` section (``make bench-batch``): one batch of 10,000 short items on the worker ``make
bench`` runs (one process, its default task threads), while interactive jobs arrive at one a second.

Goals (issue 9): interactive p99 under the batch at most 2x its idle p99 (submit to the job's
``finished_at``, as the interactive and priority sections measure it); the batch's seconds of audio
per wall second, from just before its POST to its last item's ``finished_at``, at least 0.9x the raw
model limit on its own item texts. The raw limit runs on a sample of the items before the batch and
again after it (this shared machine drifts); the ratio is to the median of the two. The interactive
jobs take their share of the same model: the batch's audio and theirs together, over the batch's
wall time, is reported against the raw limit too.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any, Final

from bench import corpus
from bench.priority import interactive_round
from bench.stack import BenchStack
from ttsq.job_record import JobRecord, JobStatus
from ttsq.settings import Settings

ITEMS: Final = 10_000
IDLE_JOBS: Final = 60
"""Interactive jobs of the idle round: a minute at one a second."""
RAW_SAMPLE_EVERY: Final = 20
"""The raw limit runs on every 20th item's text: 500 of 10,000, about a minute of model time here."""
TEXT_SEED: Final = 9
S3_CHECKS: Final = 100
"""Items, spread over the batch, whose object is fetched from S3 at the end."""
POST_TIMEOUT_S: Final = 300.0
BATCH_TIMEOUT_S: Final = 3 * 3600.0

RawLimit = Callable[[list[str], Settings], dict[str, Any]]


def item_texts(count: int) -> list[str]:
    """``count`` item texts, each a message of ``bench/corpus/short.txt`` (one sentence, a few two)
    drawn at random (fixed seed): about 3 seconds of speech each."""
    messages = corpus.short_messages()
    rng = random.Random(TEXT_SEED)
    return [rng.choice(messages) for _ in range(count)]


def batch_load(stack: BenchStack, items: int, idle_jobs: int, raw_limit: RawLimit) -> dict[str, Any]:
    """Idle interactive round, raw limit, the batch with interactive jobs beside it, raw limit again."""
    stack.start_workers(1)
    interactive_texts = corpus.short_messages()
    idle = interactive_round(stack, interactive_texts, lambda n: n < idle_jobs)
    texts = item_texts(items)
    sample = texts[::RAW_SAMPLE_EVERY]
    raws = [raw_limit(sample, stack.settings())]
    batch_id, posted_at, post_ms = _post_batch(stack, texts)
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    started = time.monotonic()
    loaded = interactive_round(stack, interactive_texts, lambda _: not _batch_finished(stack, batch_id, deadline))
    loaded["rate_per_s"] = loaded["jobs"] / (time.monotonic() - started)
    batch = {"id": batch_id, "post_ms": post_ms, **_batch_figures(stack, batch_id, posted_at)}
    raws.append(raw_limit(sample, stack.settings()))
    raw = statistics.median(r["audio_per_wall"] for r in raws)
    return {
        "items": items,
        "idle": idle,
        "loaded": loaded,
        "raw": {"sample_items": len(sample), "audio_per_wall": raw, "runs": raws},
        "batch": batch,
        "throughput_over_raw": batch["audio_per_wall"] / raw,
        "with_interactive_over_raw": (batch["audio_s"] + loaded["audio_s"]) / batch["wall_s"] / raw,
        "p99_loaded_over_idle": loaded["finished_ms"]["p99"] / idle["finished_ms"]["p99"],
        "p50_loaded_over_idle": loaded["finished_ms"]["p50"] / idle["finished_ms"]["p50"],
    }


def _post_batch(stack: BenchStack, texts: list[str]) -> tuple[str, float, float]:
    """The batch's id, the client's clock just before its POST, and the POST's latency in ms."""
    body = {"items": [{"text": text} for text in texts]}
    posted_at = time.time()
    started = time.perf_counter()
    response = stack.http.post("/v1/batches", json=body, timeout=POST_TIMEOUT_S)
    post_ms = 1000 * (time.perf_counter() - started)
    if response.status_code != 202:
        raise RuntimeError(f"batch of {len(texts)} items: {response.status_code} {response.text[:500]}")
    return response.json()["id"], posted_at, post_ms


def _batch_finished(stack: BenchStack, batch_id: str, deadline: float) -> bool:
    counts = stack.batch_store.counts(batch_id)
    if counts.finished >= counts.total:
        return True
    if time.monotonic() > deadline:
        raise TimeoutError(f"batch {batch_id}: {counts.finished} of {counts.total} items finished at the deadline")
    return False


def _batch_figures(stack: BenchStack, batch_id: str, posted_at: float) -> dict[str, Any]:
    """Audio and wall time of the finished batch; fails loudly on an item that did not succeed."""
    records: list[JobRecord] = []
    for job_id, record in stack.batch_store.all_items(batch_id, stack.jobs):
        if record is None or record.status is not JobStatus.SUCCEEDED or record.result is None:
            raise RuntimeError(f"batch {batch_id}: item {job_id} ended {record and record.status.value}")
        records.append(record)
    for record in records[:: max(1, len(records) // S3_CHECKS)]:
        assert record.result is not None
        if stack.objects.get(record.result.key) is None:
            raise RuntimeError(f"item {record.id} succeeded but {record.result.key} is missing")
    finished = [r.finished_at.timestamp() for r in records if r.finished_at]
    audio = sum(r.result.duration_s for r in records if r.result)
    wall = max(finished) - posted_at
    return {"items": len(records), "characters": sum(r.characters for r in records), "audio_s": audio,
            "wall_s": wall, "audio_per_wall": audio / wall, "first_item_s": min(finished) - posted_at,
            "segments": sum(r.progress.segments_total or 0 for r in records)}  # fmt: skip


def _split(idle: dict[str, Any], loaded: dict[str, Any]) -> str:
    waits = f"{idle['queued_ms']['p50']:.0f} -> {loaded['queued_ms']['p50']:.0f} ms"
    return f"{waits} / {idle['synthesis_ms']['p50']:.0f} -> {loaded['synthesis_ms']['p50']:.0f} ms"


def batch_load_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the batchload section."""
    idle, loaded = result["idle"], result["loaded"]
    batch, raw = result["batch"], result["raw"]
    spread = "{p50:.0f} / {p95:.0f} / {p99:.0f} ms"
    label = f"batch of {batch['items']} items ({batch['audio_s'] / 60:.0f} min of audio)"
    return [
        (f"interactive idle, {idle['jobs']} jobs: p50 / p95 / p99", spread.format(**idle["finished_ms"])),
        (f"{label}: POST latency", f"{batch['post_ms']:.0f} ms"),
        (f"interactive beside it, {loaded['jobs']} jobs: p50 / p95 / p99", spread.format(**loaded["finished_ms"])),
        ("of which queue wait / model time, p50 idle -> beside it", _split(idle, loaded)),
        ("loaded p99 / idle p99 (goal <= 2x)", f"**{result['p99_loaded_over_idle']:.2f}x**"),
        (
            f"raw model limit on {raw['sample_items']} of the items (median of before and after)",
            f"{raw['audio_per_wall']:.1f} s audio/s",
        ),
        (f"{label}: POST to last item", f"{batch['wall_s']:.0f} s, {batch['audio_per_wall']:.1f} s audio/s"),
        ("batch throughput / raw (goal >= 0.9x)", f"**{result['throughput_over_raw']:.2f}x**"),
        ("batch and interactive audio over the batch's wall time / raw", f"{result['with_interactive_over_raw']:.2f}x"),
    ]
