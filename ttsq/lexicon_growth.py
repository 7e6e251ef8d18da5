"""How much longer a job's lexicons may make what it speaks than what it was written with, known at
submit without compiling them.

An entry speaks its grapheme as its pronunciation (an alias, IPA or a reading), which may be far
longer: "b" aliased to 200 characters made a 999-character job, still interactive, plan 1,000
segments and 1,262 s of audio, and another tenant's short job waited 62 s. So a job's priority, its
admission against ``max_text_chars`` and its tenant's day, and its charge are judged on its spoken
size: its written size plus this module's bound of what its lexicons add.

The bound: every match of a grapheme starts at a word (whole-word matching) or at any character (in
languages written without spaces, ``tts_core.lexicon.lexicon_match.SPACELESS_LANGUAGES``), and no two
matches of one lexicon start at the same place. Adding, at each place of the text, the most that any
entry whose grapheme starts there adds bounds what that lexicon's matches add; summed over a job's
lexicons it bounds theirs. It is exact for single-word graphemes that all match, counts a
multi-word grapheme wherever its first word is, and costs one pass over the text (a ``Counter`` of
its words or characters) whatever the lexicon's size. The worker plans the exact text, and replaces
the estimated audio by the plan's (``workers.pipeline``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tts_core.lexicon.lexicon import Lexicon, LexiconEntry
from tts_core.lexicon.lexicon_match import SPACELESS_LANGUAGES
from ttsq.estimate import estimate_audio_s

_PLACE: Final = re.compile(r"\w+|[^\w\s]")
"""Where a whole-word match can start: a word, or a character that is neither word nor space."""


@dataclass(frozen=True)
class Growth:
    """What lexicons may add to a text: characters, and seconds of speech (as ``ttsq.estimate`` counts)."""

    characters: int = 0
    seconds: float = 0.0

    def __add__(self, other: Growth) -> Growth:
        return Growth(self.characters + other.characters, self.seconds + other.seconds)


NO_GROWTH: Final = Growth()


def _folded(text: str) -> str:
    """As matching compares graphemes: NFC and case-folded (a case-sensitive entry is counted in any
    case: the bound may only be larger)."""
    return unicodedata.normalize("NFC", text).casefold()


def _pronunciation(entry: LexiconEntry) -> str:
    return entry.alias or entry.phoneme or entry.reading or ""


class LexiconGrowth:
    """One lexicon's bound, by the place a grapheme starts at: its first word, or its first character."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.anywhere = lexicon.primary_language in SPACELESS_LANGUAGES
        self._at: dict[str, Growth] = {}
        for entry in lexicon.entries:
            spoken = _pronunciation(entry)
            for grapheme in entry.graphemes:
                self._add(grapheme, spoken)

    def _add(self, grapheme: str, spoken: str) -> None:
        characters = len(spoken) - len(grapheme)
        seconds = estimate_audio_s(spoken) - estimate_audio_s(grapheme)
        place = self._places(grapheme)
        if (characters <= 0 and seconds <= 0) or not place:
            return
        key = next(iter(place))
        known = self._at.get(key, NO_GROWTH)
        self._at[key] = Growth(max(known.characters, characters), max(known.seconds, seconds))

    def _places(self, text: str) -> str | list[str]:
        """Where a match may start: each character, or each word and symbol."""
        folded = _folded(text)
        return folded if self.anywhere else _PLACE.findall(folded)

    def __bool__(self) -> bool:
        return bool(self._at)

    def of(self, text: str) -> Growth:
        """At most what this lexicon's matches add to ``text``."""
        if not self._at:
            return NO_GROWTH
        places = Counter(self._places(text))
        keys = places.keys() & self._at.keys()
        characters = sum(self._at[key].characters * places[key] for key in keys)
        return Growth(characters, sum(self._at[key].seconds * places[key] for key in keys))


def growth_of(lexicons: Iterable[LexiconGrowth], text: str) -> Growth:
    """At most what all of ``lexicons`` together add to ``text``."""
    total = NO_GROWTH
    for lexicon in lexicons:
        total += lexicon.of(text)
    return total
