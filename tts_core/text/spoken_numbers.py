"""Numbers as words, shared by SSML's ``<say-as>`` and text normalisation (num2words underneath).

One place decides how a whole number is parsed, how a telephone number is read digit by digit and
how a cardinal, an ordinal or a year is said, so the two readers of numbers cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Final

from num2words import num2words

_WHOLE: Final = re.compile(r"-?\d+")
_PHONE_GROUPS: Final = re.compile(r"[^0-9+]+")


def whole_number(text: str) -> int:
    """``text`` as a whole number, thousands separators (``,`` and ``_``) allowed; ValueError if not one."""
    digits = text.replace(",", "").replace("_", "").strip()
    if not _WHOLE.fullmatch(digits):
        raise ValueError(f"{text!r} is not a whole number")
    return int(digits)


def cardinal(number: int, lang: str) -> str:
    return str(num2words(number, lang=lang))


def ordinal(number: int, lang: str) -> str:
    return str(num2words(number, lang=lang, to="ordinal"))


def year(number: int, lang: str) -> str:
    """A year as a year is said ("nineteen eighty-four"), not as a quantity."""
    return str(num2words(number, lang=lang, to="year"))


def telephone(text: str, lang: str) -> str:
    """Digit by digit, the groups kept apart by commas (a pause each), ``+`` said as "plus"."""
    groups = [g for g in _PHONE_GROUPS.split(text) if g]
    if not groups:
        raise ValueError(f"{text!r} has no digits")
    return ", ".join(" ".join(cardinal(int(d), lang) if d.isdigit() else "plus" for d in g) for g in groups)
