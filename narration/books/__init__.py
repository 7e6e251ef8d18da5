"""Books on the operator's machine, read into chapters for ``ttsq narrate``: a ``.txt``, ``.md`` or
``.epub`` file, or a folder of ``.txt``/``.md`` files (one chapter each).

A file is read here and handed to ``tts_core.books.reading`` as bytes, the reader the API's
``/v1/books/chapters`` uses too, so a book gives the same chapters either way. Only what is about
local paths lives here: a missing or unreadable file, and folders (``folder``), where every file
with something to say is a chapter, since someone chose it.
"""

from __future__ import annotations

from pathlib import Path

from narration.books.folder import read_folder, read_local
from tts_core.base.errors import InvalidBook
from tts_core.books.common import Book
from tts_core.books.reading import READERS, book_suffix
from tts_core.books.reading import read_book as read_book_file

__all__ = ["read_book"]


def read_book(path: Path) -> Book:
    """Read a ``.txt``, ``.md`` or ``.epub`` file, or a folder of ``.txt``/``.md`` chapter files."""
    if path.is_dir():
        return read_folder(path)
    if not path.exists():
        raise InvalidBook(f"{path}: no such file or folder")
    suffix = book_suffix(path.name)
    if suffix not in READERS:  # before reading it: a PDF or a video may be big
        kind = repr(suffix) if suffix else "a file with no extension"
        raise InvalidBook(f"{path}: cannot read {kind}; a book is a .txt, .md or .epub file, or a folder of .txt/.md")
    return read_book_file(read_local(path), str(path))
