"""File names made from titles: ``NN-title``, ASCII lowercase words joined by hyphens. One function,
so that a narrated book's folder (``ttsq narrate``) and a batch's zip bundle name a chapter alike."""

from __future__ import annotations

import re
import unicodedata
from typing import Final

MAX_NAME_CHARS: Final = 60
"""Longest ``safe_name``: short enough for any file system and still readable in a listing."""

_FOLD: Final = str.maketrans({"ß": "ss", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
                              "đ": "d", "Đ": "D", "ł": "l", "Ł": "L", "þ": "th", "Þ": "Th", "ð": "d"})  # fmt: skip
"""Letters that Unicode does not decompose into an ASCII base letter."""


def safe_name(index: int, title: str, digits: int = 2) -> str:
    """``NN-title``: a chapter's output file name, ASCII lowercase words joined by hyphens, at most
    ``MAX_NAME_CHARS`` characters and never just the number. ``digits`` pads the number, so that
    a listing of more than 99 chapters still sorts in order."""
    if index < 0:
        raise ValueError(f"chapter index must not be negative, got {index}")
    prefix = f"{index:0{digits}d}-"
    return prefix + (_slug(title, MAX_NAME_CHARS - len(prefix)) or "chapter")


def book_name(title: str | None) -> str:
    """A whole book's file name stem (its ``.m4b``, its zip): the title's words as in ``safe_name``,
    without a number; ``book`` when the title has none in ASCII."""
    return _slug(title or "", MAX_NAME_CHARS) or "book"


def _slug(title: str, most: int) -> str:
    """The title's words, ASCII lowercase and joined by hyphens, cut at a word boundary to ``most``."""
    folded = unicodedata.normalize("NFKD", title.translate(_FOLD)).encode("ascii", "ignore").decode()
    words = re.sub(r"['\u2019`]", "", folded).lower()
    slug = re.sub(r"[^a-z0-9]+", "-", words).strip("-")[:most]
    if len(slug) == most and "-" in slug:
        slug = slug.rsplit("-", 1)[0]  # cut at a word boundary, not inside a word
    return slug.strip("-")
