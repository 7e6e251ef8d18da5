"""How much silence a text asks for, read without a front end: the API checks it at submit, the
planner (``tts_core.frontend.segments``) makes exactly these pauses.

Silence is cheap to ask for and not cheap to make: a break of a few characters becomes seconds of
samples in a worker's memory and in the audio a tenant is charged for. So it is bounded twice:

- **at one place**: breaks in a row add up (``<break time="10s"/><break time="10s"/>`` is 20 s), and
  no place may hold more than :data:`MAX_PAUSE_AT_ONE_PLACE_S`;
- **per job**: all pauses together (sentence and paragraph pauses, breaks) may be at most
  ``allowance_s + ratio * speech`` (``TTSQ_SILENCE_ALLOWANCE_S``, ``TTSQ_SILENCE_RATIO``): a book
  breathes between its sentences, while a six-character request of a thousand breaks is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tts_core.base.errors import PauseTooLong, TooMuchSilence
from tts_core.text.sentences import has_speech, normalize_text, split_sentences
from tts_core.text.speech_markup import MAX_BREAK_S, Boundary, Break, Speech, SsmlDocument

MAX_PAUSE_AT_ONE_PLACE_S: Final = MAX_BREAK_S
"""Longest silence at one place of a text: one break's limit, however many breaks stand in a row
(AWS Polly caps a break at 10 s too)."""

PARAGRAPH_SEPARATOR: Final = "\n"
"""How ``normalize_text`` keeps a paragraph break (a blank line)."""


@dataclass(frozen=True)
class Silence:
    """The pauses a text asks for."""

    total_s: float
    longest_s: float
    longest_at: int
    """The spoken piece (from 1) the longest pause stands before."""

    def check(self, speech_s: float, allowance_s: float, ratio: float) -> None:
        """Refuse a place with too long a pause, or more silence in all than the job may have."""
        if self.longest_s > MAX_PAUSE_AT_ONE_PLACE_S:
            raise PauseTooLong(self.longest_s, self.longest_at, MAX_PAUSE_AT_ONE_PLACE_S)
        allowed = allowance_s + ratio * speech_s
        if self.total_s > allowed:
            raise TooMuchSilence(self.total_s, allowed)


def between(owed_break: float | None, boundary: str | None, paragraph_pause_s: float) -> float | None:
    """The pause between two spoken pieces of SSML: the breaks between them (added up) if any, else
    the paragraph pause after a ``<p>``; None (the job's sentence pause) after an ``<s>``; else none."""
    if owed_break is not None:
        return owed_break
    if boundary == "paragraph":
        return paragraph_pause_s
    return None if boundary == "sentence" else 0.0


def ssml_silence(document: SsmlDocument, sentence_pause_s: float, paragraph_pause_s: float) -> Silence:
    """The pauses of an SSML document as the planner makes them (``tts_core.frontend.segments.plan_ssml``),
    counting every spoken piece as one utterance (the planner may cut a long one into several, each
    with a sentence pause: the worker checks the plan itself too)."""
    total = longest = 0.0
    longest_at = 0
    owed: float | None = None
    lead = 0.0
    boundary: str | None = None
    spoken = 0
    for piece in document.pieces:
        if isinstance(piece, Break):
            if spoken:
                owed = (owed or 0.0) + piece.seconds
            else:
                lead += piece.seconds
        elif isinstance(piece, Boundary):
            boundary = "paragraph" if "paragraph" in (boundary, piece.kind) else piece.kind
        elif isinstance(piece, Speech) and (piece.ipa is not None or has_speech(piece.text)):
            spoken += 1
            pause = lead if spoken == 1 else between(owed, boundary, paragraph_pause_s)
            seconds = sentence_pause_s if pause is None else pause
            total += seconds
            if seconds > longest:
                longest, longest_at = seconds, spoken
            owed, boundary = None, None
    if owed is not None:  # breaks after the last words
        total += owed
        if owed > longest:
            longest, longest_at = owed, spoken + 1
    return Silence(total, longest, longest_at)


def text_silence(text: str, sentence_pause_s: float, paragraph_pause_s: float) -> Silence:
    """The pauses of plain text: a sentence pause after each sentence, a paragraph pause after each
    paragraph (a blank line) but the last; none after the last sentence."""
    paragraphs = [p for p in normalize_text(text).split(PARAGRAPH_SEPARATOR) if has_speech(p)]
    sentences = sum(len(split_sentences(p)) for p in paragraphs)
    gaps = max(0, len(paragraphs) - 1)
    total = max(0, sentences - 1 - gaps) * sentence_pause_s + gaps * paragraph_pause_s
    longest = max(sentence_pause_s if sentences > 1 else 0.0, paragraph_pause_s if gaps else 0.0)
    return Silence(total, longest, 0)
