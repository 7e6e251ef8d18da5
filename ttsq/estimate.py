"""How much audio a text will make, without loading the synthesis stack.

The API charges a job's audio seconds to its tenant's day before any phoneme exists (espeak-ng and
onnxruntime stay out of the API), so it estimates from characters: most letters cost about the same,
while a digit expands into words ("1234567890" is read as "one billion two hundred thirty-four
million…", ~0.5 s a digit) and so do many symbols. The worker replaces the estimate by one from the
plan's phoneme ids (:func:`planned_audio_s`), and the job is settled on the audio it delivered. The
constants were measured on the default voices (docs/SECURITY.md, "Quotas"); an estimate a little
high only holds quota a little early.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Final

SECONDS_PER_LETTER: Final = 0.07
"""English prose: 100,000 characters made 93 minutes of audio (0.056 s) at speed 1; rounded up."""

SECONDS_PER_DIGIT: Final = 0.6
"""``"1234567890" * 500`` made 46 minutes: 0.55 s a digit."""

SECONDS_PER_SYMBOL: Final = 0.4
"""Symbols read as words (``%``, ``&``, ``$``, ``+``, ``=``…)."""

SECONDS_PER_WIDE_CHARACTER: Final = 0.2
"""Kana and kanji: each is one or more syllables (the Japanese voices' corpus: ~0.15 s)."""

SECONDS_PER_PHONEME_ID: Final = {"piper": 0.027, "kokoro": 0.062}
"""Audio per planned model id, by engine (speed 1): Piper's ids put a pad between phonemes, so each
is worth less (measured 0.024 to 0.026 s on prose, digits and letters; Kokoro 0.060 s on Japanese prose)."""


def _cost(character: str) -> float:
    if character.isdigit():
        return SECONDS_PER_DIGIT
    if character.isspace():
        return 0.0
    category = unicodedata.category(character)
    if unicodedata.east_asian_width(character) in ("W", "F") and category.startswith("L"):
        return SECONDS_PER_WIDE_CHARACTER
    if category in ("Sm", "Sc", "So") or character in "#%&@*/\\^_~|":
        return SECONDS_PER_SYMBOL
    return SECONDS_PER_LETTER


def estimate_audio_s(text: str, speed: float = 1.0) -> float:
    """Seconds of audio ``text`` will probably make at ``speed`` (pauses included roughly)."""
    return sum(_cost(c) for c in text) / speed


def planned_audio_s(engine: str, id_counts: Iterable[int], pause_s: float, speed: float = 1.0) -> float:
    """Seconds of audio a plan will make: its model ids at ``speed`` plus its pauses."""
    return sum(id_counts) * SECONDS_PER_PHONEME_ID[engine] / speed + pause_s
