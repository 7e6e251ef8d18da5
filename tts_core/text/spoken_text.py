"""Text as it will be spoken: the written text with lexicon entries and normalisation applied, and
the way back from each spoken character to the written one.

What the listener hears changes, what the reader sees does not: the front end reads the spoken
text, while timing marks and subtitles point at the written text, so every offset a front end gives
in the spoken text is mapped back through the replacements (:meth:`SpokenText.written_start`,
:meth:`SpokenText.written_end`). A replacement is atomic: any offset inside it maps to its whole
written span.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Replacement:
    """``written[start:end]`` is spoken as ``spoken``: text, or IPA where ``ipa`` (said as given)."""

    start: int
    end: int
    spoken: str
    ipa: bool = False


@dataclass(frozen=True)
class SpokenPart:
    """A run of the spoken text: words to read, or IPA to say as given."""

    text: str
    ipa: bool = False


@dataclass(frozen=True)
class SpokenText:
    """The spoken form of one written text."""

    written: str
    replacements: tuple[Replacement, ...]
    """In order, none overlapping."""
    text: str = field(init=False)
    """Text parts joined, each IPA part as one space (what a front end without IPA support reads)."""
    _spoken_starts: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        pieces: list[str] = []
        starts: list[int] = []
        at = cursor = 0
        for r in self.replacements:
            pieces.append(self.written[cursor : r.start])
            at += r.start - cursor
            starts.append(at)
            spoken = " " if r.ipa else r.spoken
            pieces.append(spoken)
            at += len(spoken)
            cursor = r.end
        pieces.append(self.written[cursor:])
        object.__setattr__(self, "text", "".join(pieces))
        object.__setattr__(self, "_spoken_starts", tuple(starts))

    @property
    def changed(self) -> bool:
        return bool(self.replacements)

    @property
    def parts(self) -> list[SpokenPart]:
        """Text and IPA runs in order; consecutive text joined."""
        parts: list[SpokenPart] = []
        text: list[str] = []
        cursor = 0
        for r in self.replacements:
            text.append(self.written[cursor : r.start])
            if r.ipa:
                parts.append(SpokenPart("".join(text)))
                parts.append(SpokenPart(r.spoken, ipa=True))
                text = []
            else:
                text.append(r.spoken)
            cursor = r.end
        text.append(self.written[cursor:])
        parts.append(SpokenPart("".join(text)))
        return [p for p in parts if p.text]

    def written_start(self, offset: int) -> int:
        """Where the character at spoken ``offset`` comes from (a replacement's start, inside one)."""
        index = bisect_right(self._spoken_starts, offset) - 1
        if index < 0:
            return offset
        r, spoken_at = self.replacements[index], self._spoken_starts[index]
        length = 1 if r.ipa else len(r.spoken)
        if offset < spoken_at + length:
            return r.start
        return r.end + offset - (spoken_at + length)

    def written_end(self, offset: int) -> int:
        """Where a spoken span ending (exclusively) at ``offset`` ends in the written text."""
        if offset <= 0:
            return offset
        index = bisect_right(self._spoken_starts, offset - 1) - 1
        if index < 0:
            return offset
        r, spoken_at = self.replacements[index], self._spoken_starts[index]
        length = 1 if r.ipa else len(r.spoken)
        if offset <= spoken_at + length:
            return r.end
        return r.end + offset - (spoken_at + length)


def merged(first: Iterable[Replacement], second: Iterable[Replacement]) -> list[Replacement]:
    """``first`` (which wins) with those of ``second`` that overlap none of it, in order."""
    taken = sorted(first, key=lambda r: r.start)
    starts = [r.start for r in taken]
    kept = list(taken)
    for r in second:
        at = bisect_right(starts, r.start) - 1
        before_ok = at < 0 or taken[at].end <= r.start
        after_ok = at + 1 >= len(taken) or taken[at + 1].start >= r.end
        if before_ok and after_ok:
            kept.append(r)
    return sorted(kept, key=lambda r: r.start)


def spoken(written: str, replacements: Sequence[Replacement]) -> SpokenText:
    return SpokenText(written, tuple(replacements))
