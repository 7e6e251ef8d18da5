"""Markdown books (``.md``): ``#`` and ``##`` headings are parts and chapters; code, HTML blocks and
link definitions say nothing; inline markup keeps its text."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Sequence
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

_FRONT_MATTER = re.compile(r"\A---\n(?P<yaml>.*?\n)(?:---|\.\.\.)\n", re.DOTALL)
_FRONT_MATTER_TITLE = re.compile(r"^title:[ \t]*(['\"]?)(?P<title>.+?)\1[ \t]*$", re.MULTILINE)
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})")
_ATX_HEADING = re.compile(r"^[ ]{0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^[ ]{0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^[ ]{0,3}(?:([-*_])[ \t]*){3,}$")
_HTML_BLOCK = re.compile(  # CommonMark's HTML blocks: a block-level tag, or a line that is one whole tag
    r"^[ ]{0,3}(?:<(?:pre|script|style|textarea)\b|</?(?:address|article|aside|blockquote|body|center|details|div"
    r"|dl|figure|footer|form|h[1-6]|header|hr|html|iframe|main|nav|ol|p|section|table|ul)(?:[\s/>]|$)"
    r"|</?[A-Za-z][\w-]*(?:\s[^>]*)?/?>[ \t]*$)",
    re.IGNORECASE,
)
_LINK_DEFINITION = re.compile(r"^[ ]{0,3}\[[^\]]+\]:\s*\S")
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+(?:\[[ xX]\][ \t]+)?")  # numbered items keep their number: it is said
_QUOTE = re.compile(r"^[ ]{0,3}>[ ]?")
_INDENTED = re.compile(r"^(?: {4}|\t)")
_INLINE: Final[Sequence[tuple[re.Pattern[str], str]]] = (
    (re.compile(r"!\[[^\]]*\](?:\([^)]*\)|\[[^\]]*\])"), ""),  # images
    (re.compile(r"\[\^[^\]]+\]"), ""),  # footnote references
    (re.compile(r"\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])"), r"\1"),  # links keep their text
    (re.compile(r"(`+)(.+?)\1", re.DOTALL), r"\2"),  # inline code keeps its text
    (re.compile(r"</?[A-Za-z][^>]*>"), ""),  # inline HTML and <autolinks>
    (re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1", re.DOTALL), r"\2"),
    (re.compile(r"\*(?=\S)(.+?)(?<=\S)\*", re.DOTALL), r"\1"),
    (UNDERSCORE_ITALICS, r"\1"),
)
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_ESCAPE_BASE: Final = 0xF0000  # a private-use plane: escaped characters hide there from the patterns


def read_markdown(data: bytes, name: str) -> Book:
    text, meta_title = front_matter(read_text(data, name))
    blocks = list(markdown_blocks(text))
    heads = [b for b in blocks if isinstance(b, Mark)]
    title = meta_title or title_from_name(name)
    tops = [h for h in heads if h.level == 1]
    if len(tops) == 1 and heads[0] is tops[0]:
        title = meta_title or tops[0].title  # a single leading `#` names the book
        if len(heads) > 1:
            blocks.remove(tops[0])  # ... and its `##` headings are the chapters
    return assemble(name, title, split_chapters(blocks, title))


def front_matter(text: str) -> tuple[str, str | None]:
    """Text without a leading YAML block (``---`` … ``---``), and the ``title:`` found in it."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return text, None
    title = _FRONT_MATTER_TITLE.search(match["yaml"])
    return text[match.end() :], title["title"] if title else None


def markdown_blocks(text: str) -> Iterator[Block]:
    """Paragraphs and headings (``#``/``##`` are marks, deeper ones paragraphs) of Markdown. Code
    blocks, HTML blocks, link definitions and rules are dropped; list items become lines."""
    lines: list[str] = []
    skip_until_blank = False  # inside an HTML or an indented code block
    fence = ""
    for raw in _HTML_COMMENT.sub("", text).split("\n"):
        if fence:
            fence = "" if raw.strip().startswith(fence) else fence
            continue
        if not raw.strip():
            skip_until_blank = False
            yield from _flush_markdown(lines)
            continue
        if skip_until_blank:
            continue
        if match := _FENCE.match(raw):
            yield from _flush_markdown(lines)
            fence = match[1][0] * 3
            continue
        if not lines and (_HTML_BLOCK.match(raw) or _INDENTED.match(raw)):
            skip_until_blank = True
            continue
        yield from _markdown_line(raw, lines)
    yield from _flush_markdown(lines)  # a file whose last line has no newline (an editor's or a browser's)


def _markdown_line(raw: str, lines: list[str]) -> Iterator[Block]:
    """One non-blank line outside code: a heading, a rule, or a line of the current paragraph."""
    line = raw
    while quoted := _QUOTE.match(line):
        line = line[quoted.end() :]
    if heading := _ATX_HEADING.match(line):
        yield from _flush_markdown(lines)
        yield from _markdown_heading(heading[2] or "", len(heading[1]))
    elif lines and (underline := _SETEXT_UNDERLINE.match(line)):
        title = " ".join(lines)
        lines.clear()
        yield from _markdown_heading(title, 1 if underline[1][0] == "=" else 2)
    elif _THEMATIC_BREAK.match(line):
        yield from _flush_markdown(lines)
    elif not _LINK_DEFINITION.match(line):
        lines.append(_BULLET.sub("", line, count=1))


def _markdown_heading(source: str, level: int) -> Iterator[Block]:
    title = join_paragraph([_markdown_inline(source)]).replace("\n", " ")
    if title:
        yield Mark(title, level) if level <= 2 else title


def _flush_markdown(lines: list[str]) -> Iterator[str]:
    paragraph = join_paragraph(_markdown_inline("\n".join(lines)).split("\n"))
    lines.clear()
    if paragraph:
        yield paragraph


def _markdown_inline(text: str) -> str:
    """Inline markup to plain text: emphasis marks dropped, links and code keep their text, images go."""
    text = _ESCAPED.sub(lambda m: chr(_ESCAPE_BASE + ord(m[1])), text)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    text = re.sub("[\U000f0000-\U000f007f]", lambda m: chr(ord(m[0]) - _ESCAPE_BASE), text)
    return html.unescape(text)
