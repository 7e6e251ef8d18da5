"""Books read into chapters for narration: a ``.txt`` or ``.md`` file, an ``.epub``, or a folder of
``.txt``/``.md`` files (one chapter each).

Chapter text is plain: paragraphs separated by one blank line (they become paragraph pauses),
lines inside a paragraph kept, markup dropped. Chapters with nothing to say (an empty file, one of
only punctuation) are left out; so are, in a file or an EPUB, those without a sentence (a cover, a
title page, a table of contents) while the book has others: in a folder, every file with something to
say is a chapter, since someone chose it. ``Book.left_out`` names each part left out (by its file, in
a folder book) and says why.

One module per format: ``text``, ``markdown``, ``epub``, ``folder``; what they share is in ``common``.
Chapter file names (``safe_name``) come from ``tts_core.text.file_names``, shared with the service.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from narration.books.common import TEXT_SUFFIXES, Book, BookError, Chapter
from narration.books.epub import read_epub
from narration.books.folder import read_folder
from narration.books.markdown import read_markdown
from narration.books.text import read_txt
from tts_core.text.file_names import MAX_NAME_CHARS, safe_name

__all__ = ["MAX_NAME_CHARS", "TEXT_SUFFIXES", "Book", "BookError", "Chapter", "read_book", "safe_name"]


def read_book(path: Path) -> Book:
    """Read a ``.txt``, ``.md`` or ``.epub`` file, or a folder of ``.txt``/``.md`` chapter files."""
    if path.is_dir():
        return read_folder(path)
    if not path.exists():
        raise BookError(f"{path}: no such file or folder")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        kind = repr(path.suffix) if path.suffix else "a file with no extension"
        raise BookError(f"{path}: cannot read {kind}; a book is a .txt, .md or .epub file, or a folder of .txt/.md")
    return reader(path)


_READERS: Final[dict[str, Callable[[Path], Book]]] = {
    ".txt": read_txt,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".epub": read_epub,
}
