"""Where normalised text came from: offsets in normalised text mapped back to the submitted text.

Timing marks name characters of the text as submitted, while sentences and utterances are cut from
its normalised form (``tts_core.text.sentences.normalize_text``: NFC, control characters as spaces, whitespace
runs collapsed). Normalising never joins or splits the runs of non-space characters ("tokens"), so
the n-th token of one is the n-th token of the other, and an offset maps through its token.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator
from typing import Final

_NORMALIZED_TOKEN: Final = re.compile(r"\S+")
_SPACE_LIKE: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
"""Character categories ``normalize_text`` turns into spaces."""


def raw_tokens(text: str) -> Iterator[tuple[int, int]]:
    """Spans of the runs of characters that are neither whitespace nor turned into spaces."""
    start: int | None = None
    for index, ch in enumerate(text):
        blank = ch.isspace() or unicodedata.category(ch) in _SPACE_LIKE
        if blank and start is not None:
            yield start, index
            start = None
        elif not blank and start is None:
            start = index
    if start is not None:
        yield start, len(text)


class OffsetMap:
    """Maps offsets in ``normalized`` (``normalize_text(raw)``) to offsets in the text ``raw`` came
    from, ``raw`` starting at ``base`` there. ``usable`` is False if the tokens do not pair up (a
    case normalisation was not expected to make); then nothing maps."""

    def __init__(self, raw: str, normalized: str, base: int = 0) -> None:
        self._raw = [(base + start, base + end) for start, end in raw_tokens(raw)]
        self._normalized = [(m.start(), m.end()) for m in _NORMALIZED_TOKEN.finditer(normalized)]
        self._starts = [start for start, _ in self._normalized]
        self.usable = len(self._raw) == len(self._normalized)

    def start(self, offset: int) -> int:
        """Where the character at normalised ``offset`` (a token's, not a space) starts in the raw text."""
        token = bisect_right(self._starts, offset) - 1
        return self._map(token, offset)

    def end(self, offset: int) -> int:
        """Where a span ending (exclusively) at normalised ``offset`` ends in the raw text."""
        token = bisect_right(self._starts, offset - 1) - 1
        return self._map(token, offset)

    def _map(self, token: int, offset: int) -> int:
        raw_start, raw_end = self._raw[token]
        return min(raw_start + offset - self._normalized[token][0], raw_end)
