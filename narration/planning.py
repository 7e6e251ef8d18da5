"""A book's chapters as batch items: each with its ref (a key of its text and the synthesis options,
marks included), its file names, and the batch's request body and ``Idempotency-Key``."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from narration.api_contract import suffix
from narration.client import ClientError
from tts_core.books.common import Book, Chapter
from tts_core.marks.speech_marks import MarkType
from tts_core.text.file_names import safe_name

REF_CHARS: Final = 16
"""Hex digits of a chapter's ref (64 bits of sha256: no two chapters of a book collide)."""

MARKS: Final[dict[str, tuple[MarkType, ...]]] = {
    "none": (),
    "sentence": ("sentence",),
    "word": ("sentence", "word"),
    "viseme": ("sentence", "word", "phoneme", "viseme"),
}
"""``--marks`` choices and the job ``marks`` each asks for: word marks come with sentence marks,
which the subtitles are cut from; visemes (a narrating avatar's lips) with their phonemes and words."""

SIDE_FILES: Final = {"subtitles": ".vtt", "srt": ".srt", "marks": ".marks.json"}
"""What a chapter with marks gets beside its audio: the result's ``<kind>_url``, saved as
``NN-title<suffix>``."""


@dataclass(frozen=True)
class NarrateOptions:
    """What the audio of every chapter is made with; part of each chapter's ref."""

    voice: str | None
    format: str
    speed: float | None
    by: str = "chapter"
    """``chapter``: one audio file per chapter; ``file``: the whole book as one item and one file."""
    marks: str = "sentence"
    """A key of ``MARKS``: which timing marks, and so which subtitle files, each chapter gets."""
    loudness: str | None = None
    """A loudness preset, or a target in LUFS as a number: every chapter is leveled to it alone, so
    all of them land on the one target; None: the voice's own level."""

    lexicons: tuple[str, ...] = ()
    """The tenant's lexicons every chapter applies, in order."""

    def loudness_body(self) -> dict[str, Any] | None:
        """``loudness`` as the API takes it."""
        if self.loudness is None:
            return None
        try:
            return {"target_lufs": float(self.loudness)}
        except ValueError:
            return {"preset": self.loudness}


@dataclass(frozen=True)
class Planned:
    """A chapter as narrated: its ref, the file its audio goes to and those its marks go to."""

    chapter: Chapter
    ref: str
    file: str
    side: dict[str, str]
    """Files by ``SIDE_FILES`` kind; empty without marks."""

    @property
    def text_sha256(self) -> str:
        return hashlib.sha256(self.chapter.text.encode()).hexdigest()


def chapter_ref(text: str, options: NarrateOptions, occurrence: int = 1) -> str:
    """A key that changes whenever the chapter's files would: its text, voice, format, speed, marks,
    loudness and lexicons (by name: a resumed run keeps the versions its batch was given). Marks,
    loudness and lexicons join the key only when asked for, so a ``--marks none`` run
    without ``--loudness`` keeps the refs (and the files) of runs made before either existed. The
    second and later chapters of a book with the same text (a chapter file copied) add their
    ``occurrence``: refs are unique in a batch."""
    parts: list[Any] = [text, options.voice, options.format, options.speed]
    if MARKS[options.marks]:
        parts.append(MARKS[options.marks])
    if options.loudness is not None:
        parts.append({"loudness": options.loudness_body()})
    if options.lexicons:
        parts.append({"lexicons": list(options.lexicons)})
    if occurrence > 1:
        parts.append(occurrence)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:REF_CHARS]


def plan(book: Book, options: NarrateOptions) -> list[Planned]:
    """The chapters to narrate (the whole book as one with ``by="file"``), each with ref and file."""
    chapters = book.chapters
    if options.by == "file":
        chapters = [Chapter(1, book.title, "\n\n".join(c.text for c in book.chapters))]
    planned = []
    seen: Counter[str] = Counter()
    for chapter in chapters:
        stem = safe_name(chapter.index, chapter.title)
        side = {kind: stem + suffix for kind, suffix in SIDE_FILES.items()} if MARKS[options.marks] else {}
        seen[chapter.text] += 1
        ref = chapter_ref(chapter.text, options, seen[chapter.text])
        planned.append(Planned(chapter, ref, f"{stem}.{suffix(options.format)}", side))
    return planned


def batch_body(planned: Iterable[Planned], options: NarrateOptions) -> dict[str, Any]:
    marks = list(MARKS[options.marks]) or None
    defaults = {
        "voice": options.voice,
        "format": options.format,
        "speed": options.speed,
        "marks": marks,
        "loudness": options.loudness_body(),
        "lexicons": list(options.lexicons) or None,
    }
    items = [
        {"text": p.chapter.text, "ref": p.ref, "metadata": {"title": p.chapter.title, "index": p.chapter.index}}
        for p in planned
    ]
    return {"items": items, "defaults": {k: v for k, v in defaults.items() if v is not None}}


_ITEM: Final = re.compile(r"items\[(\d+)\](?:\.(\w+))?")


def naming_chapters(error: ClientError, submitted: list[Planned]) -> ClientError:
    """The API's refusal of a batch with each ``items[N]`` it names replaced by that chapter's file
    (a folder book) or number and title."""

    def label(match: re.Match[str]) -> str:
        index, item_field = int(match[1]), match[2]
        if index >= len(submitted):
            return match[0]
        name = submitted[index].chapter.label
        return name if item_field in (None, "text") else f"{name}, {item_field}"

    return ClientError(_ITEM.sub(label, str(error)), error.status_code, error.code, error.detail)


def idempotency_key(body: dict[str, Any], replacing: str | None) -> str:
    """Derived from the request body, and from the batch it replaces (a rerun after that one
    failed or expired must not be answered with it again)."""
    digest = hashlib.sha256(json.dumps([body, replacing], sort_keys=True).encode()).hexdigest()
    return f"ttsq-narrate-{digest[:40]}"
