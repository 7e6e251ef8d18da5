"""The GPU rows of the benchmark: the raw model limit on CUDA, one utterance a call and in batches,
beside the CPU of the same machine, in one process (no stack), so it runs on a lent GPU machine
that has only the synthesis library's wheels.

``python -m bench.gpu --out FILE``: the throughput corpus planned as workers plan it, then

* batch curve: the utterances in length order, ``size`` per call, for each batch size: seconds of
  audio per wall second and the median call time (a busy batcher groups items of like length);
* batch 1 in corpus order, on CUDA and on the CPU (all cores), as ``make bench``'s raw limit;
* how far a batched item is from the same item alone (noise scales 0): batching must not change audio.

Writes JSON with the machine; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from bench import corpus
from tts_core.base.config import SynthesisConfig
from tts_core.base.device import Device, Spinning
from tts_core.frontend.segments import group_segments, plan_utterances
from tts_core.voices.batching import DynamicBatcher
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.engines import engine_of
from tts_core.voices.runtime import CUDA_OPTIONS

BATCH_SIZES: Final = (1, 2, 4, 8, 16, 32, 64)
SEGMENT_MAX_IDS: Final = 400
"""As ``TTSQ_SEGMENT_MAX_IDS``' default: utterances as workers cut them."""


def planned_ids(texts: Sequence[str]) -> tuple[list[list[int]], Any]:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    front_end = engine_of(info).front_end(info)
    ids = [
        list(u.phoneme_ids)
        for text in texts
        for segment in group_segments(plan_utterances(text, front_end, SEGMENT_MAX_IDS), SEGMENT_MAX_IDS)
        for u in segment
    ]
    return ids, info


def load(info: Any, device: Device) -> Any:
    return engine_of(info).load(info, device, 0, Spinning.OFF)


def run(voice: Any, batches: Sequence[Sequence[list[int]]], config: SynthesisConfig) -> dict[str, Any]:
    """Every batch as one call, twice: the first pass meets every input shape for the first time (a
    CUDA session may search convolution algorithms per new shape), the second runs them again."""
    first = _pass(voice, batches, config)
    return {**_pass(voice, batches, config), "first_pass_wall_s": first["wall_s"]}


def _pass(voice: Any, batches: Sequence[Sequence[list[int]]], config: SynthesisConfig) -> dict[str, Any]:
    calls, samples = [], 0
    started = time.perf_counter()
    for batch in batches:
        call = time.perf_counter()
        audio = voice.synthesize_ids(batch, config)
        calls.append(time.perf_counter() - call)
        samples += sum(a.size for a in audio)
    wall = time.perf_counter() - started
    audio_s = samples / voice.sample_rate
    return {
        "calls": len(batches),
        "items": sum(map(len, batches)),
        "audio_s": round(audio_s, 1),
        "wall_s": round(wall, 3),
        "audio_per_wall": round(audio_s / wall, 1),
        "call_ms_p50": round(statistics.median(calls) * 1000, 2),
        "provider": voice.providers[0],
    }


def through_batcher(voice: Any, ids: list[list[int]], max_batch: int, clients: int) -> dict[str, Any]:
    """The worker's path: ``clients`` threads each hand their share of the utterances, one at a time,
    to one :class:`DynamicBatcher` (``max_wait_ms`` 10, as the CUDA default), which groups them by
    length into calls."""
    config = SynthesisConfig()
    batcher: DynamicBatcher[str] = DynamicBatcher(
        lambda _key, batch, _stop: voice.synthesize_ids(batch, config), max_batch, 10.0, name="bench-batcher"
    )
    shares = [ids[n::clients] for n in range(clients)]
    samples: list[int] = []

    def client(share: list[list[int]]) -> None:
        for item in share:
            samples.append(batcher.submit("voice", item).result().audio.size)

    try:
        batcher.run_all("voice", ids[:max_batch])  # warm-up
        threads = [threading.Thread(target=client, args=(share,)) for share in shares]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        records = batcher.records()[-len(ids) :]
    finally:
        batcher.close()
    audio_s = sum(samples) / voice.sample_rate
    sizes = [r.size for r in records]
    return {
        "max_batch": max_batch,
        "clients": clients,
        "audio_per_wall": round(audio_s / wall, 1),
        "mean_call_items": round(statistics.mean(sizes), 2) if sizes else None,
    }


def in_batches(ids: list[list[int]], size: int) -> list[list[list[int]]]:
    ordered = sorted(ids, key=len)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def batching_error(voice: Any, ids: list[list[int]]) -> dict[str, float]:
    """How far items synthesised together are from the same items alone (noise scales 0): the
    largest sample difference over their common length, and the largest length difference in
    samples (a duration rounded to the other side of a frame adds or drops one frame, 256 samples)."""
    quiet = SynthesisConfig(noise_scale=0.0, noise_w=0.0)
    batch = sorted(ids, key=len)[-8:]
    together = voice.synthesize_ids(batch, quiet)
    alone = [voice.synthesize_ids([item], quiet)[0] for item in batch]
    pairs = list(zip(together, alone, strict=True))
    return {
        "max_abs_sample": float(
            max(np.abs(a[: min(a.size, b.size)] - b[: min(a.size, b.size)]).max() for a, b in pairs)
        ),
        "max_length_samples": float(max(abs(a.size - b.size) for a, b in pairs)),
    }


def measure(quick: bool, out: Path, sizes: Sequence[int], cpu: bool) -> dict[str, Any]:
    """Each measure saved to ``out`` as soon as it is taken, and a line printed: a run cut short by
    its time limit keeps what it had."""
    texts = corpus.short_messages()[::2] + corpus.paragraphs()[::3]
    ids, info = planned_ids(texts[:16] if quick else texts)
    config = SynthesisConfig()
    result: dict[str, Any] = {"utterances": len(ids), "ids": sum(map(len, ids)), "cuda_options": CUDA_OPTIONS}

    def keep(name: str, value: Any) -> None:
        result[name] = value
        out.write_text(json.dumps(result, indent=1))
        print(f"{time.strftime('%H:%M:%S')} {name}: {json.dumps(value)[:300]}", flush=True)

    cuda = load(info, Device.CUDA)
    keep("cuda_batch1_corpus_order", run(cuda, [[item] for item in ids], config))
    keep("cuda_batches", {})
    for size in sizes:
        keep("cuda_batches", {**result["cuda_batches"], str(size): run(cuda, in_batches(ids, size), config)})
    keep("cuda_batching_error", batching_error(cuda, ids))
    keep("cuda_batcher", [through_batcher(cuda, ids, size, 64) for size in (1, 8, 32) if size in sizes or size == 1])
    if cpu:
        on_cpu = load(info, Device.CPU)
        keep("cpu_batching_error", batching_error(on_cpu, ids))
        keep("cpu_batch1_corpus_order", run(on_cpu, [[item] for item in ids], config))
        keep("cpu_cores", os.cpu_count())
    return result


def table(result: dict[str, Any]) -> str:
    base = result["cuda_batches"]["1"]["audio_per_wall"]
    rows = [("raw limit, CUDA, 1 utterance a call (corpus order)", result["cuda_batch1_corpus_order"])]
    if "cpu_cores" in result:
        rows.append((f"raw limit, CPU ({result['cpu_cores']} cores), 1 a call", result["cpu_batch1_corpus_order"]))
    lines = ["| measure | s audio/s | median call | first pass | vs CUDA batch 1 |", "|---|---|---|---|---|"]
    for name, row in rows:
        lines.append(f"| {name} | {row['audio_per_wall']} | {row['call_ms_p50']} ms | {row['first_pass_wall_s']} s | |")
    for size, row in result["cuda_batches"].items():
        ratio = row["audio_per_wall"] / base
        speed, call, first = row["audio_per_wall"], row["call_ms_p50"], row["first_pass_wall_s"]
        lines.append(f"| CUDA batch {size} (length order) | {speed} | {call} ms | {first} s | {ratio:.2f}x |")
    error = result["cuda_batching_error"]
    for row in result["cuda_batcher"]:
        name = f"CUDA worker batcher, max_batch {row['max_batch']}, {row['clients']} clients"
        lines.append(f"| {name} (mean call {row['mean_call_items']} items) | {row['audio_per_wall']} | | | |")
    lines.append(f"| batched vs alone: max sample difference | {error['max_abs_sample']:.2e} | | | |")
    lines.append(f"| batched vs alone: max length difference | {error['max_length_samples']:.0f} samples | | | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="16 texts instead of the corpus's 38")
    parser.add_argument("--sizes", default=",".join(map(str, BATCH_SIZES)), help="batch sizes, comma-separated")
    parser.add_argument("--no-cpu", action="store_true", help="leave the CPU rows out")
    parser.add_argument(
        "--cudnn-conv-algo-search", choices=["EXHAUSTIVE", "HEURISTIC", "DEFAULT"], help="the CUDA provider's option"
    )
    parser.add_argument("--tf32", action="store_true", help="let the CUDA provider use TF32 (ttsq turns it off)")
    args = parser.parse_args(argv)
    from bench.machine import describe  # here: it asks nvidia-smi about the GPUs

    if args.cudnn_conv_algo_search:
        CUDA_OPTIONS["cudnn_conv_algo_search"] = args.cudnn_conv_algo_search
    if args.tf32:
        CUDA_OPTIONS["use_tf32"] = "1"
    sizes = [int(size) for size in args.sizes.split(",")]
    result = {"machine": describe(), **measure(args.quick, args.out, sizes, not args.no_cpu)}
    args.out.write_text(json.dumps(result, indent=1))
    print(table(result))
    return result


if __name__ == "__main__":
    main()
