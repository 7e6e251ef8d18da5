"""``make bench-long``: one job of 1,000,000 characters (``--chars``) through the whole stack.

The text is ``bench/corpus/pride_and_prejudice.txt`` (three chapters, 18,700 characters) repeated,
a blank line between copies, and cut at a word boundary to the size asked: a book's worth of
prose that the default English voice reads as any other.

Measured while the job runs, every half second:

* the API process: its RSS before the request and its high-water mark (``VmHWM``) after it;
* the worker (one, default settings): RSS and high-water mark of its processes, during synthesis
  and during assembly (from the moment every segment is done until the job succeeded);
* Redis: ``used_memory`` minus its value before the job, and, every few seconds, the bytes the
  job's own keys (text, plan, parts, done set) and the broker's queues hold (``MEMORY USAGE``);
* wall time from the POST to ``finished_at``, against the raw model limit measured here first on
  the first ``--sample-chars`` of the same text (``bench.run.raw_limit``).

Then, with the worker stopped, the API's peak (``VmHWM``, reset before each) for the largest bodies
the limits admit: the longest text with every character but one an emoji escaped as ``\\uXXXX``
pairs (12 bytes each), and an SSML document of ten times the characters with as many tags as it may
have (parsed whole, then refused for its spoken length).

Writes ``bench/results/<stamp>-long-<chars>.json`` and prints a table. Run it under
``flock /tmp/ttsq-bench.lock`` (the make target does) so that no other bench shares the machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import psutil
import redis

from api.submission import MIN_SSML_TAGS, SSML_CHARS_PER_TAG, SSML_MARKUP_FACTOR
from bench.corpus import book_text
from bench.machine import describe
from bench.run import RESULTS, raw_limit
from bench.stack import BenchStack
from ttsq.constants import KEY_PREFIX, consumed_queues
from ttsq.job_record import JobRecord, JobStatus

SAMPLE_S = 0.5
KEYS_EVERY = 10
"""Per-key footprints are read every this many samples (a SCAN and a MEMORY USAGE per key)."""
BROKER_KEYS = ("unacked", "unacked_index")
"""Kombu's Redis transport: messages delivered and not yet acknowledged."""
MIB = 2**20


def status_kib(pid: int, field_name: str) -> int:
    """A ``/proc/<pid>/status`` line in KiB (``VmRSS``, ``VmHWM``); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    except FileNotFoundError:
        return 0
    return 0


def reset_hwm(pid: int) -> None:
    """Restart the process's high-water mark at its current RSS (``clear_refs``, Linux 4.0+)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def worst_bodies(stack: BenchStack) -> dict[str, Any]:
    """The API's peak for each of the largest bodies its limits admit, its workers stopped."""
    stack.stop_workers()
    chars = stack.base.max_text_chars
    escaped = json.dumps({"text": "A" + "\U0001f600" * (chars - 1)}).encode("ascii")
    tags = max(chars // SSML_CHARS_PER_TAG, MIN_SSML_TAGS)
    sentence = "<s>" + "a" * (SSML_MARKUP_FACTOR * chars // (tags // 2) - 7) + "</s>"
    ssml = json.dumps({"text": "<speak>" + sentence * (tags // 2 - 1) + "</speak>", "text_type": "ssml"}).encode()
    results = {}
    for name, body in (("escaped_text", escaped), ("ssml", ssml)):
        reset_hwm(stack.api.pid)
        before = status_kib(stack.api.pid, "VmRSS")
        started = time.perf_counter()
        response = stack.http.post("/v1/jobs", content=body, headers={"content-type": "application/json"}, timeout=300)
        results[name] = {"body_bytes": len(body), "status": response.status_code,
                         "code": response.json().get("error", {}).get("code") if response.status_code >= 400 else None,
                         "seconds": time.perf_counter() - started, "rss_before_mib": before / 1024,
                         "hwm_mib": status_kib(stack.api.pid, "VmHWM") / 1024}  # fmt: skip
    return results


def process_tree(pid: int) -> list[int]:
    root = psutil.Process(pid)
    return [root.pid, *(p.pid for p in root.children(recursive=True))]


@dataclass
class Peaks:
    """Highest values seen so far, by phase."""

    api_rss_kib: int = 0
    worker_rss_kib: dict[str, int] = field(default_factory=lambda: {"synthesis": 0, "assembly": 0})
    redis_used: int = 0
    job_keys_bytes: int = 0
    broker_keys_bytes: int = 0
    largest_key: tuple[str, int] = ("", 0)
    samples: list[dict[str, float]] = field(default_factory=list)


class Sampler:
    """Polls the processes and Redis in a thread while the job runs."""

    def __init__(self, stack: BenchStack, client: redis.Redis, queue: str, live: TextIO) -> None:
        self.stack = stack
        self.live = live
        """Every sample as a JSON line as it is taken, so a run cut short still has its figures."""
        self.client = client
        self.queue = queue
        self.job_id: str | None = None
        self.phase = "synthesis"
        self.peaks = Peaks()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        count = 0
        while not self._done.wait(SAMPLE_S):
            self.sample(keys=count % KEYS_EVERY == 0)
            count += 1

    def sample(self, keys: bool) -> None:
        peaks = self.peaks
        api = status_kib(self.stack.api.pid, "VmRSS")
        worker = sum(status_kib(pid, "VmRSS") for w in self.stack.workers for pid in process_tree(w.pid))
        used = int(self.client.info("memory")["used_memory"])
        peaks.api_rss_kib = max(peaks.api_rss_kib, api)
        peaks.worker_rss_kib[self.phase] = max(peaks.worker_rss_kib[self.phase], worker)
        peaks.redis_used = max(peaks.redis_used, used)
        row = {"t": round(time.monotonic() - self.started, 1), "api_mib": round(api / 1024, 1),
               "worker_mib": round(worker / 1024, 1), "redis_used_mib": round(used / MIB, 2)}  # fmt: skip
        if keys and self.job_id is not None:
            job_bytes, largest = self.footprint(f"{KEY_PREFIX}:job:{self.job_id}*")
            broker = sum(self.memory_usage(k) for k in [*consumed_queues(self.queue), *BROKER_KEYS])
            peaks.job_keys_bytes = max(peaks.job_keys_bytes, job_bytes)
            peaks.broker_keys_bytes = max(peaks.broker_keys_bytes, broker)
            if largest[1] > peaks.largest_key[1]:
                peaks.largest_key = largest
            row |= {"job_keys_mib": round(job_bytes / MIB, 2), "broker_keys_mib": round(broker / MIB, 2)}
        peaks.samples.append(row)
        self.note({**row, "phase": self.phase})

    def note(self, row: dict[str, Any]) -> None:
        self.live.write(json.dumps(row) + "\n")
        self.live.flush()

    def memory_usage(self, key: str) -> int:
        return int(self.client.memory_usage(key, samples=0) or 0)

    def footprint(self, pattern: str) -> tuple[int, tuple[str, int]]:
        """Bytes of every key matching ``pattern``, and the largest of them."""
        total, largest = 0, ("", 0)
        for raw in self.client.scan_iter(match=pattern, count=1000):
            key = raw.decode()
            size = self.memory_usage(key)
            total += size
            if size > largest[1]:
                largest = (key.replace(self.job_id or "", "<job>"), size)
        return total, largest


def wait_finished(stack: BenchStack, sampler: Sampler, job_id: str, timeout_s: float) -> tuple[JobRecord, float]:
    """Poll the job until it finished; switch the sampler to ``assembly`` once every segment is done.
    Returns the record and when (seconds after the POST) the plan was stored."""
    deadline = time.monotonic() + timeout_s
    planned_after = 0.0
    started = time.monotonic()
    while True:
        record = stack.jobs.get(job_id)
        total = record.progress.segments_total
        if total and not planned_after:
            planned_after = time.monotonic() - started
        if record.status.terminal:
            return record, planned_after
        if total and sampler.phase == "synthesis" and stack.segments_done(job_id) >= total:
            sampler.phase = "assembly"
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} unfinished after {timeout_s:.0f} s")
        time.sleep(SAMPLE_S)


def long_book(stack: BenchStack, chars: int, sample_chars: int, timeout_s: float, live: TextIO) -> dict[str, Any]:
    text = book_text(chars)
    settings = stack.start_workers(1)
    raw = raw_limit([book_text(min(sample_chars, chars))], settings)
    client = redis.Redis.from_url(stack.base.redis_url)
    worker_pids = [pid for w in stack.workers for pid in process_tree(w.pid)]
    baseline = {
        "api_rss_kib": status_kib(stack.api.pid, "VmRSS"),
        "api_hwm_kib": status_kib(stack.api.pid, "VmHWM"),
        "worker_rss_kib": sum(status_kib(pid, "VmRSS") for pid in worker_pids),
        "redis_used": int(client.info("memory")["used_memory"]),
    }
    live.write(json.dumps({"event": "baseline", "raw_audio_per_wall": raw["audio_per_wall"], **baseline}) + "\n")
    with Sampler(stack, client, settings.queue, live) as sampler:
        posted = time.time()
        response = stack.http.post("/v1/jobs", json={"text": text}, timeout=300)
        post_s = time.time() - posted
        response.raise_for_status()
        job_id = response.json()["id"]
        sampler.job_id = job_id
        api_hwm_after_post = status_kib(stack.api.pid, "VmHWM")
        sampler.note({"event": "posted", "job_id": job_id, "post_s": post_s, "api_hwm_kib": api_hwm_after_post})
        record, planned_after = wait_finished(stack, sampler, job_id, timeout_s)
    sampler.sample(keys=True)
    worker_hwm = sum(status_kib(pid, "VmHWM") for pid in worker_pids)
    client.close()
    if record.status is not JobStatus.SUCCEEDED or record.result is None or record.finished_at is None:
        raise RuntimeError(f"job {job_id} ended {record.status.value}: {record.error}")
    if stack.objects.list_keys(record.result.key) != [record.result.key]:
        raise RuntimeError(f"job {job_id} succeeded but {record.result.key} is missing")
    wall = record.finished_at.timestamp() - posted
    audio = record.result.duration_s
    peaks = sampler.peaks
    return {
        "characters": len(text), "text": "bench/corpus/pride_and_prejudice.txt repeated, blank line between copies",
        "segments": record.progress.segments_total, "audio_s": audio, "object_bytes": record.result.bytes,
        "format": record.format, "wall_s": wall, "post_s": post_s, "planned_after_s": planned_after,
        "audio_per_wall": audio / wall, "raw": raw, "ratio_to_raw": audio / wall / raw["audio_per_wall"],
        "api": {"rss_before_mib": baseline["api_rss_kib"] / 1024, "hwm_before_mib": baseline["api_hwm_kib"] / 1024,
                "hwm_after_post_mib": api_hwm_after_post / 1024, "rss_peak_sampled_mib": peaks.api_rss_kib / 1024},
        "worker": {"rss_before_mib": baseline["worker_rss_kib"] / 1024,
                   "rss_peak_synthesis_mib": peaks.worker_rss_kib["synthesis"] / 1024,
                   "rss_peak_assembly_mib": peaks.worker_rss_kib["assembly"] / 1024,
                   "hwm_end_mib": worker_hwm / 1024, "processes": len(worker_pids)},
        "redis": {"used_before_mib": baseline["redis_used"] / MIB,
                  "peak_over_baseline_mib": (peaks.redis_used - baseline["redis_used"]) / MIB,
                  "job_keys_peak_mib": peaks.job_keys_bytes / MIB,
                  "broker_keys_peak_mib": peaks.broker_keys_bytes / MIB,
                  "largest_job_key": {"key": peaks.largest_key[0], "mib": peaks.largest_key[1] / MIB},
                  "part_redis_max_bytes_per_job": settings.part_redis_max_bytes_per_job},
        "api_worst_bodies": _measured(lambda: worst_bodies(stack)),
        "samples": peaks.samples,
    }  # fmt: skip


def _measured(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """An extra measurement that must not cost the hour-long run before it if it fails."""
    try:
        return measure()
    except Exception as e:  # recorded in the results instead
        return {"error": repr(e)}


def table(result: dict[str, Any]) -> str:
    m, r = result["machine"], result["long_book"]
    api, worker, red = r["api"], r["worker"], r["redis"]
    rows = [
        ("machine", f"{m['cpu_model']}, {m['cores']} cores, {m['memory_gib']} GiB, GPU: {m['gpus'] or 'none'}"),
        ("job", f"{r['characters']:,} characters, {r['segments']:,} segments, {r['audio_s'] / 3600:.2f} h of "
                f"{r['format']} ({r['object_bytes'] / MIB:,.0f} MiB)"),
        ("API RSS: before / high-water after the POST (goal < 400 MB)",
         f"{api['rss_before_mib']:.0f} / **{api['hwm_after_post_mib']:.0f} MiB** (POST took {r['post_s']:.1f} s)"),
        ("worker RSS: before / peak synthesising / peak assembling (goal < 400 MB)",
         f"{worker['rss_before_mib']:.0f} / {worker['rss_peak_synthesis_mib']:.0f} / "
         f"**{worker['rss_peak_assembly_mib']:.0f} MiB** (high-water {worker['hwm_end_mib']:.0f})"),
        ("Redis used_memory over baseline, peak (goal < 64 MiB)", f"**{red['peak_over_baseline_mib']:.1f} MiB**"),
        ("Redis: the job's keys / the broker's queues, peak",
         f"{red['job_keys_peak_mib']:.1f} / {red['broker_keys_peak_mib']:.1f} MiB "
         f"(largest key {red['largest_job_key']['key']}: {red['largest_job_key']['mib']:.1f} MiB)"),
        *((f"API peak for the largest {name.replace('_', ' ')} body ({w['body_bytes'] / MIB:.1f} MiB)",
           f"{w['rss_before_mib']:.0f} -> **{w['hwm_mib']:.0f} MiB**, answered {w['status']} {w['code'] or ''} "
           f"in {w['seconds']:.1f} s") for name, w in r["api_worst_bodies"].items() if "error" not in w),
        ("plan stored after", f"{r['planned_after_s']:.1f} s"),
        ("raw model limit (first chars of the same text)",
         f"{r['raw']['audio_per_wall']:.1f} s audio/s over {r['raw']['audio_s']:.0f} s of audio"),
        ("wall time, POST to finished", f"{r['wall_s']:.0f} s = {r['audio_per_wall']:.1f} s audio/s = "
                                        f"**{r['ratio_to_raw']:.0%}** of raw"),
    ]  # fmt: skip
    return "\n".join(["| Measure | Result |", "|---|---|", *(f"| {label} | {value} |" for label, value in rows)])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=1_000_000, help="characters of the job (default 1,000,000)")
    parser.add_argument("--sample-chars", type=int, default=10_000, help="characters timed for the raw limit")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds to wait for the job")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(), "machine": describe(),
                              "command": f"make bench-long (--chars {args.chars})"}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"{stamp}-long-{args.chars}.json"
    with (
        tempfile.TemporaryDirectory(prefix="ttsq-bench-long-") as root,
        out.with_suffix(".live.jsonl").open("w") as live,
    ):
        print(f"samples as they come: {live.name}", flush=True)
        stack = BenchStack(Path(root))
        try:
            result["long_book"] = long_book(stack, args.chars, args.sample_chars, args.timeout, live)
        finally:
            stack.close()
    result["finished_at"] = datetime.now(UTC).isoformat()
    out.write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    print(f"\nwritten to {out}")
    return result


if __name__ == "__main__":
    main()
