"""When each phoneme is heard: a model's per-id durations read as IPA phonemes.

Works for any engine whose model says how many samples each input id lasts and whose ids stand for
symbols (:class:`~tts_core.base.timing.WordIds` with ``symbols``): Piper's do, through its graph's
``Ceil`` output. A phoneme is one sounding symbol, with the stress mark before it and the length
marks and diacritics after it (``ˈɑː``); an affricate or diphthong written as two symbols is one
phoneme (:data:`~tts_core.marks.visemes.JOINED_PHONEMES`). Framing, pad, word-break and punctuation ids
make no phoneme; a phoneme the model gave no samples was not voiced and is left out.

Within a word, each phoneme lasts until the next one starts (Piper's pads between phonemes are part
of the sound around them); the last ends with its own last id, so a word's phonemes fill exactly
the span its word timing has (``tts_core.base.timing.spoken_words``) and pauses stay outside.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tts_core.base.timing import IdSamples, Phone, WordIds
from tts_core.marks.visemes import JOINED_PHONEMES, LENGTH_MARKS, STRESS_MARKS, base_phoneme


@dataclass
class _Phoneme:
    symbol: str
    start: int | None = None
    """Where its first voiced id starts; None while none of its ids has samples."""
    end: int = 0
    closed: bool = False
    """A length mark or diacritic followed it: no second symbol joins it any more."""

    def cover(self, start: int, end: int) -> None:
        """Take in one of its ids (in order), if the model gave it any samples."""
        if end > start:
            self.start = start if self.start is None else self.start
            self.end = end


def spoken_phonemes(ids: Sequence[int], id_samples: IdSamples, word_ids: WordIds) -> list[Phone]:
    """The phonemes of an utterance's ids as voiced (samples from the utterance's start), in order;
    none where the ids are not symbols."""
    ends = np.cumsum(id_samples)
    words: list[list[_Phoneme]] = [[]]
    stress: _Phoneme | None = None
    for index, symbol_id in enumerate(ids):
        start, end = int(ends[index] - id_samples[index]), int(ends[index])
        symbol = word_ids.symbols.get(symbol_id)
        word = words[-1]
        if symbol_id in word_ids.breaks:
            words.append([])
            stress = None
        elif symbol is None or symbol_id in word_ids.silent:
            continue
        elif symbol in STRESS_MARKS:
            stress = _Phoneme(symbol)
            stress.cover(start, end)
        elif word and _follows(symbol):
            word[-1].symbol += symbol
            word[-1].closed = True
            word[-1].cover(start, end)
        elif stress is None and word and _joins(word[-1], symbol):
            word[-1].symbol += symbol
            word[-1].cover(start, end)
        else:
            phoneme = stress or _Phoneme("")
            phoneme.symbol += symbol
            phoneme.cover(start, end)
            word.append(phoneme)
            stress = None
    return [phone for word in words for phone in _filled(word)]


def _follows(symbol: str) -> bool:
    """Length marks and diacritics belong to the phoneme before them."""
    return symbol in LENGTH_MARKS or all(unicodedata.combining(ch) for ch in symbol)


def _joins(phoneme: _Phoneme, symbol: str) -> bool:
    return not phoneme.closed and base_phoneme(phoneme.symbol) + symbol in JOINED_PHONEMES


def _filled(word: list[_Phoneme]) -> list[Phone]:
    """A word's voiced phonemes, each until the next one starts, the last until its own end."""
    voiced = [(p.start, p.end, p.symbol) for p in word if p.start is not None]
    return [
        (start, voiced[index + 1][0] if index + 1 < len(voiced) else end, symbol)
        for index, (start, end, symbol) in enumerate(voiced)
    ]
