"""A book file's bytes read into chapters by the reader of its format, which its name's extension
names: the one choice ``ttsq narrate`` and the API's ``/v1/books/chapters`` share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Final

from tts_core.base.errors import InvalidBook
from tts_core.books.common import Book
from tts_core.books.epub import read_epub
from tts_core.books.markdown import read_markdown
from tts_core.books.text import read_txt

READERS: Final[dict[str, Callable[[bytes, str], Book]]] = {
    ".txt": read_txt,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".epub": read_epub,
}
"""The reader of each extension a book file may have (lowercase)."""


def book_suffix(filename: str) -> str:
    """The extension that chooses ``filename``'s reader, lowercase (``""`` when it has none)."""
    return PurePath(filename).suffix.lower()


def read_book(data: bytes, filename: str) -> Book:
    """A ``.txt``, ``.md`` or ``.epub`` file's bytes as a book; ``filename`` chooses the reader, names
    the book when nothing inside does, and starts every refusal's message (:class:`InvalidBook`)."""
    suffix = book_suffix(filename)
    reader = READERS.get(suffix)
    if reader is None:
        kind = repr(suffix) if suffix else "a file with no extension"
        raise InvalidBook(f"{filename}: cannot read {kind}; a book is a .txt, .md or .epub file")
    return reader(data, filename)
