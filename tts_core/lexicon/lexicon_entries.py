"""Checking lexicon entries that tenants send, and ttsq's JSON lexicon form.

Both forms (W3C PLS in ``tts_core.lexicon.lexicon_documents``, JSON here) build :class:`LexiconEntry`
values and pass each through :func:`check_entry`, so one set of rules decides what a lexicon may
hold. Every refusal is an :class:`InvalidLexicon` that says where: the entry (``entries[2]
('Nguyen')`` in JSON, ``lexeme 3 ('Nguyen')`` in PLS) and what is wrong with it.

JSON form::

    {"language": "en-US", "entries": [
        {"graphemes": ["Nguyen"], "alias": "win"},
        {"graphemes": ["Nguyen"], "phoneme": "ŋwiən", "alphabet": "ipa"},
        {"graphemes": ["夏目"], "reading": "ナツメ", "accent": 1, "case_sensitive": true}]}
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import ACCENT_MARK, PHONEME_ALPHABETS, Lexicon, LexiconEntry, mora_count
from tts_core.text.scripts import base_language


@dataclass(frozen=True)
class LexiconLimits:
    """How large a lexicon a tenant may upload."""

    max_entries: int = 10_000
    """Entries (PLS lexemes) per lexicon."""
    max_bytes: int = 1_048_576
    """Bytes of the document as uploaded (checked by ``parse_pls``; for JSON, by whoever reads the body)."""
    max_grapheme_chars: int = 100
    max_pronunciation_chars: int = 200
    """Of an alias, a phoneme or a reading."""


DEFAULT_LIMITS: Final = LexiconLimits()
"""The limits a lexicon is held to unless its caller says otherwise."""
LANGUAGE_TAG: Final = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*")
"""What a BCP 47 tag looks like, closely enough to catch mistakes (``english``, ``en_US``)."""
READING_LANGUAGE: Final = "ja"
"""Katakana readings reach a Japanese G2P: only lexicons of this primary language may hold them."""
IPA_MARKS: Final = frozenset(" .|‖‿ˈˌːˑ\u0361\u035c")
"""Besides letters, modifier letters and combining diacritics: space, syllable break, group
marks, linking, stress, length and tie bars."""
NOT_XML: Final = frozenset("\ufffe\uffff")
"""Non-characters XML 1.0 cannot hold (with surrogates and control characters, refused apart): a
JSON lexicon holding them could not be exported as PLS (``tts_core.lexicon.pls_writer``)."""
_ENTRY_KEYS: Final = frozenset({"graphemes", "alias", "phoneme", "alphabet", "reading", "accent", "case_sensitive"})
_PRONUNCIATIONS: Final = ("alias", "phoneme", "reading")


def entry_place(label: str, graphemes: list[str] | tuple[str, ...]) -> str:
    """``lexeme 3 ('Nguyen')``: an entry's label (``lexeme 3``, ``entries[2]``) and first grapheme."""
    return f"{label} ({graphemes[0]!r})" if graphemes and graphemes[0] else label


def normalise_space(text: str) -> str:
    """Stripped, with each run of white space one space (as PLS reads text)."""
    return " ".join(text.split())


def check_language(language: str, where: str) -> None:
    if not LANGUAGE_TAG.fullmatch(language):
        raise InvalidLexicon(f"{where}: language {language!r} is not a BCP 47 tag such as en-US or ja")


def split_accent(text: str, where: str) -> tuple[str, int | None]:
    """A reading without its accent mark, and the accent the mark gives: the moras before it (0, flat,
    for a mark written first; None without one)."""
    if ACCENT_MARK not in text:
        return text, None
    if text.count(ACCENT_MARK) > 1:
        raise InvalidLexicon(f"{where}: reading {text!r} has more than one accent mark {ACCENT_MARK!r}")
    before, after = text.split(ACCENT_MARK)
    return before + after, mora_count(before)


def check_entry(entry: LexiconEntry, language: str, where: str, limits: LexiconLimits) -> None:
    """Refuse an entry that no voice of ``language`` could use, naming ``where`` it is."""
    given = [name for name in _PRONUNCIATIONS if getattr(entry, name) is not None]
    if len(given) != 1:
        raise InvalidLexicon(f"{where}: needs exactly one of alias, phoneme, reading; got {', '.join(given) or 'none'}")
    if not entry.graphemes:
        raise InvalidLexicon(f"{where}: has no grapheme")
    for number, grapheme in enumerate(entry.graphemes, 1):
        _check_text(f"grapheme {number}", grapheme, limits.max_grapheme_chars, where)
    name = given[0]
    text: str = getattr(entry, name)
    _check_text(name, text, limits.max_pronunciation_chars, where)
    if name == "phoneme":
        _check_ipa(text, where)
    if name == "reading":
        _check_reading(entry, language, where)
    elif entry.accent is not None:
        raise InvalidLexicon(f"{where}: accent goes only with a reading")


def _check_text(name: str, text: str, limit: int, where: str) -> None:
    if not text.strip():
        raise InvalidLexicon(f"{where}: {name} is empty")
    if len(text) > limit:
        raise InvalidLexicon(f"{where}: {name} has {len(text)} characters; at most {limit}")
    control = next((ch for ch in text if unicodedata.category(ch) == "Cc"), None)
    if control is not None:
        raise InvalidLexicon(f"{where}: {name} holds the control character {control!r}")
    unfit = next((ch for ch in text if ch in NOT_XML or unicodedata.category(ch) == "Cs"), None)
    if unfit is not None:
        raise InvalidLexicon(f"{where}: {name} holds U+{ord(unfit):04X}, which no XML (PLS) document can hold")


def _check_ipa(phoneme: str, where: str) -> None:
    for ch in phoneme:
        if ch in "0123456789":
            raise InvalidLexicon(f"{where}: phoneme {phoneme!r} holds the digit {ch!r}; IPA has no digits")
        if not _plausible_ipa(ch):
            name = unicodedata.name(ch, f"U+{ord(ch):04X}")
            raise InvalidLexicon(f"{where}: phoneme {phoneme!r} holds {ch!r} ({name}), which is not IPA")


def _plausible_ipa(ch: str) -> bool:
    category = unicodedata.category(ch)
    if ch in IPA_MARKS or category == "Lm" or (category == "Mn" and "\u0300" <= ch <= "\u036f"):
        return True
    return category.startswith("L") and unicodedata.name(ch, "").startswith(("LATIN ", "GREEK "))


def _check_reading(entry: LexiconEntry, language: str, where: str) -> None:
    reading = entry.reading or ""
    if base_language(language) != READING_LANGUAGE:
        raise InvalidLexicon(f"{where}: a katakana reading belongs in a Japanese (ja) lexicon, not {language}")
    for ch in reading:
        if ch == ACCENT_MARK:
            raise InvalidLexicon(f"{where}: reading {reading!r} holds the accent mark; give the accent apart")
        if not ("\u30a1" <= ch <= "\u30fa" or ch == "ー"):
            name = unicodedata.name(ch, f"U+{ord(ch):04X}")
            raise InvalidLexicon(f"{where}: reading {reading!r} holds {ch!r} ({name}); a reading is katakana only")
    moras = mora_count(reading)
    if entry.accent is not None and not 0 <= entry.accent <= moras:
        raise InvalidLexicon(f"{where}: accent {entry.accent} is outside 0..{moras} (the reading's moras)")


def parse_json_lexicon(data: object, limits: LexiconLimits = DEFAULT_LIMITS) -> Lexicon:
    """A lexicon from ttsq's JSON form (already decoded); :class:`InvalidLexicon` naming the entry
    (``entries[i]``, counted from 0) and the problem."""
    if not isinstance(data, dict):
        raise InvalidLexicon("a JSON lexicon is an object with language and entries")
    unknown = sorted(set(data) - {"language", "entries"})
    if unknown:
        raise InvalidLexicon(f"unknown keys in the lexicon: {', '.join(map(str, unknown))}")
    language, entries = data.get("language"), data.get("entries")
    if not isinstance(language, str):
        raise InvalidLexicon("language must be a string such as en-US or ja")
    check_language(language, "language")
    if not isinstance(entries, list):
        raise InvalidLexicon("entries must be a list")
    if len(entries) > limits.max_entries:
        raise InvalidLexicon(f"entries: {len(entries)} entries; at most {limits.max_entries}")
    return Lexicon(language, tuple(_json_entry(item, language, i, limits) for i, item in enumerate(entries)))


def _json_entry(item: object, language: str, index: int, limits: LexiconLimits) -> LexiconEntry:
    if not isinstance(item, dict):
        raise InvalidLexicon(f"entries[{index}]: an entry is an object")
    graphemes = item.get("graphemes")
    if not isinstance(graphemes, list) or not graphemes or not all(isinstance(g, str) for g in graphemes):
        raise InvalidLexicon(f"entries[{index}]: graphemes must be a non-empty list of strings")
    graphemes = [normalise_space(g) for g in graphemes]
    where = entry_place(f"entries[{index}]", graphemes)
    unknown = sorted(set(item) - _ENTRY_KEYS)
    if unknown:
        raise InvalidLexicon(f"{where}: unknown keys {', '.join(map(str, unknown))}")
    texts = {name: _json_text(item, name, where) for name in (*_PRONUNCIATIONS, "alphabet")}
    if texts["alphabet"] is not None and (texts["phoneme"] is None or texts["alphabet"] not in PHONEME_ALPHABETS):
        raise InvalidLexicon(f"{where}: alphabet goes only with a phoneme, and must be ipa; got {texts['alphabet']!r}")
    accent, case_sensitive = item.get("accent"), item.get("case_sensitive", False)
    if accent is not None and (not isinstance(accent, int) or isinstance(accent, bool)):
        raise InvalidLexicon(f"{where}: accent must be a whole number")
    if not isinstance(case_sensitive, bool):
        raise InvalidLexicon(f"{where}: case_sensitive must be true or false")
    reading = texts["reading"]
    if reading is not None:
        reading, marked = split_accent(reading, where)
        if marked is not None and accent is not None and marked != accent:
            raise InvalidLexicon(f"{where}: the reading's accent mark says {marked}, accent says {accent}")
        accent = marked if accent is None else accent
    entry = LexiconEntry(tuple(graphemes), texts["alias"], texts["phoneme"], reading, accent, case_sensitive)
    check_entry(entry, language, where, limits)
    return entry


def _json_text(item: dict[object, object], name: str, where: str) -> str | None:
    value = item.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidLexicon(f"{where}: {name} must be a string")
    return None if value is None else normalise_space(value)
