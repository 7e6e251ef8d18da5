"""Timing marks: when each sentence or word of the submitted text is heard in the audio.

Marks are what subtitles (``tts_core.subtitles``) and karaoke-style highlighting are made from. Their
JSON form is close to AWS Polly's speech marks, with an end time added (Polly gives only ``time``) and
the offsets named for what they are: ``{"type", "start_ms", "end_ms", "text_start", "text_end",
"value"}``, offsets in characters of the submitted text, end exclusive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final, Literal, TypedDict, get_args

MarkType = Literal["sentence", "word"]
"""What a mark spans: a whole sentence, or one word within one."""

MARK_TYPES: Final[tuple[str, ...]] = get_args(MarkType)


@dataclass(frozen=True)
class Mark:
    """One sentence or word: where it is in the text and when it is heard."""

    type: MarkType
    start_ms: int
    """When it starts being heard, in milliseconds from the start of the audio."""
    end_ms: int
    """When it stops being heard (exclusive)."""
    text_start: int
    """Offset of its first character in the submitted text."""
    text_end: int
    """Offset just past its last character (exclusive), so ``text[text_start:text_end] == value``."""
    value: str
    """The text it spans, as submitted."""

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
    if kind != "sentence" and kind != "word":
        raise ValueError(f"mark {index}: type must be one of {', '.join(MARK_TYPES)}, not {kind!r}")
    if not isinstance(value, str):
        raise ValueError(f"mark {index}: value must be a string, not {value!r}")
    start_ms, end_ms, text_start, text_end = (_integer(index, item, name) for name in _INT_FIELDS)
    return Mark(kind, start_ms, end_ms, text_start, text_end, value)


def _integer(index: int, item: Mapping[str, object], name: str) -> int:
    number = item.get(name)
    # bool is an int subclass, but a JSON true is never a time or an offset.
    if not isinstance(number, int) or isinstance(number, bool):
        raise ValueError(f"mark {index}: {name} must be an integer, not {number!r}")
    return number


def check_marks(marks: Sequence[Mark], duration_ms: int) -> None:
    """Raise ``ValueError`` naming the first problem: a mark that is empty, ends before it starts or
    past the audio's ``duration_ms``, or, within one type, starts before or overlaps the one before it
    (in time or in the text). Sentence and word marks may overlap each other: words lie in sentences.
    """
    for mark in marks:
        _check_one(mark, duration_ms)
    for kind in MARK_TYPES:
        check_order([m for m in marks if m.type == kind])


def _check_one(mark: Mark, duration_ms: int) -> None:
    if mark.type not in MARK_TYPES:
        raise ValueError(f"{mark.describe()}: unknown type {mark.type!r}")
    if mark.start_ms < 0:
        raise ValueError(f"{mark.describe()}: starts before the audio does")
    if mark.end_ms <= mark.start_ms:
        raise ValueError(f"{mark.describe()}: ends at {mark.end_ms} ms, not after it starts")
    if mark.end_ms > duration_ms:
        raise ValueError(f"{mark.describe()}: ends at {mark.end_ms} ms, past the audio's end at {duration_ms} ms")
    if mark.text_start < 0 or mark.text_end <= mark.text_start:
        raise ValueError(f"{mark.describe()}: text offsets {mark.text_start}..{mark.text_end} span no text")
    if len(mark.value) != mark.text_end - mark.text_start:
        raise ValueError(
            f"{mark.describe()}: value has {len(mark.value)} characters, "
            f"its offsets {mark.text_start}..{mark.text_end} span {mark.text_end - mark.text_start}"
        )


def check_order(marks: Sequence[Mark]) -> None:
    """Raise ``ValueError`` unless each mark starts at or after the end of the one before it, both in
    time and in the text (marks of one type only; no check against an audio duration)."""
    for before, mark in pairwise(marks):
        if mark.start_ms < before.start_ms:
            raise ValueError(f"{mark.describe()}: not monotonic, starts before {before.describe()}")
        if mark.start_ms < before.end_ms:
            raise ValueError(f"{mark.describe()}: overlaps {before.describe()}, which ends at {before.end_ms} ms")
        if mark.text_start < before.text_end:
            raise ValueError(
                f"{mark.describe()}: text offset {mark.text_start} is inside {before.describe()} or before it"
            )
