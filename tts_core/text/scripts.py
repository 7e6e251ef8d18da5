"""Which writing systems a voice can read, so that text it cannot speak is refused up front.

An English voice given only Japanese would spell out "Japanese letter…" for seconds and call it a
success. Each voice's language maps to the Unicode scripts of its letters; a text whose letters are
all in other scripts is refused, while a mix (an English sentence with a Japanese name) and a text
with no letters at all (digits, which every front end reads) are accepted. Script membership is
Unicode's ``Script`` property, through the ``regex`` package.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Final

import regex

_LATIN_LANGUAGES: Final = (
    "en", "de", "fr", "es", "it", "pt", "nl", "da", "sv", "nb", "no", "fi", "is", "pl", "cs", "sk",
    "sl", "hr", "hu", "ro", "ca", "eu", "gl", "cy", "ga", "lb", "lv", "lt", "et", "tr", "sw", "vi",
    "id", "ms", "sq", "af", "eo", "mt",
)  # fmt: skip

LANGUAGE_SCRIPTS: Final[dict[str, frozenset[str]]] = {
    **{lang: frozenset({"Latin"}) for lang in _LATIN_LANGUAGES},
    **{lang: frozenset({"Cyrillic"}) for lang in ("ru", "uk", "be", "bg", "mk", "sr", "kk", "mn")},
    **{lang: frozenset({"Arabic"}) for lang in ("ar", "fa", "ur")},
    "el": frozenset({"Greek"}),
    "he": frozenset({"Hebrew"}),
    "hi": frozenset({"Devanagari"}),
    "ne": frozenset({"Devanagari"}),
    "ka": frozenset({"Georgian"}),
    "ko": frozenset({"Hangul"}),
    "th": frozenset({"Thai"}),
    "zh": frozenset({"Han"}),
    "ja": frozenset({"Hiragana", "Katakana", "Han"}),
}
"""Base language code (``en`` of ``en_US``) -> scripts of the letters its voices read."""

_LETTER: Final = regex.compile(r"\p{L}")
_DETECTED: Final = tuple(sorted({script for scripts in LANGUAGE_SCRIPTS.values() for script in scripts}))


def base_language(code: str) -> str:
    """``en_US``, ``en-us`` and ``EN`` -> ``en``."""
    return code.replace("-", "_").split("_")[0].lower()


def scripts_of(language: str) -> frozenset[str]:
    """Scripts a voice of ``language`` reads; empty for a language not listed (nothing is refused)."""
    return LANGUAGE_SCRIPTS.get(base_language(language), frozenset())


@cache
def _pattern(scripts: frozenset[str]) -> regex.Pattern[str]:
    return regex.compile("[" + "".join(rf"\p{{Script={name}}}" for name in sorted(scripts)) + "]")


def can_speak(text: str, scripts: frozenset[str]) -> bool:
    """Whether ``text`` has something a voice reading ``scripts`` can speak: a letter in one of them,
    or no letter at all. A voice of an unlisted language (no scripts) speaks everything."""
    if not scripts or _LETTER.search(text) is None:
        return True
    return _pattern(scripts).search(text) is not None


def letter_scripts(text: str) -> list[str]:
    """Known scripts that have letters in ``text`` (to name them in an error), most letters first."""
    counts = {name: len(_pattern(frozenset({name})).findall(text)) for name in _DETECTED}
    return [name for name, count in sorted(counts.items(), key=lambda item: -item[1]) if count]


def speakers_of(text: str, voices: Iterable[tuple[str, str]]) -> list[str]:
    """Ids of the ``(voice id, language)`` pairs that can speak ``text``."""
    return [voice_id for voice_id, language in voices if can_speak(text, scripts_of(language))]
