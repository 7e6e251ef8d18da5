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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tts_core.pauses import Silence, ssml_silence, text_silence
from ttsq.errors import PlanTooLong

if TYPE_CHECKING:
    from tts_core.speech_markup import SsmlDocument
    from ttsq.jobs import JobOptions
    from ttsq.settings import Settings

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


MIN_IDS_PER_NONZERO_DIGIT: Final = 5
"""Fewest model ids a Piper voice spends on a digit 1-9 (measured, espeak-ng en-us: a run of ones
6.4, of eights 8.3, "11" 8.1, random digits 18.6, "1,000,000,000,000" 28 per non-zero digit; zeros
inside a number may be silent, and letters can cost next to nothing: "I I I" is read as numerals)."""


def fewest_segments(text: str, segment_max_ids: int) -> int:
    """A lower bound of the segments a Piper plan of ``text`` makes: a segment holds at most
    ``segment_max_ids`` ids, and each digit 1-9 costs at least :data:`MIN_IDS_PER_NONZERO_DIGIT`."""
    digits = sum(text.count(d) for d in "123456789")
    return digits * MIN_IDS_PER_NONZERO_DIGIT // segment_max_ids


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
    spoken: str, document: SsmlDocument | None, options: JobOptions, engine: str, settings: Settings
) -> JobEstimate:
    """The job's audio, checked against what no job may ask for: too long a pause at one place, more
    silence than its allowance, or a text that certainly plans into more than ``max_job_segments``
    (known without the synthesis stack for Piper voices; the worker stops planning there for any)."""
    sentence = settings.sentence_pause_s if options.sentence_pause_s is None else options.sentence_pause_s
    paragraph = settings.paragraph_pause_s if options.paragraph_pause_s is None else options.paragraph_pause_s
    if document is not None:
        silence = ssml_silence(document, sentence, paragraph)
    else:
        silence = text_silence(spoken, sentence, paragraph)
    speech_s = estimate_audio_s(spoken, options.speed)
    silence.check(speech_s, settings.silence_allowance_s, settings.silence_ratio)
    if engine == "piper" and (fewest := fewest_segments(spoken, settings.segment_max_ids)) > settings.max_job_segments:
        raise PlanTooLong(fewest, settings.max_job_segments, "estimated")
    return JobEstimate(speech_s, silence)
