"""What the output formats cost: encoding time per minute of speech for each format (one process,
the default voice's real speech), and the throughput corpus end to end in ``opus`` against ``wav``,
alternately, each as a share of the raw model limit measured beside it."""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.stack import BenchStack
from tts_core.base.audio import PCM16, to_int16
from tts_core.base.config import SynthesisConfig
from tts_core.frontend.segments import plan_utterances
from tts_core.mastering.encoding import encode_stream
from tts_core.mastering.formats import AudioFormat, AudioOutput
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.engines import engine_of
from tts_core.voices.runtime import resolve_device
from ttsq.settings import Settings

RawLimit = Callable[[list[str], Settings], dict[str, Any]]
EndToEnd = Callable[..., dict[str, Any]]
PART_S = 10.0
"""Encoded as the assembly does: parts of about a segment's length, one after another."""


def speech_minute(texts: list[str], settings: Settings) -> tuple[PCM16, int]:
    """About a minute of the default voice's speech (the corpus's first utterances, synthesised)."""
    info = VoiceCatalog.discover().get(settings.default_voice)
    engine = engine_of(info)
    worker = settings.worker
    voice = engine.load(info, resolve_device(worker.device), worker.intra_op_threads, worker.spinning)
    front_end = engine.front_end(info)
    pieces: list[np.ndarray] = []
    seconds = 0.0
    for utterance in (u for text in texts for u in plan_utterances(text, front_end, settings.segment_max_ids)):
        audio = voice.synthesize_ids([utterance.phoneme_ids], SynthesisConfig())[0]
        pieces.append(audio)
        seconds += audio.size / info.sample_rate
        if seconds >= 60:
            break
    return to_int16(np.concatenate(pieces)), info.sample_rate


def encoding_costs(pcm: PCM16, rate: int, rounds: int) -> dict[str, Any]:
    """Median milliseconds to encode a minute of speech, per format (and at 8 and 48 kHz for the
    resampled cases), the parts written one after another into a file in memory."""
    step = int(PART_S * rate)
    minutes = pcm.size / rate / 60
    outputs = [AudioOutput(f) for f in AudioFormat] + [
        AudioOutput(AudioFormat.WAV, sample_rate=48000),
        AudioOutput(AudioFormat.OPUS, sample_rate=48000),
    ]
    costs: dict[str, Any] = {}
    for output in outputs:
        times, size = [], 0
        for _ in range(rounds):
            sink = io.BytesIO()
            start = time.perf_counter()
            encode_stream((pcm[i : i + step] for i in range(0, pcm.size, step)), 0.0, rate, output, sink)
            times.append(time.perf_counter() - start)
            size = len(sink.getvalue())  # not tell(): FLAC and MP4 seek back to patch their headers
        name = output.format.value + (f"@{output.sample_rate}" if output.sample_rate else "")
        costs[name] = {
            "ms_per_audio_minute": 1000 * statistics.median(times) / minutes,
            "bytes_per_audio_minute": size / minutes,
            "rate": output.rate_for(rate),
        }
    return {"audio_s": pcm.size / rate, "rounds": rounds, "formats": costs}


def formats(
    stack: BenchStack, texts: list[str], quick: bool, raw_limit: RawLimit, end_to_end: EndToEnd
) -> dict[str, Any]:
    settings = stack.settings()
    pcm, rate = speech_minute(texts, settings)
    costs = encoding_costs(pcm, rate, 3 if quick else 7)
    ratios: dict[str, list[float]] = {"wav": [], "opus": []}
    for _ in range(1 if quick else 2):
        raw = raw_limit(texts, settings)["audio_per_wall"]
        for name in ratios:
            ratios[name].append(end_to_end(stack, texts, format=name)["audio_per_wall"] / raw)
    return {"encoding": costs, "e2e_ratio_to_raw": {k: statistics.median(v) for k, v in ratios.items()},
            "e2e_ratios": ratios}  # fmt: skip


def formats_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    costs = result["encoding"]["formats"]
    listed = ", ".join(f"{name} {c['ms_per_audio_minute']:.0f}" for name, c in costs.items())
    ratio = result["e2e_ratio_to_raw"]
    return [
        ("encoding, ms per minute of speech", listed),
        ("end-to-end / raw, opus vs wav", f"**{ratio['opus']:.0%}** vs {ratio['wav']:.0%}"),
    ]
