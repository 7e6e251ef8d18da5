"""``models`` section: what a worker pays for its voices.

* Memory and first jobs: one worker speaks a short sentence with each of the five Japanese voices in
  turn: its resident memory after each, and each voice's first job (submit to succeeded), so a voice
  that loads a model shows its cold start.
* A cold load beside interactive work: short English interactive jobs at a steady rate on a fresh
  worker, and a Japanese job whose voice the worker has not loaded, sent a few seconds in; the English
  jobs' latency while that job runs against the same worker's latency with no Japanese job, and
  against a worker that preloaded the voice running the same Japanese job (what the load itself
  adds, apart from the Japanese synthesis that shares the two cores in any case).
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from bench import corpus
from bench.stack import BenchStack
from ttsq.job_record import JobStatus

JAPANESE_VOICES: Final = (
    "ja_JP-kokoro-jf_alpha",
    "ja_JP-kokoro-jf_gongitsune",
    "ja_JP-kokoro-jf_nezumi",
    "ja_JP-kokoro-jf_tebukuro",
    "ja_JP-kokoro-jm_kumo",
)
JAPANESE_TEXT: Final = "今日は良い天気ですね。"
MIB: Final = 2**20
ENGLISH_RATE_S: Final = 0.5
"""One interactive English job every half second."""


def models(stack: BenchStack, quick: bool) -> dict[str, Any]:
    return {
        "japanese_voices": japanese_voices(stack),
        "cold_load": cold_load(stack, rounds=1 if quick else 3),
    }


def japanese_voices(stack: BenchStack) -> dict[str, Any]:
    """RSS and first-job time, voice after voice, on one fresh worker (English voice loaded)."""
    stack.start_workers()
    time.sleep(2)  # let the start-up settle before the first reading
    start_rss = stack.worker_rss_bytes()
    steps: list[dict[str, Any]] = []
    for voice in JAPANESE_VOICES:
        first = timed_job(stack, JAPANESE_TEXT, voice)
        second = timed_job(stack, JAPANESE_TEXT, voice)
        steps.append({"voice": voice, "first_job_s": first, "second_job_s": second, "rss_mib": rss_mib(stack)})
    after_first: float = steps[0]["rss_mib"]
    return {
        "start_rss_mib": start_rss / MIB,
        "steps": steps,
        "further_voices_added_mib": steps[-1]["rss_mib"] - after_first,
        "further_first_job_s": [s["first_job_s"] for s in steps[1:]],
    }


def cold_load(stack: BenchStack, rounds: int) -> dict[str, Any]:
    """English interactive latency on a fresh worker without a load, then with a Japanese cold load
    sent 3 s in; ``rounds`` fresh workers, latencies pooled."""
    texts = corpus.short_messages()
    idle: list[float] = []
    during: list[float] = []
    during_warm: list[float] = []
    load_s: list[float] = []
    warm_s: list[float] = []
    for _ in range(rounds):
        stack.start_workers()
        idle += [ms for _, ms in english_stream(stack, texts, 20, None)]
        stack.start_workers()
        during += _during_japanese(stack, texts, load_s)
        stack.start_workers(preload_voices=[JAPANESE_VOICES[0]])
        during_warm += _during_japanese(stack, texts, warm_s)
    return {
        "idle": percentiles(idle),
        "during_load": percentiles(during),
        "during_warm_job": percentiles(during_warm),
        "p99_ratio": percentiles(during)["p99"] / percentiles(idle)["p99"],
        "p99_ratio_vs_warm_job": percentiles(during)["p99"] / percentiles(during_warm)["p99"],
        "japanese_first_job_s": load_s,
        "japanese_warm_job_s": warm_s,
    }


def _during_japanese(stack: BenchStack, texts: list[str], job_s: list[float]) -> list[float]:
    """English latencies (ms) of the jobs sent while the Japanese job ran; its duration to ``job_s``."""
    window: dict[str, float] = {}
    results = english_stream(stack, texts, 20, window)
    job_s.append(window["end"] - window["start"])
    return [ms for sent, ms in results if window["start"] <= sent <= window["end"]]


def english_stream(
    stack: BenchStack, texts: list[str], jobs: int, load: dict[str, float] | None
) -> list[tuple[float, float]]:
    """``jobs`` interactive English jobs, one every :data:`ENGLISH_RATE_S`, each waited for on its own
    thread: (sent at, submit-to-answer ms). With ``load``, a Japanese job is sent 3 s in, and its send
    and finish times are written there."""
    start = time.monotonic()
    loader: threading.Thread | None = None
    if load is not None:

        def cold() -> None:
            time.sleep(3)
            load["start"] = time.monotonic()
            timed_job(stack, JAPANESE_TEXT, JAPANESE_VOICES[0])
            load["end"] = time.monotonic()

        loader = threading.Thread(target=cold)
        loader.start()
    futures: list[Future[tuple[float, float]]] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        for n in range(jobs):
            time.sleep(max(0.0, start + n * ENGLISH_RATE_S - time.monotonic()))
            futures.append(pool.submit(answer_ms, stack, texts[n % len(texts)]))
        results = [f.result() for f in futures]
    if loader is not None:
        loader.join()
    return results


def answer_ms(stack: BenchStack, text: str) -> tuple[float, float]:
    sent = time.monotonic()
    job = stack.http.post("/v1/jobs", json={"text": text, "priority": "interactive"}).json()
    done = stack.http.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
    if done["status"] != JobStatus.SUCCEEDED:
        raise RuntimeError(f"job {job['id']} ended {done['status']}")
    return sent, 1000 * (time.monotonic() - sent)


def timed_job(stack: BenchStack, text: str, voice: str) -> float:
    """Seconds from submit to succeeded, by the client's clock (long poll)."""
    sent = time.monotonic()
    response = stack.http.post("/v1/jobs", json={"text": text, "voice": voice, "priority": "interactive"})
    response.raise_for_status()
    job = response.json()
    done = job
    while not JobStatus(done["status"]).terminal:
        done = stack.http.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
    if done["status"] != JobStatus.SUCCEEDED:
        raise RuntimeError(f"job {job['id']} ({voice}) ended {done['status']}")
    return time.monotonic() - sent


def rss_mib(stack: BenchStack) -> float:
    return stack.worker_rss_bytes() / MIB


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": ordered[49], "p99": ordered[98], "n": len(values)}


def models_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    voices, cold = result["japanese_voices"], result["cold_load"]
    firsts = ", ".join(f"{s:.2f}" for s in voices["further_first_job_s"])
    return [
        ("RSS added by four further Japanese voices", f"{voices['further_voices_added_mib']:+.0f} MiB"),
        ("First job of each further Japanese voice", f"{firsts} s"),
        (
            "English interactive p99 during a Japanese cold load / without",
            f"{cold['during_load']['p99']:.0f} / {cold['idle']['p99']:.0f} ms = **{cold['p99_ratio']:.2f}x**",
        ),
        (
            "English interactive p99 during a Japanese cold load / during the same job, voice preloaded",
            f"{cold['during_load']['p99']:.0f} / {cold['during_warm_job']['p99']:.0f} ms"
            f" = **{cold['p99_ratio_vs_warm_job']:.2f}x**",
        ),
    ]
