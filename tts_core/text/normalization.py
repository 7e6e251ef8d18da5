"""Text normalisation: written forms a front end misreads, as edits that say them in words.

:func:`spoken_edits` returns where the text should be read differently and what to say there; the
caller applies the edits and keeps its own offsets (word marks, subtitles) by mapping through them.
Text outside an edit is never changed. English rules (``normalization_en``) apply to primary
language ``en``, Japanese ones (``normalization_ja``) to ``ja``; other languages get no edits.

Each rule was kept only where the voice's own front end reads the raw form wrongly, measured on
``bench/normalization_corpus`` by phonemising raw and edited text (espeak-ng ``en-us`` for English,
the Kokoro front end's pyopenjtalk reading for Japanese); ``docs/NORMALIZATION.md`` lists every
rule, what it takes in and leaves alone, and the figures. What each rule matches is written in its
module's docstring.

Every pattern is a regular expression without nested unbounded repetition, and the edits are kept
non-overlapping by marking the characters taken, so the work is linear in the text's length; a
rule that cannot say a match (a number num2words refuses) makes no edit rather than raising.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Final

from tts_core.text.normalization_rule import Edit, Rule
from tts_core.text.scripts import base_language


@dataclass(frozen=True)
class NormalizeOptions:
    """Which rules run; each one off makes its rule make no edit. All on by default."""

    urls: bool = True
    """URLs and domain names: the scheme dropped, ``.`` "dot", ``/`` "slash" and so on."""
    emails: bool = True
    """``ann@example.com``: "ann at example dot com"."""
    phones: bool = True
    """Telephone numbers digit by digit, their groups kept apart."""
    units: bool = True
    """Unit symbols after a number as words, singular after exactly 1."""
    currency: bool = True
    """Amounts with a currency sign: the amount, then the currency, in words."""
    ordinals: bool = True
    """Ordinals espeak-ng misreads (those with thousands separators)."""
    years: bool = True
    """Years where the prose says they are years, and decades."""
    times: bool = True
    """Clock times whose minutes espeak-ng reads as digits ("10:00", "3:05")."""
    abbreviations: bool = True
    """Common abbreviations whose period would end the sentence or whose letters are misread."""
    numbers: bool = True
    """Japanese: numbers before counters, decimals, separated thousands and percentages in kanji."""


NORMALIZE_OPTIONS: Final = tuple(f.name for f in fields(NormalizeOptions))
"""The option names, as the API's request field takes them."""


def _rules(language: str) -> tuple[Rule, ...]:
    primary = base_language(language.strip())
    if primary == "en":
        from tts_core.text.normalization_en import RULES as english

        return english
    if primary == "ja":
        from tts_core.text.normalization_ja import RULES as japanese

        return japanese
    return ()


def spoken_edits(text: str, language: str, options: NormalizeOptions = NormalizeOptions()) -> list[Edit]:
    """The edits that make ``text`` read as said, sorted and non-overlapping.

    Rules run in priority order (emails before URLs, phones before units...); an edit overlapping
    one already taken is dropped.
    """
    taken = bytearray(len(text))
    edits: list[Edit] = []
    for option, pattern, say in _rules(language):
        if not getattr(options, option):
            continue
        for match in pattern.finditer(text):
            try:
                edit = say(match)
            except (ValueError, OverflowError, NotImplementedError, ArithmeticError):
                continue  # num2words refused the number: leave it as written
            if edit is None or edit.start >= edit.end or any(taken[edit.start : edit.end]):
                continue
            if text[edit.start : edit.end] == edit.spoken:
                continue
            taken[edit.start : edit.end] = b"\x01" * (edit.end - edit.start)
            edits.append(edit)
    return sorted(edits, key=lambda e: e.start)


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with each edit's span replaced by what it says (edits sorted, non-overlapping)."""
    parts: list[str] = []
    at = 0
    for edit in edits:
        parts.append(text[at : edit.start])
        parts.append(edit.spoken)
        at = edit.end
    parts.append(text[at:])
    return "".join(parts)
