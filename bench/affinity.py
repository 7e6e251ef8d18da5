"""``affinity`` section: many voices on two workers, with voice affinity and without.

Twenty voices (the bundled Piper model under twenty ids, so each is a model of its own to the
workers), two workers of one inference thread each, a model budget of eight per worker. The same
mixed load runs twice from the same seed, with ``TTSQ_MODEL_AFFINITY`` on and off: an interactive
job a second (a short message, a voice drawn with Zipf-like popularity) and four bulk jobs in flight
at all times (a few paragraphs each, voices drawn the same way). Reported per run: model loads and
evictions of both workers (their metrics), interactive p50/p99 (submit to answer), and bulk
throughput (seconds of audio of the bulk jobs finished in the window per wall second).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import corpus
from bench.stack import BenchStack
from tts_core.voices.catalog import DEFAULT_VOICE_ID, bundled_voices
from ttsq.job_record import JobStatus

VOICES: Final = 20
BULK_IN_FLIGHT: Final = 4
MODELS_PER_WORKER: Final = 8
SEED: Final = 24


def voice_ids() -> list[str]:
    return [f"en_US-pool{n:02d}-medium" for n in range(VOICES)]


def write_voices(folder: Path) -> Path:
    """Twenty voice ids over the bundled model (symlinks), each its own model to a worker."""
    folder.mkdir(parents=True, exist_ok=True)
    model, config = bundled_voices()[DEFAULT_VOICE_ID]
    for voice in voice_ids():
        (folder / f"{voice}.onnx").symlink_to(model)
        (folder / f"{voice}.onnx.json").symlink_to(config)
    return folder


def affinity(root: Path, minutes: float) -> dict[str, Any]:
    """Both runs, affinity on first, each on a stack of its own (fresh Redis, fresh workers)."""
    voices = write_voices(root / "affinity-voices")
    runs = {}
    for label, on in (("with_affinity", True), ("without_affinity", False)):
        stack = BenchStack(root / f"affinity-{label}", voices_dir=voices, model_affinity=on)
        try:
            runs[label] = mixed_load(stack, minutes)
        finally:
            stack.close()
    with_, without = runs["with_affinity"], runs["without_affinity"]
    return {
        "voices": VOICES,
        "workers": 2,
        "minutes": minutes,
        **runs,
        "loads_ratio": with_["model_loads"] / without["model_loads"] if without["model_loads"] else None,
    }


def mixed_load(stack: BenchStack, minutes: float) -> dict[str, Any]:
    stack.start_workers(2, intra_op_threads=1, concurrency=2, max_loaded_models=MODELS_PER_WORKER)
    start_loads = worker_counter(stack, "ttsq_model_loads_total")
    rng = random.Random(SEED)
    voices = voice_ids()
    weights = [1 / (rank + 1) for rank in range(len(voices))]
    short, paragraphs = corpus.short_messages(), corpus.paragraphs()
    interactive: list[Future[float]] = []
    bulk: list[tuple[str, float]] = []
    lock = threading.Lock()
    started = time.monotonic()
    end = started + 60 * minutes
    with ThreadPoolExecutor(max_workers=16) as pool:
        tick = 0
        while time.monotonic() < end:
            time.sleep(max(0.0, started + tick - time.monotonic()))
            tick += 1
            voice = rng.choices(voices, weights)[0]
            interactive.append(pool.submit(answer_ms, stack.http, rng.choice(short), voice))
            with lock:
                running = sum(1 for job_id, _ in bulk if not finished(stack, job_id))
            for _ in range(BULK_IN_FLIGHT - running):
                text = " ".join(rng.sample(paragraphs, 3))
                job = stack.submit(text, voice=rng.choices(voices, weights)[0], priority="bulk")
                bulk.append((job.job_id, time.monotonic()))
        latencies = [f.result() for f in interactive]
    window = time.monotonic() - started
    loads = worker_counter(stack, "ttsq_model_loads_total") - start_loads
    evictions = worker_counter(stack, "ttsq_model_evictions_total")
    done = [stack.jobs.get(job_id) for job_id, _ in bulk]
    audio = sum(r.result.duration_s for r in done if r.status is JobStatus.SUCCEEDED and r.result is not None)
    ordered = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "model_loads": loads,
        "model_evictions": evictions,
        "interactive_jobs": len(latencies),
        "interactive_p50_ms": ordered[49],
        "interactive_p99_ms": ordered[98],
        "bulk_jobs_finished": sum(r.status is JobStatus.SUCCEEDED for r in done),
        "bulk_audio_per_wall": audio / window,
    }


def finished(stack: BenchStack, job_id: str) -> bool:
    return stack.jobs.get(job_id).status.terminal


def answer_ms(http: httpx.Client, text: str, voice: str) -> float:
    sent = time.monotonic()
    job = http.post("/v1/jobs", json={"text": text, "voice": voice, "priority": "interactive"}).json()
    done = job
    while not JobStatus(done["status"]).terminal:
        done = http.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
    if done["status"] != JobStatus.SUCCEEDED:
        raise RuntimeError(f"interactive job {job['id']} ended {done['status']}")
    return 1000 * (time.monotonic() - sent)


def worker_counter(stack: BenchStack, name: str) -> float:
    """A counter summed over every series and every running worker."""
    total = 0.0
    for port in stack.metrics_ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            total += sum(s.value for s in family.samples if s.name == name)
    return total


def affinity_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for label in ("with_affinity", "without_affinity"):
        run = result[label]
        rows.append(
            (
                f"{result['voices']} voices, 2 workers, {result['minutes']:g} min, {label.replace('_', ' ')}",
                f"{run['model_loads']:.0f} loads, {run['model_evictions']:.0f} evictions; interactive "
                f"p50/p99 {run['interactive_p50_ms']:.0f}/{run['interactive_p99_ms']:.0f} ms; bulk "
                f"{run['bulk_audio_per_wall']:.1f} s audio/s",
            )
        )
    return rows
