"""A voice's front end reading text as a :class:`~tts_core.lexicon.pronunciation.Pronunciation` says.

Sentences are still cut from the written text, so every utterance keeps its span there; each
sentence is then read in its spoken form. A front end that can splice IPA into what it reads (a
:class:`PartReader`, Piper's) gets the text and IPA runs; any other reads the spoken text, and the
text offsets of the words it reports are mapped back to the written sentence, so word marks and
subtitles show what was written ("Nguyen", said "win").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from tts_core.base.plan import ReadWord
from tts_core.frontend.segments import FrontEnd, Reading, WordReader
from tts_core.lexicon.pronunciation import Pronunciation
from tts_core.text.first_part import WORD_LIMITS, PhraseBreak, PhraseBreaker, word_breaks
from tts_core.text.spoken_text import SpokenPart, SpokenText


@runtime_checkable
class PartReader(Protocol):
    """A front end that reads text runs and IPA runs as one utterance stream."""

    def read_parts(self, parts: Sequence[SpokenPart]) -> list[Reading]: ...


class SpokenFrontEnd:
    """``inner`` with the pronunciation applied to every sentence it reads."""

    def __init__(self, inner: FrontEnd, pronunciation: Pronunciation) -> None:
        self._inner = inner
        self._pronunciation = pronunciation
        self.max_ids = inner.max_ids
        self.first_part_limits = inner.first_part_limits if isinstance(inner, PhraseBreaker) else WORD_LIMITS

    def phrase_breaks(self, sentence: str) -> list[PhraseBreak]:
        """The inner front end's (``tts_core.text.first_part``), in the written sentence."""
        return self._inner.phrase_breaks(sentence) if isinstance(self._inner, PhraseBreaker) else word_breaks(sentence)

    def sentences(self, text: str) -> list[str]:
        return self._inner.sentences(text)

    def ipa_ids(self, ipa: str) -> list[int]:
        return self._inner.ipa_ids(ipa)

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        return [reading.ids for reading in self.read(sentence)]

    def read(self, sentence: str) -> list[Reading]:
        spoken = self._pronunciation.spoken(sentence)
        if not spoken.changed:
            return _read(self._inner, sentence)
        if isinstance(self._inner, PartReader):
            return self._inner.read_parts(spoken.parts)
        return [_written(reading, spoken) for reading in _read(self._inner, spoken.text)]


def _read(front_end: FrontEnd, text: str) -> list[Reading]:
    if isinstance(front_end, WordReader):
        return front_end.read(text)
    return [Reading(ids) for ids in front_end.phoneme_ids(text)]


def _written(reading: Reading, spoken: SpokenText) -> Reading:
    """The reading with its words' offsets in the written text; words read from one replacement
    (an alias of several words) become one word."""
    if reading.words is None:
        return reading
    words: list[ReadWord] = []
    for word in reading.words:
        text = (spoken.written_start(word.text[0]), spoken.written_end(word.text[1]))
        if words and words[-1].text[1] > text[0]:
            last = words.pop()
            word = ReadWord((last.ids[0], word.ids[1]), (last.text[0], max(last.text[1], text[1])))
        else:
            word = ReadWord(word.ids, text)
        words.append(word)
    return Reading(reading.ids, tuple(words))
