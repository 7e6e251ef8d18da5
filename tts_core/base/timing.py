"""When each spoken word is heard: the model's own phoneme durations turned into word spans.

A Piper graph decides how many frames each input id lasts (its ``Ceil`` output, also used to trim
batched audio: ``tts_core.voices.alignment``). Runs of ids between word breaks (espeak-ng's spaces) are the
words as the model voiced them; their first and last sounding ids give their span, so the pauses
at commas and sentence ends stay outside every word.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Final

import numpy as np
import numpy.typing as npt

from tts_core.base.audio import FloatAudio
from tts_core.base.config import BOS, EOS, PAD
from tts_core.base.plan import ReadWord

IdSamples = npt.NDArray[np.int64]
"""Samples of audio each input id lasts, in input order."""

WORD_BREAK: Final = " "
SILENT_SYMBOLS: Final = frozenset({BOS, EOS, PAD, WORD_BREAK, *",.;:!?¡¿'\"()-…«»“”↓", "\N{EM DASH}", "\N{EN DASH}"})
"""Symbols that frame or separate speech without being part of a word's sound."""
MODIFIER_SYMBOLS: Final = frozenset("ˈˌːˑ")

Span = tuple[int, int]
"""Start and end (exclusive) in samples."""
Run = tuple[int, int, int]
"""A spoken word as the model voiced it: start and end in samples, and how many phonemes it has."""
Phone = tuple[int, int, str]
"""A phoneme as the model voiced it: start and end in samples, and its IPA (``tts_core.marks.phoneme_timing``)."""


@dataclass(frozen=True)
class TimedAudio:
    """A model's audio for one utterance with each input id's share of it."""

    audio: FloatAudio
    id_samples: IdSamples


@dataclass(frozen=True)
class WordIds:
    """Which ids of a voice break words and which make no sound of a word (framing, punctuation)."""

    breaks: frozenset[int]
    silent: frozenset[int]
    modifiers: frozenset[int]
    """Stress and length marks: they sound with a phoneme, but are not one."""
    symbols: Mapping[int, str] = field(default_factory=dict, compare=False)
    """The symbol each id stands for (phoneme marks); empty where the model's ids are not symbols."""

    @classmethod
    def of(cls, id_map: Mapping[str, Sequence[int]]) -> WordIds:
        """From a voice's symbol-to-ids map (Piper's ``phoneme_id_map``; any model whose ids are symbols)."""

        def ids(symbols: Iterable[str]) -> frozenset[int]:
            return frozenset(i for symbol in symbols for i in id_map.get(symbol, ()))

        symbols: dict[int, str] = {}
        for symbol, mapped in id_map.items():
            for i in mapped:
                symbols.setdefault(i, symbol)
        return cls(ids(WORD_BREAK), ids(SILENT_SYMBOLS), ids(MODIFIER_SYMBOLS), symbols)


def spoken_words(ids: Sequence[int], id_samples: IdSamples, word_ids: WordIds) -> list[Run]:
    """The id runs between word breaks that sound (samples from the utterance's start), each from
    its first to the end of its last sounding id, with its phoneme count."""
    ends = np.cumsum(id_samples)
    words: list[Run] = []
    first: int | None = None
    last = phonemes = 0
    for index, symbol in enumerate(ids):
        if symbol in word_ids.breaks:
            if first is not None:
                words.append((first, last, phonemes))
            first, phonemes = None, 0
        elif symbol not in word_ids.silent and id_samples[index] > 0:
            start = int(ends[index] - id_samples[index])
            first = start if first is None else first
            last = int(ends[index])
            phonemes += symbol not in word_ids.modifiers
    if first is not None:
        words.append((first, last, phonemes))
    return words


def word_runs(ids: Sequence[int], id_samples: IdSamples, words: Sequence[ReadWord], word_ids: WordIds) -> list[Run]:
    """The spoken span of each word a front end read (samples from the utterance's start), from its
    first to the end of its last sounding id, with its phoneme count: one run per word, in order (a
    word without a sounding id gets an empty run where its ids start)."""
    starts = np.concatenate(([0], np.cumsum(id_samples)))
    runs: list[Run] = []
    for word in words:
        first, end = word.ids
        sounding = [i for i in range(first, end) if ids[i] not in word_ids.silent and id_samples[i] > 0]
        if not sounding:
            at = int(starts[min(first, len(id_samples))])
            runs.append((at, at, 0))
            continue
        phonemes = sum(ids[i] not in word_ids.modifiers for i in sounding)
        runs.append((int(starts[sounding[0]]), int(starts[sounding[-1] + 1]), phonemes))
    return runs


@dataclass(frozen=True)
class UtteranceTiming:
    """Where one utterance's audio lies (samples from the start of its segment, or of the job once
    shifted) and its spoken words within it (same origin); ``words`` None if the model gives no
    durations (Kokoro). ``phonemes`` (same origin) only where the job asked for phoneme or viseme
    marks and the model times its ids."""

    start: int
    end: int
    words: list[Run] | None
    phonemes: list[Phone] | None = None

    def shifted(self, by: int) -> UtteranceTiming:
        words = None if self.words is None else [(s + by, e + by, n) for s, e, n in self.words]
        phonemes = None if self.phonemes is None else [(s + by, e + by, p) for s, e, p in self.phonemes]
        return UtteranceTiming(self.start + by, self.end + by, words, phonemes)

    def to_json(self) -> list[object]:
        """``[start, end, words]``, then the phonemes where there are (:func:`phones_to_json`):
        timings stored before phonemes existed read the same."""
        data: list[object] = [self.start, self.end, self.words]
        if self.phonemes is not None:
            data.append(phones_to_json(self.phonemes, self.start))
        return data

    @classmethod
    def from_json(cls, data: list[object]) -> UtteranceTiming:
        start, end, words, *more = data
        spans = None if words is None else [(int(w[0]), int(w[1]), int(w[2])) for w in words]  # type: ignore[attr-defined]
        first = int(str(start))
        phonemes = phones_from_json(more[0], first) if more else None
        return cls(first, int(str(end)), spans, phonemes)


def phones_to_json(phones: Sequence[Phone], origin: int) -> list[object]:
    """Phonemes compactly, as a book has about one for each character of its text: their IPA joined
    by spaces (no phoneme has one), then each one's gap after the one before (from ``origin`` for the
    first) and its length, flat: about 12 bytes a phoneme as stored (UTF-8), not some 25."""
    flat: list[int] = []
    at = origin
    for start, end, _ in phones:
        flat += [start - at, end - start]
        at = end
    return [" ".join(p for _, _, p in phones), flat]


def phones_from_json(data: object, origin: int) -> list[Phone]:
    """:func:`phones_to_json` read back."""
    assert isinstance(data, list)
    values, flat = data
    assert isinstance(values, str)
    assert isinstance(flat, list)
    names = values.split(" ") if values else []
    phones: list[Phone] = []
    at = origin
    for index, name in enumerate(names):
        start = at + int(flat[2 * index])
        at = start + int(flat[2 * index + 1])
        phones.append((start, at, name))
    return phones


@dataclass(frozen=True)
class SegmentTiming:
    """A segment's length in samples and its utterances' timings (from the segment's start)."""

    samples: int
    utterances: list[UtteranceTiming]

    def to_json(self) -> list[object]:
        return [self.samples, [u.to_json() for u in self.utterances]]

    @classmethod
    def from_json(cls, data: list[object]) -> SegmentTiming:
        samples, utterances = data
        assert isinstance(utterances, list)
        return cls(int(str(samples)), [UtteranceTiming.from_json(u) for u in utterances])


MAX_RUNS_PER_WORD: Final = 4
"""A number may be voiced as several runs ("1999": nineteen, ninety, nine)."""
MAX_WORDS_PER_RUN: Final = 3
"""espeak-ng may voice short words as one run ("of the")."""
UNEVEN_COST: Final = 0.5
"""Cost of matching other than one word to one run, in phonemes: a tie goes to one-to-one."""
DIGIT_WEIGHT: Final = 4
"""Phonemes a digit is expected to become, against one per letter."""


Weigh = Callable[[str], int]
"""Phonemes a written word is expected to become."""


def letter_weight(word: str) -> int:
    """A guess without a phonemiser: about one phoneme per letter, more per digit."""
    return sum(DIGIT_WEIGHT if ch.isdigit() else 1 for ch in word if ch.isalnum()) or 1


def allocate(words: Sequence[str], runs: Sequence[Run], whole: Span, weigh: Weigh = letter_weight) -> list[Span]:
    """Spans of the text's ``words`` from the spoken ``runs`` of the same text; ``whole`` is the
    utterance audio, used only when nothing sounds.

    Usually espeak-ng voices each word as one run, but a number may become several and short words
    may join into one. Words and runs are matched in order by dynamic programming: a word takes one
    or more whole runs, or a few words share one run (split by their characters), so that expected
    and voiced phoneme counts agree best.
    """
    if not words:
        return []
    if not runs:
        return _shared(words, whole)
    expected = np.array([weigh(w) for w in words], dtype=np.float64)
    voiced = np.array([max(r[2], 1) for r in runs], dtype=np.float64)
    expected *= voiced.sum() / expected.sum()
    return _matched(words, runs, expected, voiced)


def _matched(
    words: Sequence[str], runs: Sequence[Run], expected: npt.NDArray[np.float64], voiced: npt.NDArray[np.float64]
) -> list[Span]:
    count, available = len(words), len(runs)
    best = np.full((count + 1, available + 1), np.inf)
    step: dict[tuple[int, int], tuple[int, int]] = {}
    best[0, 0] = 0.0
    for i in range(count + 1):
        for j in range(available + 1):
            if not np.isfinite(best[i, j]):
                continue
            moves = [(1, t) for t in range(1, MAX_RUNS_PER_WORD + 1)]
            moves += [(u, 1) for u in range(2, MAX_WORDS_PER_RUN + 1)]
            for took_words, took_runs in moves:
                ni, nj = i + took_words, j + took_runs
                if ni > count or nj > available:
                    continue
                cost = abs(expected[i:ni].sum() - voiced[j:nj].sum())
                cost += 0.0 if took_words == took_runs == 1 else UNEVEN_COST
                if best[i, j] + cost < best[ni, nj]:
                    best[ni, nj] = best[i, j] + cost
                    step[ni, nj] = (i, j)
    if not np.isfinite(best[count, available]):  # too uneven to match: share the time by characters
        return _shared(words, (runs[0][0], runs[-1][1]))
    spans: list[Span] = []
    i, j = count, available
    while i:
        pi, pj = step[i, j]
        group = (runs[pj][0], runs[j - 1][1])
        spans[:0] = _shared(words[pi:i], group) if i - pi > 1 else [group]
        i, j = pi, pj
    return spans


def _shared(words: Sequence[str], span: Span) -> list[Span]:
    """``span`` cut among ``words`` in proportion to their characters."""
    start, end = span
    cumulative = np.cumsum([0, *(len(w) for w in words)])
    edges = [start + round((end - start) * c / cumulative[-1]) for c in cumulative]
    return list(pairwise(edges))
