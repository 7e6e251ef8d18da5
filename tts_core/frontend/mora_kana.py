"""Japanese readings as VOICEVOX writes them: moras (katakana with OpenJTalk's phonemes), accent
phrases, and the AquesTalk-like notation of its ``kana`` field (``コンニチワ'、セ'カイ``).

The notation, as VOICEVOX ENGINE documents it: katakana only; ``'`` after the mora that carries the
accent nucleus (exactly one per phrase); ``/`` between accent phrases, ``、`` between phrases with a
pause; ``_`` before a mora whose vowel is devoiced; ``？`` at the end of an interrogative phrase.
Pure text: no OpenJTalk here (``tts_core.frontend.accent_analysis`` makes phrases from text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tts_core.base.errors import InvalidKana

ACCENT_SYMBOL: Final = "'"
UNVOICE_SYMBOL: Final = "_"
PHRASE_DELIMITER: Final = "/"
PAUSE_DELIMITER: Final = "、"
INTERROGATIVE_MARK: Final = "？"
DEVOICED_VOWELS: Final = frozenset("AIUEO")
"""OpenJTalk's devoiced vowels: the voiced ones in capitals (``desU``)."""
PAUSE_VOWEL: Final = "pau"

_PLAIN: Final = {
    "ア": "a", "イ": "i", "ウ": "u", "エ": "e", "オ": "o", "ン": "N", "ッ": "cl",
    "ァ": "a", "ィ": "i", "ゥ": "u", "ェ": "e", "ォ": "o", "ヲ": "o", "ヰ": "i", "ヱ": "e",
}  # fmt: skip
"""Moras of a vowel alone (the first spelling of a vowel is the one phonemes are written back as)."""
_ROWS: Final = {
    "k": "カキクケコ", "g": "ガギグゲゴ", "s": "サ_スセソ", "z": "ザ_ズゼゾ", "t": "タ__テト", "d": "ダ__デド",
    "n": "ナニヌネノ", "h": "ハヒ_ヘホ", "b": "バビブベボ", "p": "パピプペポ", "m": "マミムメモ",
    "y": "ヤ_ユ_ヨ", "r": "ラリルレロ", "w": "ワ____",
}  # fmt: skip
"""Consonant rows, a i u e o; ``_`` where the row's kana is another consonant's (シ is ``sh i``)."""
_SPECIAL: Final = {
    "シ": ("sh", "i"), "ジ": ("j", "i"), "チ": ("ch", "i"), "ツ": ("ts", "u"), "フ": ("f", "u"),
    "ヂ": ("j", "i"), "ヅ": ("z", "u"), "ヴ": ("v", "u"),
    "スィ": ("s", "i"), "ズィ": ("z", "i"), "ティ": ("t", "i"), "トゥ": ("t", "u"), "ディ": ("d", "i"),
    "ドゥ": ("d", "u"), "ウィ": ("w", "i"), "ウェ": ("w", "e"), "ウォ": ("w", "o"), "イェ": ("y", "e"),
    "クヮ": ("kw", "a"), "グヮ": ("gw", "a"),
}  # fmt: skip
"""Moras outside the plain rows."""
_YOUON: Final = {
    "キ": "ky", "ギ": "gy", "ニ": "ny", "ヒ": "hy", "ビ": "by", "ピ": "py", "ミ": "my", "リ": "ry",
    "シ": "sh", "ジ": "j", "チ": "ch", "テ": "ty", "デ": "dy",
}  # fmt: skip
"""Kana that take a small ャュョ (or ェ) as one mora, with the consonant they then carry."""
_YOUON_VOWELS: Final = {"ャ": "a", "ュ": "u", "ョ": "o", "ェ": "e"}
_FOREIGN: Final = {"フ": "f", "ヴ": "v", "ツ": "ts"}
"""Kana that take a small ァィェォ as one mora (ファ, ヴィ, ツォ)."""
_FOREIGN_VOWELS: Final = {"ァ": "a", "ィ": "i", "ェ": "e", "ォ": "o"}


def _table() -> dict[str, tuple[str | None, str]]:
    table: dict[str, tuple[str | None, str]] = {kana: (None, vowel) for kana, vowel in _PLAIN.items()}
    for consonant, row in _ROWS.items():
        for kana, vowel in zip(row, "aiueo", strict=True):
            if kana != "_":
                table[kana] = (consonant, vowel)
    table.update(_SPECIAL)
    for bases, smalls in ((_YOUON, _YOUON_VOWELS), (_FOREIGN, _FOREIGN_VOWELS)):
        for kana, consonant in bases.items():
            for small, vowel in smalls.items():
                table.setdefault(kana + small, (consonant, vowel))
    return table


MORA_PHONEMES: Final = _table()
"""Every mora VOICEVOX's notation takes, as (consonant or None, vowel) in OpenJTalk's phonemes."""
_KANA_OF: Final = {phonemes: kana for kana, phonemes in reversed(list(MORA_PHONEMES.items()))}
"""Phonemes back to their first spelling in :data:`MORA_PHONEMES` (``o`` is オ, not ヲ)."""
_LONGEST_MORA: Final = max(len(kana) for kana in MORA_PHONEMES)


@dataclass(frozen=True)
class KanaMora:
    """A mora: its katakana and its phonemes (a capital vowel is devoiced)."""

    text: str
    consonant: str | None
    vowel: str

    @property
    def devoiced(self) -> bool:
        return self.vowel in DEVOICED_VOWELS


@dataclass(frozen=True)
class KanaPhrase:
    """An accent phrase: moras, the accent nucleus (1-based mora), a pause after it, a rising end."""

    moras: tuple[KanaMora, ...]
    accent: int
    pause: bool = False
    interrogative: bool = False


def mora_of(consonant: str | None, vowel: str) -> KanaMora:
    """The mora of OpenJTalk's phonemes (``ky`` + ``o``: キョ); unknown pairs keep their phonemes as text."""
    voiced = vowel.lower() if vowel in DEVOICED_VOWELS else vowel
    text = _KANA_OF.get((consonant, voiced), f"{consonant or ''}{vowel}")
    return KanaMora(text, consonant, vowel)


def write_kana(phrases: list[KanaPhrase]) -> str:
    """The phrases in the notation (:func:`parse_kana` reads it back to the same phrases)."""
    parts: list[str] = []
    for index, phrase in enumerate(phrases):
        for number, mora in enumerate(phrase.moras, start=1):
            parts.append((UNVOICE_SYMBOL if mora.devoiced else "") + mora.text)
            if number == phrase.accent:
                parts.append(ACCENT_SYMBOL)
        if phrase.interrogative:
            parts.append(INTERROGATIVE_MARK)
        if index < len(phrases) - 1:
            parts.append(PAUSE_DELIMITER if phrase.pause else PHRASE_DELIMITER)
    return "".join(parts)


def parse_kana(kana: str) -> list[KanaPhrase]:
    """Phrases of a reading in the notation; :class:`InvalidKana` naming the first character at fault."""
    if not kana:
        raise InvalidKana("the reading is empty", 1)
    phrases: list[KanaPhrase] = []
    start = 0
    for end in range(len(kana) + 1):
        if end == len(kana) or kana[end] in (PHRASE_DELIMITER, PAUSE_DELIMITER):
            if end == start:  # at the delimiter that ends it, or the last one
                raise InvalidKana("an accent phrase is empty", min(start + 1, len(kana)))
            pause = end < len(kana) and kana[end] == PAUSE_DELIMITER
            phrases.append(_phrase(kana[start:end], start, pause))
            start = end + 1
    return phrases


def _phrase(text: str, offset: int, pause: bool) -> KanaPhrase:
    """One phrase's text; ``offset`` its first character's index in the whole reading."""
    interrogative = text.endswith(INTERROGATIVE_MARK)
    body = text[:-1] if interrogative else text
    moras: list[KanaMora] = []
    accent: int | None = None
    index = 0
    while index < len(body):
        char = body[index]
        if char == ACCENT_SYMBOL:
            if not moras:
                raise InvalidKana("an accent mark before the phrase's first mora", offset + index + 1)
            if accent is not None:
                raise InvalidKana("a second accent mark in one phrase", offset + index + 1)
            accent = len(moras)
            index += 1
            continue
        mora, used = _mora_at(body, index, offset)
        moras.append(mora)
        index += used
    if not moras:
        raise InvalidKana("an accent phrase without moras", offset + 1)
    if accent is None:
        raise InvalidKana("an accent phrase without its accent mark (')", offset + len(text))
    return KanaPhrase(tuple(moras), accent, pause, interrogative)


def _mora_at(body: str, index: int, offset: int) -> tuple[KanaMora, int]:
    """The longest mora at ``index`` (キャ before キ) and how many characters it used."""
    devoiced = body[index] == UNVOICE_SYMBOL
    start = index + 1 if devoiced else index
    for length in range(min(_LONGEST_MORA, len(body) - start), 0, -1):
        kana = body[start : start + length]
        if kana in MORA_PHONEMES:
            consonant, vowel = MORA_PHONEMES[kana]
            if devoiced:
                if vowel not in "aiueo":
                    raise InvalidKana(f"{kana} has no vowel to devoice", offset + index + 1)
                vowel = vowel.upper()
            return KanaMora(kana, consonant, vowel), start - index + length
    where = offset + start + 1
    if start >= len(body):
        raise InvalidKana("_ must stand before a mora", where - 1)
    if body[start] == INTERROGATIVE_MARK:
        raise InvalidKana("？ may only end an accent phrase", where)
    raise InvalidKana(f"{body[start]!r} is not a katakana mora", where)
