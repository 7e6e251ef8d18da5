"""Subtitles (WebVTT and SRT) from timing marks (``tts_core.marks``).

Every sentence mark starts a new cue. A sentence too long for one cue is cut between words, where a
reader expects a break: after clause punctuation (``, ; :``, em and en dashes, the ASCII ``--``, or sentence
punctuation inside the mark) or at a pause between word marks, before any other space, while keeping
the cues well filled (a clause of two words is not worth a cue of its own). A cut takes its time from
the word mark that starts the next cue; without word marks, the sentence's time is shared among its
cues in proportion to their characters.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from tts_core.marks import Mark, check_order

MAX_LINE_CHARS: Final = 42
"""Characters a subtitle line holds at most (Netflix's English timed-text guideline; a cue has at most
two lines). A single word longer than this gets a line of its own rather than being cut."""

PAUSE_MS: Final = 250
"""A silence at least this long between two word marks is a good place to cut, punctuation or not."""

_CUE_CHARS: Final = 2 * MAX_LINE_CHARS + 1
"""Characters a full cue holds: two full lines and the space that the line break replaces."""
_CLAUSE_ENDS: Final = (",", ";", ":", "\N{EM DASH}", "\N{EN DASH}", "--", ".", "!", "?", "\N{HORIZONTAL ELLIPSIS}")
_CLOSERS: Final = "\"')]»\N{RIGHT DOUBLE QUOTATION MARK}\N{RIGHT SINGLE QUOTATION MARK}"
_CUE_COST: Final = 0.3
"""Cost of one more cue, in units of an empty cue's unused space (see ``_split``)."""
_WEAK_CUT_COST: Final = 1.0
"""Extra cost of cutting a sentence at a plain space rather than after a clause or at a pause."""
_CLAUSE_LINE_BONUS: Final = 10
"""Characters of evenness worth giving up to end a cue's first line at a clause."""
_WORD = re.compile(r"\S+")
_WEBVTT_ESCAPES: Final = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


@dataclass(frozen=True)
class Cue:
    """One subtitle: one or two lines of text, shown from ``start_ms`` until ``end_ms``."""

    start_ms: int
    end_ms: int
    lines: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.start_ms < 0 or self.end_ms <= self.start_ms:
            raise ValueError(f"cue {self.lines!r}: times {self.start_ms}..{self.end_ms} ms are not a span")
        if not self.lines or any(not line.strip() or "\n" in line for line in self.lines):
            raise ValueError(f"cue at {self.start_ms} ms: lines {self.lines!r} must be non-empty, one line each")


@dataclass(frozen=True)
class _Token:
    """A whitespace-separated word of a sentence and where it starts in the submitted text."""

    text: str
    start: int


@dataclass(frozen=True)
class _Gap:
    """The space after a token: whether it is a good place to cut, and when, if word marks say."""

    good: bool
    time_ms: int | None


def build_cues(marks: Iterable[Mark]) -> list[Cue]:
    """Cues for the sentence marks, cut with the help of the word marks among ``marks`` if any.

    Raises ``ValueError`` if the marks of a type are out of order or overlap, or a sentence is too
    short in time to give each of its cues a millisecond.
    """
    marks = list(marks)
    sentences = [m for m in marks if m.type == "sentence"]
    words = [m for m in marks if m.type == "word"]
    check_order(sentences)
    check_order(words)
    word_starts = [w.text_start for w in words]
    cues: list[Cue] = []
    for sentence in sentences:
        inside = words[bisect_left(word_starts, sentence.text_start) : bisect_left(word_starts, sentence.text_end)]
        cues.extend(_sentence_cues(sentence, [w for w in inside if w.text_end <= sentence.text_end]))
    return cues


def _sentence_cues(sentence: Mark, words: Sequence[Mark]) -> list[Cue]:
    tokens = [_Token(m.group(), sentence.text_start + m.start()) for m in _WORD.finditer(sentence.value)]
    if not tokens:
        return []
    gaps = _gaps(tokens, words)
    pieces = _split([t.text for t in tokens], [g.good for g in gaps])
    times = _cut_times(sentence, tokens, gaps, [first for first, _ in pieces[1:]])
    return [Cue(start, end, lines) for (_, lines), (start, end) in zip(pieces, pairwise(times), strict=True)]


def _gaps(tokens: Sequence[_Token], words: Sequence[Mark]) -> list[_Gap]:
    """What the spaces between tokens are: good places to cut or not (clause punctuation before, or the
    voice pausing there), and when the word after each starts, if word marks say."""
    starts = [w.text_start for w in words]
    gaps: list[_Gap] = []
    for before, after in pairwise(tokens):
        following = bisect_left(starts, after.start)
        time_ms = words[following].start_ms if following < len(words) else None
        paused = time_ms is not None and following > 0 and time_ms - words[following - 1].end_ms >= PAUSE_MS
        gaps.append(_Gap(paused or _ends_clause(before.text), time_ms))
    return gaps


def _split(tokens: Sequence[str], good: Sequence[bool]) -> list[tuple[int, tuple[str, ...]]]:
    """Cut a sentence's tokens into the cheapest run of pieces that each fit a cue: for each piece, the
    index of its first token and its lines.

    A piece costs ``_CUE_COST``, plus its unused share of a cue squared (so pieces come out evenly
    filled and no last piece is a lone word), plus ``_WEAK_CUT_COST`` if it ends at a plain space
    (``good[k]``: the space after token ``k`` is a clause end or a pause).
    """
    # best[j]: the cheapest cost of tokens[:j], where its last piece starts, and that piece's lines.
    best: list[tuple[float, int, tuple[str, ...]]] = [(0.0, 0, ())]
    for j in range(1, len(tokens) + 1):
        candidates: list[tuple[float, int, tuple[str, ...]]] = []
        for i in range(j - 1, -1, -1):
            lines = _wrap(tokens[i:j])
            if lines is None:
                break  # a piece that does not fit only gets worse with more tokens
            unused = max(1 - len(" ".join(tokens[i:j])) / _CUE_CHARS, 0.0)
            weak = _WEAK_CUT_COST if j < len(tokens) and not good[j - 1] else 0.0
            candidates.append((best[i][0] + _CUE_COST + unused**2 + weak, i, lines))
        best.append(min(candidates))
    pieces: list[tuple[int, tuple[str, ...]]] = []
    end = len(tokens)
    while end:
        _, start, lines = best[end]
        pieces.append((start, lines))
        end = start
    return pieces[::-1]


def _wrap(tokens: Sequence[str]) -> tuple[str, ...] | None:
    """The tokens as one or two lines of at most ``MAX_LINE_CHARS`` (a lone long word may exceed it),
    the two as even as possible, the first ending at a clause if that costs little; ``None`` if they do
    not fit."""
    whole = " ".join(tokens)
    if len(whole) <= MAX_LINE_CHARS or len(tokens) == 1:
        return (whole,)
    splits = [(" ".join(tokens[:k]), " ".join(tokens[k:])) for k in range(1, len(tokens))]
    fitting = [s for s in splits if all(len(line) <= MAX_LINE_CHARS or " " not in line for line in s)]
    return min(fitting, key=_raggedness) if fitting else None


def _raggedness(lines: tuple[str, str]) -> int:
    return max(len(lines[0]), len(lines[1])) - (_CLAUSE_LINE_BONUS if _ends_clause(lines[0]) else 0)


def _ends_clause(text: str) -> bool:
    return text.rstrip(_CLOSERS).endswith(_CLAUSE_ENDS)


def _cut_times(sentence: Mark, tokens: Sequence[_Token], gaps: Sequence[_Gap], cuts: Sequence[int]) -> list[int]:
    """Start and end of each cue of a sentence; ``cuts`` are the tokens that start its later cues.

    A cut is at the start of the word mark after it if that falls inside the sentence, else where its
    characters put it; times are then nudged so that every cue lasts at least a millisecond.
    """
    start, end = sentence.start_ms, sentence.end_ms
    if end - start < len(cuts) + 1:
        raise ValueError(f"{sentence.describe()}: {end - start} ms is too short for {len(cuts) + 1} cues")
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + len(token.text) + 1)
    times = [start]
    for n, cut in enumerate(cuts):
        time_ms = gaps[cut - 1].time_ms
        if time_ms is None or not start < time_ms < end:
            time_ms = start + round((end - start) * offsets[cut] / (offsets[-1] - 1))
        times.append(min(max(time_ms, times[-1] + 1), end - (len(cuts) - n)))
    return [*times, end]


def to_webvtt(cues: Iterable[Cue]) -> str:
    """A WebVTT file of the cues, with ``&``, ``<`` and ``>`` escaped (cue text may hold markup)."""
    blocks = [
        f"{_timestamp(c.start_ms, '.')} --> {_timestamp(c.end_ms, '.')}\n"
        + "\n".join(line.translate(_WEBVTT_ESCAPES) for line in c.lines)
        for c in _in_order(cues)
    ]
    return "WEBVTT\n\n" + "".join(f"{block}\n\n" for block in blocks)


def to_srt(cues: Iterable[Cue]) -> str:
    """A SubRip file of the cues, numbered from 1 (SRT has no escaping: text goes as it is)."""
    blocks = [
        f"{n}\n{_timestamp(c.start_ms, ',')} --> {_timestamp(c.end_ms, ',')}\n" + "\n".join(c.lines)
        for n, c in enumerate(_in_order(cues), start=1)
    ]
    return "".join(f"{block}\n\n" for block in blocks)


def _in_order(cues: Iterable[Cue]) -> list[Cue]:
    """The cues, after checking that each starts at or after the end of the one before."""
    cues = list(cues)
    for before, cue in pairwise(cues):
        if cue.start_ms < before.end_ms:
            raise ValueError(f"cue {cue.lines!r} at {cue.start_ms} ms overlaps the one before, ending {before.end_ms}")
    return cues


def _timestamp(ms: int, decimal_mark: str) -> str:
    seconds, millis = divmod(ms, 1000)
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    return f"{hours:02d}:{mins:02d}:{secs:02d}{decimal_mark}{millis:03d}"
