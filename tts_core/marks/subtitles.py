"""Subtitles (WebVTT and SRT) from timing marks (``tts_core.marks.speech_marks``).

Every sentence mark starts a new cue. A sentence too long for one cue is cut between words, where a
reader expects a break: after clause punctuation (``, ; :``, em and en dashes, the ASCII ``--``, or sentence
punctuation inside the mark) or at a pause between word marks, before any other space, while keeping
the cues well filled (a clause of two words is not worth a cue of its own). A cut takes its time from
the word mark that starts the next cue; without word marks, the sentence's time is shared among its
cues in proportion to their characters.

Japanese has no spaces: a sentence written with kana or kanji is cut between its word marks (the
G2P's words) and after its punctuation, into lines of at most :data:`JA_MAX_LINE_WIDTH` full-width
characters; without word marks, between any two characters but before closing or after opening
punctuation (the line-breaking rules of Japanese, *kinsoku*).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from tts_core.marks.speech_marks import Mark, check_order

MAX_LINE_CHARS: Final = 42
"""Characters a subtitle line holds at most (Netflix's English timed-text guideline; a cue has at most
two lines). A single word longer than this gets a line of its own rather than being cut."""

JA_MAX_LINE_WIDTH: Final = 13
"""Width of a Japanese subtitle line at most, in full-width characters (a half-width one, such as a
Latin letter or digit, counts as half): Netflix's Japanese timed-text guideline, as 42 is its English
one (broadcast captions use 13 to 16; a cue has at most two lines). No line is wider, not even for one
long word: such a word is cut between two of its characters, where Japanese allows a break."""

PAUSE_MS: Final = 250
"""A silence at least this long between two word marks is a good place to cut, punctuation or not."""

_CLAUSE_ENDS: Final = (",", ";", ":", "\N{EM DASH}", "\N{EN DASH}", "--", ".", "!", "?", "\N{HORIZONTAL ELLIPSIS}")
_CLOSERS: Final = "\"')]»\N{RIGHT DOUBLE QUOTATION MARK}\N{RIGHT SINGLE QUOTATION MARK}"
_CUE_COST: Final = 0.3
"""Cost of one more cue, in units of an empty cue's unused space (see ``_split``)."""
_WEAK_CUT_COST: Final = 1.0
"""Extra cost of cutting a sentence at a plain space rather than after a clause or at a pause."""
_CLAUSE_LINE_BONUS: Final = 10
"""Characters of evenness worth giving up to end a cue's first line at a clause."""
_WORD = re.compile(r"\S+")
_JA_CLAUSE_ENDS: Final = ("\u3001", "\u3002", "\uff0c", "\uff0e", "\uff01", "\uff1f", "\uff1a", "\uff1b", *_CLAUSE_ENDS)
"""The ideographic comma and full stop, the full-width , . ! ? : ; and the Latin ones."""
_JA_CLOSERS: Final = _CLOSERS + "\u300d\u300f\uff09\u3011\u3009\u300b\u3015\uff3d\uff5d"
"""Closing brackets and quotes (」 』 and the full-width ones) and the Latin ones: they stay with the text
before them."""
_JA_OPENERS: Final = "\u300c\u300e\uff08\u3010\u3008\u300a\u3014\uff3b\uff5b([{\"'\N{LEFT DOUBLE QUOTATION MARK}"
"""Opening brackets and quotes (「 『 and the full-width ones) and the Latin ones: they stay with the text
after them."""
_JA_NO_LINE_START: Final = frozenset(
    _JA_CLOSERS + "".join(_JA_CLAUSE_ENDS) + "\u30fc\u30fb\u3005\u309d\u309e\u30fd\u30fe"
)
"""What no line begins with: closers, punctuation, ー ・ and the iteration marks (kinsoku)."""
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
class _Layout:
    """How a script's lines are made: what joins tokens, how wide text is, how wide a line may be,
    and what ends a clause."""

    joiner: str
    max_width: float
    width: Callable[[str], float]
    clause_ends: tuple[str, ...]
    closers: str

    def join(self, tokens: Sequence[str]) -> str:
        return self.joiner.join(tokens).strip()

    @property
    def cue_width(self) -> float:
        """A full cue: two full lines and the joiner that the line break replaces."""
        return 2 * self.max_width + self.width(self.joiner)


def full_width(text: str) -> float:
    """Width in full-width characters: wide, full-width and ambiguous characters count one (Japanese
    fonts draw the ambiguous ones wide), the others a half."""
    return sum(1.0 if unicodedata.east_asian_width(ch) in "WFA" else 0.5 for ch in text)


_LATIN: Final = _Layout(" ", MAX_LINE_CHARS, len, _CLAUSE_ENDS, _CLOSERS)
_JAPANESE: Final = _Layout("", JA_MAX_LINE_WIDTH, full_width, _JA_CLAUSE_ENDS, _JA_CLOSERS)
_KANA_OR_KANJI: Final = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class _Token:
    """A piece of a sentence that a line may start with (a whitespace-separated word, or a Japanese
    word with its punctuation) and where it starts in the submitted text."""

    text: str
    start: int
    mid_word: bool = False
    """It starts inside a word mark (a piece of a Japanese word too wide for a line)."""


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
    if _KANA_OR_KANJI.search(sentence.value):
        layout, tokens = _JAPANESE, japanese_tokens(sentence, words)
    else:
        layout = _LATIN
        tokens = [_Token(m.group(), sentence.text_start + m.start()) for m in _WORD.finditer(sentence.value)]
    if not tokens:
        return []
    gaps = _gaps(tokens, words, layout)
    pieces = _split([t.text for t in tokens], [g.good for g in gaps], layout)
    times = _cut_times(sentence, tokens, gaps, [first for first, _ in pieces[1:]], layout)
    return [Cue(start, end, lines) for (_, lines), (start, end) in zip(pieces, pairwise(times), strict=True)]


def japanese_tokens(sentence: Mark, words: Sequence[Mark]) -> list[_Token]:
    """A Japanese sentence in the pieces a line may start with: its word marks, each with the
    punctuation after it (and an opening bracket before it); without word marks, its characters,
    kept together where a line may not break. A piece wider than a line is cut into narrower ones."""
    text = sentence.value
    if words:
        starts = {_before_openers(text, w.text_start - sentence.text_start) for w in words}
    else:
        starts = {i for i in range(len(text)) if _may_start_line(text, i)}
    cuts = sorted({0, *(i for i in starts if 0 < i < len(text))})
    tokens: list[_Token] = []
    for start, end in pairwise([*cuts, len(text)]):
        piece = re.sub(r"\s+", " ", text[start:end])
        if not piece.strip() and tokens:  # only spaces: they end the piece before
            tokens[-1] = _Token(tokens[-1].text + piece, tokens[-1].start, tokens[-1].mid_word)
            continue
        tokens.extend(_narrow(piece, sentence.text_start + start))
    return tokens


def _before_openers(text: str, index: int) -> int:
    while index > 0 and text[index - 1] in _JA_OPENERS:
        index -= 1
    return index


def _may_start_line(text: str, index: int) -> bool:
    """Japanese may break before this character: it is no closer or punctuation, nor after an opener."""
    return not (
        text[index] in _JA_NO_LINE_START or text[index].isspace() or (index > 0 and text[index - 1] in _JA_OPENERS)
    )


def _narrow(piece: str, start: int) -> list[_Token]:
    """The piece as one token, or, if it is wider than a line, as the fewest tokens that each fit,
    cut where Japanese may break a line (hard where it may not anywhere)."""
    if full_width(piece.strip()) <= JA_MAX_LINE_WIDTH:
        return [_Token(piece, start)]
    tokens: list[_Token] = []
    begin = 0
    while begin < len(piece):
        end = begin + 1
        while end < len(piece) and full_width(piece[begin : end + 1].strip()) <= JA_MAX_LINE_WIDTH:
            end += 1
        if end < len(piece):
            breaks = [i for i in range(begin + 1, end + 1) if _may_start_line(piece, i)]
            end = breaks[-1] if breaks else end
        tokens.append(_Token(piece[begin:end], start + begin, mid_word=begin > 0))
        begin = end
    return tokens


def _gaps(tokens: Sequence[_Token], words: Sequence[Mark], layout: _Layout = _LATIN) -> list[_Gap]:
    """What the spaces between tokens are: good places to cut or not (clause punctuation before, or the
    voice pausing there), and when the word after each starts, if word marks say."""
    starts = [w.text_start for w in words]
    gaps: list[_Gap] = []
    for before, after in pairwise(tokens):
        if after.mid_word:  # no word mark starts there: its time comes from its characters
            gaps.append(_Gap(False, None))
            continue
        following = bisect_left(starts, after.start)
        time_ms = words[following].start_ms if following < len(words) else None
        paused = time_ms is not None and following > 0 and time_ms - words[following - 1].end_ms >= PAUSE_MS
        gaps.append(_Gap(paused or _ends_clause(before.text, layout), time_ms))
    return gaps


def _split(tokens: Sequence[str], good: Sequence[bool], layout: _Layout) -> list[tuple[int, tuple[str, ...]]]:
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
            lines = _wrap(tokens[i:j], layout)
            if lines is None:
                break  # a piece that does not fit only gets worse with more tokens
            unused = max(1 - layout.width(layout.join(tokens[i:j])) / layout.cue_width, 0.0)
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


def _wrap(tokens: Sequence[str], layout: _Layout) -> tuple[str, ...] | None:
    """The tokens as one or two lines of at most the layout's width (a lone long word may exceed it),
    the two as even as possible, the first ending at a clause if that costs little; ``None`` if they do
    not fit."""
    whole = layout.join(tokens)
    if layout.width(whole) <= layout.max_width or len(tokens) == 1:
        return (whole,)
    fitting = [
        (layout.join(tokens[:k]), layout.join(tokens[k:]))
        for k in range(1, len(tokens))
        if _fits(tokens[:k], layout) and _fits(tokens[k:], layout)
    ]
    return min(fitting, key=lambda lines: _raggedness(lines, layout)) if fitting else None


def _fits(tokens: Sequence[str], layout: _Layout) -> bool:
    return len(tokens) == 1 or layout.width(layout.join(tokens)) <= layout.max_width


def _raggedness(lines: tuple[str, str], layout: _Layout) -> float:
    longest = max(layout.width(lines[0]), layout.width(lines[1]))
    return longest - (_CLAUSE_LINE_BONUS * layout.width("x") if _ends_clause(lines[0], layout) else 0)


def _ends_clause(text: str, layout: _Layout) -> bool:
    return text.rstrip().rstrip(layout.closers).endswith(layout.clause_ends)


def _cut_times(
    sentence: Mark, tokens: Sequence[_Token], gaps: Sequence[_Gap], cuts: Sequence[int], layout: _Layout
) -> list[int]:
    """Start and end of each cue of a sentence; ``cuts`` are the tokens that start its later cues.

    A cut is at the start of the word mark after it if that falls inside the sentence, else where its
    characters put it; times are then nudged so that every cue lasts at least a millisecond.
    """
    start, end = sentence.start_ms, sentence.end_ms
    if end - start < len(cuts) + 1:
        raise ValueError(f"{sentence.describe()}: {end - start} ms is too short for {len(cuts) + 1} cues")
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + len(token.text) + len(layout.joiner))
    times = [start]
    for n, cut in enumerate(cuts):
        time_ms = gaps[cut - 1].time_ms
        if time_ms is None or not start < time_ms < end:
            time_ms = start + round((end - start) * offsets[cut] / (offsets[-1] - len(layout.joiner)))
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
