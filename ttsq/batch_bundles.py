"""What a batch's bundles are: the whole book as one download, made by the service worker once every
item is finished (``ttsq.bundling``). ``zip``: every succeeded item's audio with its subtitles and
marks, one ``NN-title`` name each; ``m4b``: one AAC audiobook with a chapter mark per item, made only
when every item succeeded (an audiobook with a hole is no audiobook).

A bundle is ``pending`` from the batch's creation until the service worker settles it ``ready`` (its
object uploaded whole, then named in the batch record) or ``failed`` (with the reason); a client
never sees a key before its object is complete.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import BaseModel

from tts_core.mastering.formats import AudioFormat
from ttsq.job_record import JobError


class BundleFile(StrEnum):
    """A bundle's name under its batch (``GET /v1/batches/{id}/files/book.zip``) and in its S3 key."""

    ZIP = "book.zip"
    M4B = "book.m4b"

    @property
    def kind(self) -> BundleKind:
        return BundleKind(self.removeprefix("book."))


class BundleKind(StrEnum):
    """A bundle a batch may ask for (``"bundle": ["zip", "m4b"]``)."""

    ZIP = "zip"
    M4B = "m4b"

    @property
    def file_name(self) -> BundleFile:
        return BundleFile(f"book.{self.value}")

    @property
    def content_type(self) -> str:
        return _CONTENT_TYPES[self]


_CONTENT_TYPES: Final = {BundleKind.ZIP: "application/zip", BundleKind.M4B: "audio/mp4"}


class BundleStatus(StrEnum):
    """``pending`` until the service worker has made it (or found it cannot be made)."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


class BundleState(BaseModel):
    """One bundle of a batch as its record keeps it."""

    status: BundleStatus = BundleStatus.PENDING
    key: str | None = None
    """Its S3 key once ``ready``: under the batch's prefix, expiring with the batch."""
    bytes: int | None = None
    chapters: int | None = None
    """Items in it once ``ready``: below the batch's total in a zip when some items did not succeed."""
    error: JobError | None = None
    """Why it is ``failed``."""


M4B_UNREADABLE: Final = frozenset({AudioFormat.MULAW, AudioFormat.ALAW})
"""Formats an ``m4b`` bundle cannot be made from: raw G.711 has no header to decode it by."""


def m4b_refusal(formats: list[str]) -> str | None:
    """Why a batch whose items have these formats cannot ask for an ``m4b`` (naming the first item
    that keeps it from one), or None. Voices and sample rates may differ: the audiobook is resampled
    to the first chapter's rate."""
    for index, name in enumerate(formats):
        if AudioFormat.parse(name) in M4B_UNREADABLE:
            return f"items[{index}].format: {name} is raw G.711, which an m4b bundle cannot be made from"
    return None


DEFAULT_BOOK_TITLE: Final = "Book"
"""The m4b's title tag when the batch has no ``title``."""


def chapter_title(index: int, title: str | None) -> str:
    """Item ``index``'s chapter title: its own, else ``Chapter N`` (counted from 1)."""
    return title if title else f"Chapter {index + 1}"
