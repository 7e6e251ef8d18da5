"""A pronunciation lexicon as ttsq keeps it: entries that say how written words are spoken.

One model for every engine: an entry names one or more graphemes (written forms) and says how they
are spoken, by an ``alias`` (other text, read as usual), a ``phoneme`` string (IPA, spoken as
given), or a ``reading`` (katakana, Japanese voices: it reaches the G2P as a user dictionary word,
with an optional ``accent``, the mora of the accent nucleus, 0 for none). A lexicon has one
language (BCP 47, ``en-US``, ``ja``); it applies to voices of that primary language.

Parsing (W3C PLS 1.0 and ttsq's JSON) lives in ``tts_core.lexicon.lexicon_documents``; matching graphemes
in text in ``tts_core.lexicon.lexicon_match``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tts_core.text.scripts import base_language

PHONEME_ALPHABETS: Final = ("ipa",)
"""The phoneme alphabets an entry may use."""
IPA_SYLLABLE_MARKS: Final = frozenset(".‿|‖")
"""Syllable and group marks of IPA, not said: Piper's map reads ``.`` and ``|`` as punctuation (a
pause), so a lexicon's IPA reaches a model without them."""


@dataclass(frozen=True)
class LexiconEntry:
    """How its graphemes are spoken: exactly one of ``alias``, ``phoneme``, ``reading``."""

    graphemes: tuple[str, ...]
    alias: str | None = None
    phoneme: str | None = None
    """IPA."""
    reading: str | None = None
    """Katakana (Japanese voices)."""
    accent: int | None = None
    """With ``reading``: the mora that carries the accent nucleus (0: flat); None: the dictionary's guess."""
    case_sensitive: bool = False
    """Graphemes match only as written; by default they match in any case."""

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"graphemes": list(self.graphemes)}
        for name in ("alias", "phoneme", "reading", "accent"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.phoneme is not None:
            data["alphabet"] = "ipa"
        if self.case_sensitive:
            data["case_sensitive"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LexiconEntry:
        """The stored form (:meth:`to_json`); input from users goes through ``lexicon_documents``."""
        accent = data.get("accent")
        return cls(
            tuple(str(g) for g in data["graphemes"]),  # type: ignore[attr-defined]
            _text(data.get("alias")),
            _text(data.get("phoneme")),
            _text(data.get("reading")),
            None if accent is None else int(str(accent)),
            bool(data.get("case_sensitive", False)),
        )


@dataclass(frozen=True)
class Lexicon:
    """A language and its entries, in document order (the first entry of a grapheme wins)."""

    language: str
    entries: tuple[LexiconEntry, ...]

    @property
    def primary_language(self) -> str:
        """``en`` of ``en-US``: what a voice's language must share for the lexicon to apply."""
        return base_language(self.language)

    def to_json(self) -> dict[str, object]:
        return {"language": self.language, "entries": [e.to_json() for e in self.entries]}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Lexicon:
        entries = data["entries"]
        assert isinstance(entries, list)
        return cls(str(data["language"]), tuple(LexiconEntry.from_json(e) for e in entries))


def _text(value: object) -> str | None:
    return None if value is None else str(value)


SMALL_KANA: Final = frozenset("ァィゥェォャュョヮヵヶ")
"""Katakana that join the mora before them (a small ッ and the long-vowel mark ー are moras of their own)."""
ACCENT_MARK: Final = "'"
"""In a reading, written after the mora that carries the accent nucleus (``ナツ'メ``: accent 2);
written first, before any mora, it says the reading is flat (``'ナツメ``: accent 0)."""


def mora_count(katakana: str) -> int:
    """Moras of a katakana reading (the accent mark not counted)."""
    return sum(ch not in SMALL_KANA and ch != ACCENT_MARK for ch in katakana)


def marked_reading(reading: str, accent: int | None) -> str:
    """The reading with its accent as a mark (:data:`ACCENT_MARK`), as PLS documents write it: after
    the accented mora and the small kana that join it; first for 0; no mark for None."""
    if accent is None:
        return reading
    moras = 0
    for index, ch in enumerate(reading):
        if ch not in SMALL_KANA:
            if moras == accent:
                return reading[:index] + ACCENT_MARK + reading[index:]
            moras += 1
    return reading + ACCENT_MARK
