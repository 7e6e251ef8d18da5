"""How much audio a text will make, without loading the synthesis stack.

The API charges a job's audio seconds to its tenant's day before any phoneme exists (espeak-ng and
onnxruntime stay out of the API), so it estimates from characters: most letters cost about the same,
while a digit expands into words ("1234567890" is read as "one billion two hundred thirty-four
million…", ~0.5 s a digit) and so do many symbols. The worker replaces the estimate by one from the
plan's phoneme ids (:func:`planned_audio_s`, at the rate the voice's engine states), and the job is
settled on the audio it delivered. The constants were measured on the default voices
(docs/SECURITY.md, "Quotas"); an estimate a little high only holds quota a little early.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tts_core.text.pauses import Silence, ssml_silence, text_silence
from tts_core.voices.engines import engine_named
from ttsq.errors import PlanTooLong

if TYPE_CHECKING:
    from tts_core.text.speech_markup import SsmlDocument
    from ttsq.job_record import JobOptions
    from ttsq.settings import Settings

SECONDS_PER_LETTER: Final = 0.07
"""English prose: 100,000 characters made 93 minutes of audio (0.056 s) at speed 1; rounded up."""

SECONDS_PER_DIGIT: Final = 0.6
"""``"1234567890" * 500`` made 46 minutes: 0.55 s a digit."""

SECONDS_PER_SYMBOL: Final = 0.4
"""Symbols read as words (``%``, ``&``, ``$``, ``+``, ``=``…)."""

SECONDS_PER_WIDE_CHARACTER: Final = 0.2
"""Kana and kanji: each is one or more syllables (the Japanese voices' corpus: ~0.15 s)."""

COSTS_KEPT: Final = 4096
"""Characters whose cost is remembered: texts share most of theirs. A text's characters are counted
first and each distinct one costed once: a lexicon's growth (``ttsq.lexicon_growth``) costs 10,000
pronunciations, 2.7 s character by character, 0.1 s so."""

INTERACTIVE_SECONDS_PER_CHAR: Final = 2 * SECONDS_PER_LETTER
"""Speech a job that names no priority may make and still be interactive, per character of
``interactive_max_chars``: twice what prose makes, so prose with numbers stays interactive while
999 digits (600 s read as words) do not."""


@functools.lru_cache(maxsize=COSTS_KEPT)
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
    return sum(_cost(character) * count for character, count in Counter(text).items()) / speed


def planned_audio_s(engine: str, id_counts: Iterable[int], pause_s: float, speed: float = 1.0) -> float:
    """Seconds of audio a plan will make: its model ids at ``speed`` (at ``engine``'s rate per id)
    plus its pauses."""
    return sum(id_counts) * engine_named(engine).seconds_per_id / speed + pause_s


@dataclass(frozen=True)
class JobEstimate:
    """What the API can tell of a job before any phoneme exists."""

    speech_s: float
    silence: Silence

    @property
    def audio_ms(self) -> int:
        """Speech and pauses: what the job reserves of its tenant's day."""
        return round((self.speech_s + self.silence.total_s) * 1000)


def estimate_job(
    spoken: str,
    document: SsmlDocument | None,
    options: JobOptions,
    engine: str,
    settings: Settings,
    growth_s: float = 0.0,
) -> JobEstimate:
    """The job's audio (:func:`estimate_text`), checked against what no job may ask for: too long a
    pause at one place, more silence than its allowance, or a text that certainly plans into more
    than ``max_job_segments`` (as far as the voice's engine can tell without the synthesis stack,
    Piper from the text's digits; the worker stops planning there for any)."""
    estimate = estimate_text(spoken, document, options, settings, growth_s)
    estimate.silence.check(estimate.speech_s, settings.silence_allowance_s, settings.silence_ratio)
    fewest = engine_named(engine).least_segments(spoken, settings.segment_max_ids)
    if fewest > settings.max_job_segments:
        raise PlanTooLong(fewest, settings.max_job_segments, "estimated")
    return estimate


def estimate_text(
    spoken: str, document: SsmlDocument | None, options: JobOptions, settings: Settings, growth_s: float = 0.0
) -> JobEstimate:
    """The speech and pauses a job of this text would make (``growth_s``: at most what its lexicons'
    pronunciations add, at speed 1), unchecked: what a job reserves, and what a book's chapter is
    told it will make before it is submitted (``/v1/books/chapters``)."""
    sentence = settings.sentence_pause_s if options.sentence_pause_s is None else options.sentence_pause_s
    paragraph = settings.paragraph_pause_s if options.paragraph_pause_s is None else options.paragraph_pause_s
    if document is not None:
        silence = ssml_silence(document, sentence, paragraph)
    else:
        silence = text_silence(spoken, sentence, paragraph)
    return JobEstimate(estimate_audio_s(spoken, options.speed) + growth_s / options.speed, silence)
