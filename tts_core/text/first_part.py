"""Where a streamed job's first sentence is cut, so its first audio is a short clause, not a sentence.

A listener hears nothing until the first part is synthesised, and the model's time grows with the
part's length (Kokoro on 2 cores: about 22 ms an id, so a 50-character Japanese sentence takes 3 s).
So the first sentence of a streamed job is cut after a short first clause: at clause punctuation
where one comes soon enough, else at a phrase boundary the front end names (an accent phrase of
OpenJTalk for Japanese), else at a word boundary (before a function word where there is one). The
rest of that sentence is made while the first part is heard: in one piece where the voice is fast
beside real time (Piper), or, for a voice with a :class:`Pace` (Kokoro on a CPU), in the fewest
pieces that are each ready before the one before it has been heard. Each cut gets
:data:`CLAUSE_PAUSE_S`, a pause as at a comma.

A front end that knows its phrases offers them (:class:`PhraseBreaker`); any other is cut between
words (text with spaces) or not at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from tts_core.base.plan import PlannedUtterance
from tts_core.text.sentences import has_speech

CLAUSE_PAUSE_S: Final = 0.12
"""Silence added where a sentence was cut for streaming: about what a voice leaves at a comma
inside a sentence (Kokoro's trim keeps 30 ms of lead and tail on each side as well)."""

CLAUSE_MARKS: Final = ",;:\u2014\u2013\u3001\uff0c\uff1b\uff1a"
"""Characters that end a clause: Latin comma, semicolon, colon, dashes; the ideographic comma and
the full-width comma, semicolon and colon."""

FUNCTION_WORDS: Final = frozenset(
    ("and", "but", "or", "nor", "so", "yet", "that", "which", "who", "whom", "whose", "where", "when", "while",
     "because", "although", "though", "if", "unless", "until", "than", "as", "of", "in", "on", "at", "to", "for",
     "with", "from", "by", "about", "into", "over", "after", "before")
)  # fmt: skip
"""English words a phrase starts with: a cut before one of them sounds like a phrase ending."""

_WORD: Final = re.compile(r"\S+")


@dataclass(frozen=True)
class FirstPartLimits:
    """How long a first part may be, in the weights of its breaks (words, or morae for Japanese)."""

    least: float
    """Shorter than this, a part is not worth its own model call (a lone "However,")."""
    most: float
    """Longer than this, the first part keeps the listener waiting."""
    whole: float
    """A sentence no heavier than this is spoken whole: it is heard soon enough as one model call,
    and a cut would cost a second call's fixed time (issue 38: 17 ms of a 160 ms Piper message)."""
    pace: Pace | None = None
    """How long this voice's calls take beside what they make heard; None: the rest of the sentence
    after the first part is always ready in time, so it stays one piece."""


@dataclass(frozen=True)
class Pace:
    """A voice's model calls against the speech they make, per weight of text (a mora): whether the
    next piece of a cut sentence is ready before the pieces before it have been heard."""

    call_s: float
    """A call's fixed time (Kokoro makes and trims about a second of lead and tail on every call)."""
    call_s_per_weight: float
    heard_s_per_weight: float

    def call(self, weight: float) -> float:
        """Seconds a piece of ``weight`` takes to make."""
        return self.call_s + self.call_s_per_weight * weight

    def heard(self, weight: float) -> float:
        """Seconds a piece of ``weight`` plays for, with the pause its cut adds."""
        return self.heard_s_per_weight * weight + CLAUSE_PAUSE_S

    def at_speed(self, speed: float) -> Pace:
        """This pace for speech ``speed`` times as fast: a mora is heard for less time, and made in less
        (the model makes fewer frames); a call's fixed time stays."""
        return Pace(self.call_s, self.call_s_per_weight / speed, self.heard_s_per_weight / speed)


WORD_LIMITS: Final = FirstPartLimits(3, 8, 12)
"""For text cut between words: 3 to 8 words (8 English words are about 100 Piper ids, 0.15 s on 2
cores); a sentence of up to 12 words (about 0.2 s) is spoken whole."""


@dataclass(frozen=True)
class PhraseBreak:
    """A place a sentence may be cut: after ``end`` characters, ``weight`` of speech before it."""

    end: int
    weight: float
    clause: bool = False
    """After clause punctuation: the natural place for a pause."""
    preferred: bool = False
    """Before a word that starts a phrase (where there is no clause punctuation)."""


@runtime_checkable
class PhraseBreaker(Protocol):
    """A front end that knows where its language's phrases end (Japanese has no spaces to cut at)."""

    first_part_limits: FirstPartLimits

    def phrase_breaks(self, sentence: str) -> list[PhraseBreak]:
        """Where ``sentence`` may be cut, in order, with the speech before each place; the last is its
        end, weighing the whole sentence."""


def ends_clause(text: str) -> bool:
    """Whether ``text`` ends in clause punctuation (spaces after it aside)."""
    return text.rstrip()[-1:] in CLAUSE_MARKS


def word_breaks(sentence: str) -> list[PhraseBreak]:
    """Places after the words of text with spaces, weighed in words."""
    words = list(_WORD.finditer(sentence))
    breaks = []
    bare = [word.group().lower().strip("\"'()") for word in words]
    for count, word in enumerate(words, start=1):
        starts_phrase = count < len(words) and bare[count] in FUNCTION_WORDS and bare[count - 1] not in FUNCTION_WORDS
        breaks.append(PhraseBreak(word.end(), count, word.group()[-1] in CLAUSE_MARKS, starts_phrase))
    return breaks


FIRST_PART_SCAN_CHARS: Final = 200
"""How much of a first sentence is analysed for its first part: many times the longest first part
(16 morae of Japanese are about 30 characters, 8 English words about 50), so a sentence of any length
costs its first byte what a short one does (issue 34: the whole of a 9,000-character sentence without
punctuation went past OpenJTalk's limit, and 3,000 characters held the first byte for 36 s)."""


def first_cuts(sentence: str, front_end: object, speed: float = 1.0) -> list[int]:
    """Offsets in ``sentence`` to cut it at for streaming (empty: speak it whole): the end of a short
    first part, then, for a voice with a :class:`Pace` (at the job's ``speed``), the fewest further
    cuts that keep the audio flowing. Every cut is one more model call, and a call's fixed cost (about
    0.27 s of Kokoro on 2 cores) is what a 50-character sentence cut at each comma lost in throughput."""
    head = sentence[:FIRST_PART_SCAN_CHARS]
    if isinstance(front_end, PhraseBreaker):
        breaks, limits = front_end.phrase_breaks(head), front_end.first_part_limits
    else:
        breaks, limits = word_breaks(head), WORD_LIMITS
    total = breaks[-1].weight if breaks else 0.0
    if len(head) < len(sentence):
        # The head's end is no place to cut (it may be inside a word), and the rest weighs more than
        # any first part.
        breaks, total = [b for b in breaks if b.end < len(head)], math.inf
    if total <= limits.whole:
        return []
    usable = [b for b in breaks if b.weight >= limits.least and total - b.weight >= limits.least]
    if limits.pace is not None:
        paced = _paced(usable, limits, limits.pace.at_speed(speed), total)
        return [b.end for b in paced if has_speech(sentence[b.end :])]
    first = _first(usable, limits)
    if first is None or not has_speech(sentence[first.end :]):
        return []
    return [first.end]


def _paced(usable: list[PhraseBreak], limits: FirstPartLimits, pace: Pace, total: float) -> list[PhraseBreak]:
    """The cuts whose first part is within the limits and whose pieces keep the listener waiting the
    least (not at all, where the places allow), in the fewest pieces; among those, a first part ending
    a clause, then the shortest (the soonest heard)."""
    firsts: dict[float, PhraseBreak] = {}  # one place a weight: places with no speech between them
    for place in usable:
        if place.weight <= limits.most and (place.weight not in firsts or place.clause):
            firsts[place.weight] = place
    plans = [_following(first, usable, limits, pace, total) for first in firsts.values()]
    if not plans:
        return []
    cuts, _ = min(plans, key=lambda plan: (plan[1], len(plan[0]), not plan[0][0].clause, plan[0][0].weight))
    return cuts


def _following(
    first: PhraseBreak, usable: list[PhraseBreak], limits: FirstPartLimits, pace: Pace, total: float
) -> tuple[list[PhraseBreak], float]:
    """``first``, then each next cut as far on as the audio queued ahead of the listener allows (the
    farthest leaves the most ahead for the piece after it); where no place is near enough, the
    nearest (the wait is shortest so). With the seconds the listener waits in all."""
    cuts, ahead, at, waited = [first], pace.heard(first.weight), first.weight, 0.0
    while pace.call(total - at) > ahead:
        later = [b for b in usable if b.end > cuts[-1].end and b.weight - at >= limits.least]
        fitting = [b for b in later if pace.call(b.weight - at) <= ahead]
        following = fitting[-1] if fitting else (later[0] if later else None)
        if following is None:
            break
        part = following.weight - at
        waited += max(0.0, pace.call(part) - ahead)
        ahead = max(0.0, ahead - pace.call(part)) + pace.heard(part)
        cuts, at = [*cuts, following], following.weight
    if total != math.inf:
        waited += max(0.0, pace.call(total - at) - ahead)
    return cuts, waited


def _first(breaks: list[PhraseBreak], limits: FirstPartLimits) -> PhraseBreak | None:
    """The first clause end within the limits, else the last preferred place within them, else the
    last place within them."""
    within = [b for b in breaks if b.weight <= limits.most]
    for place in within:
        if place.clause:
            return place
    preferred = [b for b in within if b.preferred] or within
    return preferred[-1] if preferred else None


def pieces(sentence: str, cuts: list[int]) -> list[tuple[int, int]]:
    """``sentence`` cut at ``cuts``: each piece's (start, end) without the spaces around it."""
    spans, start = [], 0
    for end in [*cuts, len(sentence)]:
        piece = sentence[start:end]
        lead = len(piece) - len(piece.lstrip())
        spans.append((start + lead, start + len(piece.rstrip())))
        start = end
    return spans


def cut_sentence_segments(segments: Sequence[Sequence[PlannedUtterance]]) -> int:
    """How many of a streamed plan's first segments (``tts_core.frontend.segments.iter_stream_segments``)
    are the pieces of its first sentence: each was cut to be ready before the audio ahead of it has
    been played, so they are made one after the other, as soon as possible (:func:`first_cuts`)."""
    count = 0
    for segment in segments:
        count += 1
        if len(segment) != 1 or not ends_at_cut(segment[0]):
            break
    return count


def ends_at_cut(utterance: PlannedUtterance) -> bool:
    """Whether a planned utterance ends where :func:`first_cuts` cut its sentence (its pause is the cut's)."""
    return utterance.pause_after_s == CLAUSE_PAUSE_S
