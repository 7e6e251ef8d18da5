"""``japanese`` section: the raw model limit and the whole pipeline for a Japanese (Kokoro) voice on
the Japanese corpus, in alternating rounds, as the throughput section does for English."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, Final

from bench import corpus
from bench.stack import BenchStack
from ttsq.settings import Settings

VOICE: Final = "ja_JP-kokoro-jf_alpha"

RawLimit = Callable[[list[str], Settings, str | None], dict[str, Any]]
EndToEnd = Callable[[BenchStack, list[str], str | None], dict[str, Any]]


def japanese_corpus(quick: bool) -> list[str]:
    short, long = corpus.ja_short(), corpus.ja_paragraphs()
    return short[:8] + long[:3] if quick else short[::2] + long


def japanese(stack: BenchStack, quick: bool, raw_limit: RawLimit, end_to_end: EndToEnd) -> dict[str, Any]:
    """Raw and end to end alternately (one round quick, two otherwise), with the runner's measures."""
    texts = japanese_corpus(quick)
    raws, e2es = [], []
    for _ in range(1 if quick else 2):
        raws.append(raw_limit(texts, stack.settings(), VOICE))
        e2es.append(end_to_end(stack, texts, VOICE))
    ratios = [e["audio_per_wall"] / r["audio_per_wall"] for r, e in zip(raws, e2es, strict=True)]
    return {
        "voice": VOICE,
        "raw": {"audio_per_wall": statistics.median(r["audio_per_wall"] for r in raws), "runs": raws},
        "e2e": {"audio_per_wall": statistics.median(e["audio_per_wall"] for e in e2es), "runs": e2es},
        "ratio_to_raw": statistics.median(ratios),
        "ratios": ratios,
    }


def japanese_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    raw, e2e = result["raw"], result["e2e"]
    first = e2e["runs"][0]
    return [
        (f"Japanese ({result['voice']}): raw model limit", f"{raw['audio_per_wall']:.1f} s audio/s"),
        (
            f"Japanese end-to-end ({first['jobs']} jobs, {first['audio_s'] / 60:.0f} min)",
            f"{e2e['audio_per_wall']:.1f} s audio/s = **{result['ratio_to_raw']:.0%}** of raw",
        ),
    ]
