"""What every book reader shares: the book and its chapters, decoding, paragraphs, chapter marks, and
the choice of which parts are chapters."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Final

from tts_core.base.errors import InvalidBook
from tts_core.text.sentences import has_speech, normalize_text, split_sentences

TEXT_SUFFIXES: Final = (".txt", ".md", ".markdown")
"""Files that a book folder's chapters may be; a book file may also be an ``.epub``."""


@dataclass(frozen=True)
class Chapter:
    """One chapter to narrate: ``index`` counts from 1 in reading order."""

    index: int
    title: str
    text: str
    source: str | None = None
    """The file it was read from, in a book that is a folder of chapter files."""

    @property
    def label(self) -> str:
        """How messages name it: ``03-rain.md (chapter 2, "Rain")``, or ``chapter 2, "Rain"``."""
        where = f'chapter {self.index}, "{self.title}"'
        return f"{self.source} ({where})" if self.source else where


@dataclass(frozen=True)
class Book:
    """A book's title (its metadata, heading or file name) and its chapters in reading order."""

    title: str
    chapters: list[Chapter]
    left_out: list[str] = field(default_factory=list)
    """What was read but is not a chapter, one line each: its file (a folder book) or title, and why."""


@dataclass(frozen=True)
class Mark:
    """A chapter heading; ``level`` 1 is a part (``BOOK I``, ``#``), 2 a chapter (``Chapter 3``, ``##``)."""

    title: str
    level: int


Block = str | Mark
"""A paragraph of text or a chapter heading, in reading order."""


@dataclass(frozen=True)
class Part:
    """A chapter before numbering: it may yet be left out for having nothing to say."""

    title: str
    text: str
    source: str | None = None
    """Its file, in a folder book."""

    @property
    def name(self) -> str:
        return self.source or f'"{self.title}"'


_SPACES = re.compile(r"[^\S\n]+")
_INVISIBLE = re.compile("[\u00ad\u200b\ufeff]")  # soft hyphen, zero-width space, stray BOM


def read_text(data: bytes, name: str) -> str:
    """A text file's bytes (``name`` is the file, for messages) as text, newlines as ``\\n``."""
    try:
        text = decode(data)
    except UnicodeDecodeError as e:
        raise InvalidBook(f"{name}: not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}); save it as UTF-8") from e
    return text.replace("\r\n", "\n").replace("\r", "\n")


def decode(data: bytes) -> str:
    """UTF-8, with or without a BOM; UTF-16 only with its BOM (Windows' "Unicode" text files)."""
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    return data.decode(encoding)


def join_paragraph(lines: Iterable[str]) -> str:
    """Lines of one paragraph, spaces collapsed, empty lines dropped."""
    cleaned = (_SPACES.sub(" ", _INVISIBLE.sub("", line)).strip() for line in lines)
    return "\n".join(line for line in cleaned if line)


def split_chapters(blocks: Iterable[Block], book_title: str) -> list[Part]:
    """Cut blocks into chapters at marks. Text before the first mark is a chapter titled by the book.
    A part heading right before a chapter heading prefixes its title ("BOOK I. Chapter 1"); any other
    heading without text after it (a table of contents) is dropped."""
    parts: list[Part] = []
    titles: list[Mark] = []
    paragraphs: list[str] = []
    for block in blocks:
        if isinstance(block, str):
            paragraphs.append(block)
            continue
        if paragraphs:
            parts.append(Part(_join_titles(titles) or book_title, "\n\n".join(paragraphs)))
            paragraphs, titles = [], []
        elif not all(t.level < block.level for t in titles):
            titles = []
        titles.append(block)
    if paragraphs:
        parts.append(Part(_join_titles(titles) or book_title, "\n\n".join(paragraphs)))
    return parts


def _join_titles(marks: Sequence[Mark]) -> str:
    return ". ".join(m.title.rstrip(" .") or m.title for m in marks)


def _has_sentences(text: str) -> bool:
    """Whether the text has a sentence: four words or more, or ten letters of an unspaced script,
    ending in sentence punctuation. Covers, title pages and tables of contents have none."""
    for sentence in split_sentences(normalize_text(text)):
        if sentence.rstrip("\"'\u201d\u2019)]").endswith((".", "!", "?", "…", "。", "！", "？")):
            words = sentence.split()
            if len(words) >= 4 or max(len(w) for w in words) >= 10:
                return True
    return False


def assemble(source: str, title: str, parts: Sequence[Part], sentences_only: bool = True) -> Book:
    """Number the chapters worth narrating (with ``sentences_only``, those with a sentence, if any
    has one), naming each part left out and why; refuse a book with nothing to say. Speakable is
    what the API takes: a letter or digit once normalised."""
    speakable = [p for p in parts if has_speech(normalize_text(p.text))]
    if not speakable:
        raise InvalidBook(f"{source}: the book has no text to speak")
    chosen = ([p for p in speakable if _has_sentences(p.text)] if sentences_only else []) or speakable
    left_out = [
        f"{p.name}: nothing to speak (empty, or only punctuation or symbols)"
        if p not in speakable
        else f"{p.name}: no sentence in it (a cover, a title page or a table of contents?)"
        for p in parts
        if p not in chosen
    ]
    chapters = [Chapter(i, p.title, p.text, p.source) for i, p in enumerate(chosen, start=1)]
    return Book(title, chapters, left_out)


def title_from_name(name: str) -> str:
    """A book's title from its file or folder name (``pride_and-prejudice.txt``: "pride and prejudice")."""
    stem = PurePath(name).stem
    return _SPACES.sub(" ", re.sub(r"[_-]+", " ", stem)).strip() or stem


UNDERSCORE_ITALICS = re.compile(r"(?<!\w)_(?=\S)([^_]+?)(?<=\S)_(?!\w)")
"""Text between underscores, italics in plain text and Markdown."""
