"""Plain text books (``.txt``): chapter marks such as ``CHAPTER I.`` or ``Book II``, and Project
Gutenberg's header and licence left out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from tts_core.books.common import (
    UNDERSCORE_ITALICS,
    Block,
    Book,
    Mark,
    assemble,
    join_paragraph,
    read_text,
    split_chapters,
    title_from_name,
)

_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")

_NUMBER_WORD: Final = (
    r"(?:(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[-\s]?(?:one|two|three|four|five|six|seven"
    r"|eight|nine|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth))?|twentieth|thirtieth|fortieth"
    r"|fiftieth|sixtieth|seventieth|eightieth|ninetieth|one|two|three|four|five|six|seven|eight|nine|ten|eleven"
    r"|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|first|second|third|fourth|fifth"
    r"|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth"
    r"|seventeenth|eighteenth|nineteenth|last)"
)
_NUMBER: Final = rf"(?:\d+|[ivxlcdm]+|(?:the\s+)?{_NUMBER_WORD})"
_TEXT_MARK = re.compile(
    rf"(?:(?P<part>book|part|volume)\s+{_NUMBER}|chapter\s+{_NUMBER}"
    r"|prologue|epilogue|preface|foreword|introduction|afterword)"
    r"(?:\s*[.:\u2014\u2013-]\s*(?P<rest>\S.{0,79})|\.)?",  # "Chapter 1: Loomings", "Chapter 1."
    re.IGNORECASE,
)
_GUTENBERG_START = re.compile(r"^[ \t]*\*{3}[ \t]*START OF\b.*$", re.MULTILINE | re.IGNORECASE)
_GUTENBERG_END = re.compile(r"^[ \t]*\*{3}[ \t]*END OF\b.*$", re.MULTILINE | re.IGNORECASE)
_GUTENBERG_TITLE = re.compile(r"^Title:[ \t]*(\S.*?)[ \t]*$", re.MULTILINE)
_GUTENBERG_LAST_LINE = re.compile(r"\n\s*End of (?:the )?Project Gutenberg\b[^\n]*(?:\n[^\n]+)*\s*$", re.IGNORECASE)
_ILLUSTRATION = re.compile(r"\[Illustration(?::[^\]]*)?\]", re.IGNORECASE)


def read_txt(data: bytes, name: str) -> Book:
    text, gutenberg_title = strip_gutenberg(read_text(data, name))
    title = gutenberg_title or title_from_name(name)
    return assemble(name, title, split_chapters(text_blocks(text), title))


def strip_gutenberg(text: str) -> tuple[str, str | None]:
    """The body between Project Gutenberg's ``*** START OF …***`` and ``*** END OF …***`` lines
    (all of it when they are absent), and the title from its header."""
    start = _GUTENBERG_START.search(text)
    if start is None:
        return text, None
    title = _GUTENBERG_TITLE.search(text, 0, start.start())
    end = _GUTENBERG_END.search(text, start.end())
    body = text[start.end() : end.start() if end else len(text)]
    return _GUTENBERG_LAST_LINE.sub("", body), title.group(1) if title else None


def text_blocks(text: str) -> Iterator[Block]:
    """Paragraphs and chapter marks of plain text. A mark is a paragraph of its own: one line, or two
    when a chapter's name follows its number (``CHAPTER I.`` / ``Down the Rabbit-Hole``)."""
    text = _ILLUSTRATION.sub("", UNDERSCORE_ITALICS.sub(r"\1", text))
    for chunk in _PARAGRAPH_BREAK.split(text):
        paragraph = join_paragraph(chunk.split("\n"))
        if paragraph:
            yield _text_mark(paragraph) or paragraph


def _text_mark(paragraph: str) -> Mark | None:
    lines = paragraph.split("\n")
    match = _TEXT_MARK.fullmatch(lines[0])
    if match is None or len(lines) > 2 or (len(lines) == 2 and (match["rest"] or len(lines[1]) > 80)):
        return None
    title = lines[0] if len(lines) == 1 else f"{lines[0].rstrip(' .')}. {lines[1]}"
    return Mark(title, 1 if match["part"] else 2)
