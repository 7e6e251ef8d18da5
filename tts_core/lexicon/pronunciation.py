"""How one job's text is spoken by one voice: the lexicons that apply (the job's in its order, then
the voice's defaults) and the text normalisation options, turned into a :class:`SpokenText` per
piece of text the front end reads.

Lexicon entries win over normalisation where both would change the same characters (an entry for
"3M" beats reading it as a number). Reading entries (katakana) are not replacements: they go to the
Japanese G2P as a user dictionary (``tts_core.lexicon.kokoro_dictionary``), listed in :attr:`readings`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Final, Protocol

from tts_core.base.timing import Weigh
from tts_core.lexicon.lexicon import Lexicon, LexiconEntry
from tts_core.lexicon.lexicon_match import GraphemeIndex, LexiconMatcher
from tts_core.text.scripts import base_language
from tts_core.text.sentences import has_speech
from tts_core.text.spoken_text import Replacement, SpokenText, merged


class Edit(Protocol):
    """A normalisation edit (``tts_core.text.normalization.Edit``): ``text[start:end]`` spoken as ``spoken``."""

    @property
    def start(self) -> int: ...

    @property
    def end(self) -> int: ...

    @property
    def spoken(self) -> str: ...


Normalizer = Callable[[str], Sequence[Edit]]
"""The normalisation edits of a text (the language and options already chosen)."""


class Pronunciation:
    """Lexicons (in order of priority) and normalisation for one voice's language."""

    def __init__(
        self, lexicons: Sequence[Lexicon | GraphemeIndex], language: str, normalizer: Normalizer | None = None
    ) -> None:
        """Lexicons given indexed (as a worker keeps them per version) cost nothing to combine; others
        are indexed here."""
        self.language = base_language(language)
        indexes = [GraphemeIndex.of(lexicon) for lexicon in lexicons]
        applicable = [index for index in indexes if index.lexicon.primary_language == self.language]
        self._matcher = LexiconMatcher(applicable)
        self._normalizer = normalizer
        self.readings: tuple[LexiconEntry, ...] = tuple(entry for index in applicable for entry in index.readings)
        """Katakana entries of the lexicons, in priority order (the first of a grapheme wins)."""

    @property
    def changes_anything(self) -> bool:
        """Whether it may change how any text is read (else the plain front end does the same)."""
        return bool(self._matcher) or self._normalizer is not None or bool(self.readings)

    def spoken(self, written: str) -> SpokenText:
        lexical = [_replacement(m.start, m.end, m.entry) for m in self._matcher.find(written)]
        normal = [Replacement(e.start, e.end, e.spoken) for e in self._normalizer(written)] if self._normalizer else []
        return SpokenText(written, tuple(merged(lexical, normal)))


def spoken_weight(weigh: Weigh, pronunciation: Pronunciation) -> Weigh:
    """``weigh`` of a written word's spoken form: a word a lexicon or a rule replaces weighs what it
    is said as (an IPA word its symbols), so words are matched with what the model voiced."""

    @lru_cache(maxsize=65536)
    def spoken_weigh(word: str) -> int:
        spoken = pronunciation.spoken(word)
        if not spoken.changed:
            return weigh(word)
        total = 0
        for part in spoken.parts:
            if part.ipa:
                total += sum(ch.isalpha() and ch not in IPA_NOT_PHONEMES for ch in part.text)
            else:
                total += sum(weigh(token) for token in part.text.split() if has_speech(token))
        return max(total, 1)

    return spoken_weigh


IPA_NOT_PHONEMES: Final = frozenset("ˈˌːˑ")
"""Stress and length marks: letters to ``str.isalpha``, no phoneme of their own."""


def _replacement(start: int, end: int, entry: LexiconEntry) -> Replacement:
    if entry.phoneme is not None:
        return Replacement(start, end, entry.phoneme, ipa=True)
    assert entry.alias is not None
    return Replacement(start, end, entry.alias)
