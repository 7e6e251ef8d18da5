"""A folder of ``.txt``/``.md`` files, one chapter each in natural order (``2.txt`` before ``10.txt``)."""

from __future__ import annotations

import re
from pathlib import Path

from tts_core.base.errors import InvalidBook
from tts_core.books.common import (
    TEXT_SUFFIXES,
    Book,
    Mark,
    Part,
    assemble,
    join_paragraph,
    read_text,
    title_from_name,
)
from tts_core.books.markdown import front_matter, markdown_blocks
from tts_core.books.text import strip_gutenberg, text_blocks


def read_local(path: Path) -> bytes:
    """A book's or chapter's file, refused with its path and why if it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise InvalidBook(f"{path}: no such file") from e
    except OSError as e:
        raise InvalidBook(f"{path}: cannot read it ({e.strerror or e})") from e


def read_folder(folder: Path) -> Book:
    try:
        entries = list(folder.iterdir())
    except OSError as e:
        raise InvalidBook(f"{folder}: cannot list the folder ({e.strerror or e})") from e
    chapter_files = (p for p in entries if p.suffix.lower() in TEXT_SUFFIXES and not p.name.startswith("."))
    files = sorted((p for p in chapter_files if p.is_file()), key=lambda p: _natural_key(p.name))
    if not files:
        raise InvalidBook(f"{folder}: the folder has no .txt or .md files")
    title = join_paragraph([folder.resolve().name]) or "Book"
    return assemble(str(folder), title, [_file_chapter(p) for p in files], sentences_only=False)


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key putting ``2.txt`` before ``10.txt``: digit runs compare as numbers."""
    return [(0, int(piece)) if piece.isdigit() else (1, piece.casefold()) for piece in re.split(r"(\d+)", name)]


def _file_chapter(path: Path) -> Part:
    """One file, one chapter: titled by its first heading (taken out of the text), else its name."""
    text = read_text(read_local(path), str(path))
    if path.suffix.lower() == ".txt":
        blocks = list(text_blocks(strip_gutenberg(text)[0]))
        meta_title = None
    else:
        text, meta_title = front_matter(text)
        blocks = list(markdown_blocks(text))
    title = meta_title or title_from_name(path.name)
    if blocks and isinstance(first := blocks[0], Mark):
        title = first.title
        del blocks[0]
    body = (b.title if isinstance(b, Mark) else b for b in blocks)
    return Part(title, "\n\n".join(body), path.name)
