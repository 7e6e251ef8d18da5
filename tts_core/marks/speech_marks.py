"""Timing marks: when each sentence, word or phoneme of the submitted text is heard in the audio.

Marks are what subtitles (``tts_core.marks.subtitles``, from sentence and word marks), karaoke-style
highlighting and lip-sync (phoneme and viseme marks) are made from. Their JSON form is close to AWS
Polly's speech marks, with an end time added (Polly gives only ``time``) and the offsets named for
what they are: ``{"type", "start_ms", "end_ms", "text_start", "text_end", "value"}``, offsets in
characters of the submitted text, end exclusive.

Per type: a sentence or word mark's ``value`` is its text (``text[text_start:text_end]``); a phoneme
mark's is its IPA and its offsets are its word's (or, in SSML, those of the source it was read from);
a viseme mark's is a viseme (``tts_core.marks.visemes``) with its phoneme's offsets, or ``sil`` with the
text between the words around the pause (possibly empty); an ``ssml`` mark is a point in time
(``start_ms == end_ms``) whose value is a ``<mark>``'s name and whose offsets are the element's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final, Literal, TypedDict, cast, get_args

from tts_core.marks.visemes import SIL, VISEMES

MarkType = Literal["sentence", "word", "phoneme", "viseme", "ssml"]
"""What a mark spans: a whole sentence, one word within one, one phoneme or its viseme, or (a point)
an SSML ``<mark>``."""

MARK_TYPES: Final[tuple[str, ...]] = get_args(MarkType)
TEXT_MARK_TYPES: Final = ("sentence", "word")
"""The types whose value is the text they span (and the only ones subtitles are made from)."""
SOUND_MARK_TYPES: Final = ("phoneme", "viseme")
"""The types made from a model's per-phoneme durations."""


@dataclass(frozen=True)
class Mark:
    """One sentence, word, phoneme, viseme or SSML mark: where it is in the text and when it is heard."""

    type: MarkType
    start_ms: int
    """When it starts being heard, in milliseconds from the start of the audio."""
    end_ms: int
    """When it stops being heard (exclusive)."""
    text_start: int
    """Offset of its first character in the submitted text."""
    text_end: int
    """Offset just past its last character (exclusive), so ``text[text_start:text_end] == value``
    for sentence and word marks."""
    value: str
    """The text it spans, as submitted; a phoneme's IPA, a viseme, an SSML mark's name."""

    def describe(self) -> str:
        """A short name for error messages."""
        return f"{self.type} mark {self.value[:30]!r} at {self.start_ms} ms"


class MarkJson(TypedDict):
    """A mark as JSON, the shape stored beside a job's audio and served to clients."""

    type: MarkType
    start_ms: int
    end_ms: int
    text_start: int
    text_end: int
    value: str


_INT_FIELDS: Final = ("start_ms", "end_ms", "text_start", "text_end")


def marks_to_json(marks: Iterable[Mark]) -> list[MarkJson]:
    """Marks as JSON-ready dicts, in their order."""
    return [
        MarkJson(
            type=m.type,
            start_ms=m.start_ms,
            end_ms=m.end_ms,
            text_start=m.text_start,
            text_end=m.text_end,
            value=m.value,
        )
        for m in marks
    ]


def marks_from_json(items: Iterable[Mapping[str, object]]) -> list[Mark]:
    """Marks from their JSON form; a missing field or one of the wrong type raises ``ValueError``.

    Only the shape is checked here: ``check_marks`` checks that the times make sense.
    """
    return [_mark_from_json(i, item) for i, item in enumerate(items)]


def _mark_from_json(index: int, item: Mapping[str, object]) -> Mark:
    kind, value = item.get("type"), item.get("value")
    if kind not in MARK_TYPES:
        raise ValueError(f"mark {index}: type must be one of {', '.join(MARK_TYPES)}, not {kind!r}")
    if not isinstance(value, str):
        raise ValueError(f"mark {index}: value must be a string, not {value!r}")
    start_ms, end_ms, text_start, text_end = (_integer(index, item, name) for name in _INT_FIELDS)
    return Mark(cast(MarkType, kind), start_ms, end_ms, text_start, text_end, value)


def _integer(index: int, item: Mapping[str, object], name: str) -> int:
    number = item.get(name)
    # bool is an int subclass, but a JSON true is never a time or an offset.
    if not isinstance(number, int) or isinstance(number, bool):
        raise ValueError(f"mark {index}: {name} must be an integer, not {number!r}")
    return number


def check_marks(marks: Sequence[Mark], duration_ms: int) -> None:
    """Raise ``ValueError`` naming the first problem: a mark outside the audio's ``duration_ms``, one
    whose times, offsets or value do not fit its type (see the module's docstring), or, within one
    type, one that starts before or overlaps the one before it (in time or in the text; phonemes and
    visemes of one word share its offsets). Marks of different types may overlap: words lie in
    sentences, phonemes in words."""
    for mark in marks:
        _check_one(mark, duration_ms)
    for kind in MARK_TYPES:
        of_kind = [m for m in marks if m.type == kind]
        if kind in TEXT_MARK_TYPES:
            check_order(of_kind)
        elif kind in SOUND_MARK_TYPES:
            _check_sound_order(of_kind)
        else:
            _check_point_order(of_kind)


def _check_one(mark: Mark, duration_ms: int) -> None:
    if mark.type not in MARK_TYPES:
        raise ValueError(f"{mark.describe()}: unknown type {mark.type!r}")
    _check_times(mark, duration_ms)
    _check_text(mark)


def _check_times(mark: Mark, duration_ms: int) -> None:
    if mark.start_ms < 0:
        raise ValueError(f"{mark.describe()}: starts before the audio does")
    if mark.end_ms > duration_ms:
        raise ValueError(f"{mark.describe()}: ends at {mark.end_ms} ms, past the audio's end at {duration_ms} ms")
    if mark.type == "ssml":
        if mark.end_ms != mark.start_ms:
            raise ValueError(f"{mark.describe()}: an ssml mark is a point in time, but ends at {mark.end_ms} ms")
    elif mark.end_ms <= mark.start_ms:
        raise ValueError(f"{mark.describe()}: ends at {mark.end_ms} ms, not after it starts")


def _check_text(mark: Mark) -> None:
    silence = mark.type == "viseme" and mark.value == SIL
    if mark.text_start < 0 or mark.text_end < mark.text_start or (mark.text_end == mark.text_start and not silence):
        raise ValueError(f"{mark.describe()}: text offsets {mark.text_start}..{mark.text_end} span no text")
    if mark.type in TEXT_MARK_TYPES and len(mark.value) != mark.text_end - mark.text_start:
        raise ValueError(
            f"{mark.describe()}: value has {len(mark.value)} characters, "
            f"its offsets {mark.text_start}..{mark.text_end} span {mark.text_end - mark.text_start}"
        )
    if mark.type == "viseme" and mark.value not in VISEMES:
        raise ValueError(f"{mark.describe()}: value must be one of {' '.join(VISEMES)}")
    if mark.type in ("phoneme", "ssml") and not mark.value:
        raise ValueError(f"{mark.describe()}: value is empty")


def check_order(marks: Sequence[Mark]) -> None:
    """Raise ``ValueError`` unless each mark starts at or after the end of the one before it, both in
    time and in the text (marks of one type only; no check against an audio duration)."""
    for before, mark in pairwise(marks):
        _check_time_order(before, mark)
        if mark.text_start < before.text_end:
            raise ValueError(
                f"{mark.describe()}: text offset {mark.text_start} is inside {before.describe()} or before it"
            )


def _check_time_order(before: Mark, mark: Mark) -> None:
    if mark.start_ms < before.start_ms:
        raise ValueError(f"{mark.describe()}: not monotonic, starts before {before.describe()}")
    if mark.start_ms < before.end_ms:
        raise ValueError(f"{mark.describe()}: overlaps {before.describe()}, which ends at {before.end_ms} ms")


def _check_sound_order(marks: Sequence[Mark]) -> None:
    """Phonemes or visemes: one after another in time; in the text, each in the same word as the one
    before it or after that word."""
    for before, mark in pairwise(marks):
        _check_time_order(before, mark)
        same = (mark.text_start, mark.text_end) == (before.text_start, before.text_end)
        if not same and mark.text_start < before.text_end:
            raise ValueError(
                f"{mark.describe()}: text offset {mark.text_start} is inside {before.describe()}'s or before it"
            )


def _check_point_order(marks: Sequence[Mark]) -> None:
    """SSML marks: in time, each at or after the one before (several may share a time); in the text,
    each element after the one before."""
    for before, mark in pairwise(marks):
        if mark.start_ms < before.start_ms:
            raise ValueError(f"{mark.describe()}: not monotonic, comes before {before.describe()}")
        if mark.text_start < before.text_end:
            raise ValueError(
                f"{mark.describe()}: text offset {mark.text_start} is inside {before.describe()} or before it"
            )
