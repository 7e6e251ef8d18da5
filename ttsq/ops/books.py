"""Books read into chapters for narration: a ``.txt`` or ``.md`` file, an ``.epub``, or a folder of
``.txt``/``.md`` files (one chapter each).

Chapter text is plain: paragraphs separated by one blank line (they become paragraph pauses),
lines inside a paragraph kept, markup dropped. Chapters with nothing to say (an empty file, one of
only punctuation) are left out; so are, in a file or an EPUB, those without a sentence (a cover, a
title page, a table of contents) while the book has others: in a folder, every file with something to
say is a chapter, since someone chose it. ``Book.left_out`` names each part left out (by its file, in
a folder book) and says why.

The EPUB reader needs only the standard library: an EPUB is a zip with ``META-INF/container.xml``
pointing at the package document (OPF), whose spine lists the XHTML documents in reading order.
Package, container and NCX files go through defusedxml (no DTDs' entities, no external references);
XHTML goes through ``html.parser``, which knows HTML's named entities and loads nothing.
"""

from __future__ import annotations

import codecs
import html
import posixpath
import re
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Final
from urllib.parse import unquote
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from tts_core.text import has_speech, normalize_text, split_sentences

TEXT_SUFFIXES: Final = (".txt", ".md", ".markdown")
"""Files that a book folder's chapters may be; ``read_book`` also takes an ``.epub``."""

MAX_NAME_CHARS: Final = 60
"""Longest ``safe_name``: short enough for any file system and still readable in a listing."""

MAX_EPUB_MEMBER_BYTES: Final = 64 * 1024 * 1024
"""Largest uncompressed EPUB member read: far above any real chapter, below a zip bomb."""


class BookError(Exception):
    """A book that cannot be read: missing, unreadable, not UTF-8, an unknown format, a broken
    EPUB, or nothing to speak. The message names the file and the problem; it is raised on the
    operator's machine before any job exists, so it is not a ``ServiceError``."""


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


def read_book(path: Path) -> Book:
    """Read a ``.txt``, ``.md`` or ``.epub`` file, or a folder of ``.txt``/``.md`` chapter files."""
    if path.is_dir():
        return _read_folder(path)
    if not path.exists():
        raise BookError(f"{path}: no such file or folder")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        kind = repr(path.suffix) if path.suffix else "a file with no extension"
        raise BookError(f"{path}: cannot read {kind}; a book is a .txt, .md or .epub file, or a folder of .txt/.md")
    return reader(path)


def safe_name(index: int, title: str) -> str:
    """``NN-title``: a chapter's output file name, ASCII lowercase words joined by hyphens, at most
    ``MAX_NAME_CHARS`` characters and never just the number."""
    if index < 0:
        raise ValueError(f"chapter index must not be negative, got {index}")
    prefix = f"{index:02d}-"
    folded = unicodedata.normalize("NFKD", title.translate(_FOLD)).encode("ascii", "ignore").decode()
    words = re.sub(r"['\u2019`]", "", folded).lower()
    slug = re.sub(r"[^a-z0-9]+", "-", words).strip("-")[: MAX_NAME_CHARS - len(prefix)]
    if len(slug) == MAX_NAME_CHARS - len(prefix) and "-" in slug:
        slug = slug.rsplit("-", 1)[0]  # cut at a word boundary, not inside a word
    return prefix + (slug.strip("-") or "chapter")


_FOLD: Final = str.maketrans({"ß": "ss", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
                              "đ": "d", "Đ": "D", "ł": "l", "Ł": "L", "þ": "th", "Þ": "Th", "ð": "d"})  # fmt: skip
"""Letters that Unicode does not decompose into an ASCII base letter."""


# --- Common: decoding, chapter marks, assembly -------------------------------------------------------


@dataclass(frozen=True)
class _Mark:
    """A chapter heading; ``level`` 1 is a part (``BOOK I``, ``#``), 2 a chapter (``Chapter 3``, ``##``)."""

    title: str
    level: int


_Block = str | _Mark
"""A paragraph of text or a chapter heading, in reading order."""


@dataclass(frozen=True)
class _Part:
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
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")


def _read_text(path: Path) -> str:
    """The file as text, newlines as ``\\n``."""
    data = _read_bytes(path)
    try:
        text = _decode(data)
    except UnicodeDecodeError as e:
        raise BookError(f"{path}: not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}); save it as UTF-8") from e
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes) -> str:
    """UTF-8, with or without a BOM; UTF-16 only with its BOM (Windows' "Unicode" text files)."""
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    return data.decode(encoding)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise BookError(f"{path}: no such file") from e
    except OSError as e:
        raise BookError(f"{path}: cannot read it ({e.strerror or e})") from e


def _paragraph(lines: Iterable[str]) -> str:
    """Lines of one paragraph, spaces collapsed, empty lines dropped."""
    cleaned = (_SPACES.sub(" ", _INVISIBLE.sub("", line)).strip() for line in lines)
    return "\n".join(line for line in cleaned if line)


def _split_chapters(blocks: Iterable[_Block], book_title: str) -> list[_Part]:
    """Cut blocks into chapters at marks. Text before the first mark is a chapter titled by the book.
    A part heading right before a chapter heading prefixes its title ("BOOK I. Chapter 1"); any other
    heading without text after it (a table of contents) is dropped."""
    parts: list[_Part] = []
    titles: list[_Mark] = []
    paragraphs: list[str] = []
    for block in blocks:
        if isinstance(block, str):
            paragraphs.append(block)
            continue
        if paragraphs:
            parts.append(_Part(_join_titles(titles) or book_title, "\n\n".join(paragraphs)))
            paragraphs, titles = [], []
        elif not all(t.level < block.level for t in titles):
            titles = []
        titles.append(block)
    if paragraphs:
        parts.append(_Part(_join_titles(titles) or book_title, "\n\n".join(paragraphs)))
    return parts


def _join_titles(marks: Sequence[_Mark]) -> str:
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


def _assemble(source: Path, title: str, parts: Sequence[_Part], sentences_only: bool = True) -> Book:
    """Number the chapters worth narrating (with ``sentences_only``, those with a sentence, if any
    has one), naming each part left out and why; refuse a book with nothing to say. Speakable is
    what the API takes: a letter or digit once normalised."""
    speakable = [p for p in parts if has_speech(normalize_text(p.text))]
    if not speakable:
        raise BookError(f"{source}: the book has no text to speak")
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


def _title_from_name(path: Path) -> str:
    return _SPACES.sub(" ", re.sub(r"[_-]+", " ", path.stem)).strip() or path.stem


# --- Plain text -----------------------------------------------------------------------------------

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
_UNDERSCORE_ITALICS = re.compile(r"(?<!\w)_(?=\S)([^_]+?)(?<=\S)_(?!\w)")
_ILLUSTRATION = re.compile(r"\[Illustration(?::[^\]]*)?\]", re.IGNORECASE)


def _read_txt(path: Path) -> Book:
    text, gutenberg_title = _strip_gutenberg(_read_text(path))
    title = gutenberg_title or _title_from_name(path)
    return _assemble(path, title, _split_chapters(_text_blocks(text), title))


def _strip_gutenberg(text: str) -> tuple[str, str | None]:
    """The body between Project Gutenberg's ``*** START OF …***`` and ``*** END OF …***`` lines
    (all of it when they are absent), and the title from its header."""
    start = _GUTENBERG_START.search(text)
    if start is None:
        return text, None
    title = _GUTENBERG_TITLE.search(text, 0, start.start())
    end = _GUTENBERG_END.search(text, start.end())
    body = text[start.end() : end.start() if end else len(text)]
    return _GUTENBERG_LAST_LINE.sub("", body), title.group(1) if title else None


def _text_blocks(text: str) -> Iterator[_Block]:
    """Paragraphs and chapter marks of plain text. A mark is a paragraph of its own: one line, or two
    when a chapter's name follows its number (``CHAPTER I.`` / ``Down the Rabbit-Hole``)."""
    text = _ILLUSTRATION.sub("", _UNDERSCORE_ITALICS.sub(r"\1", text))
    for chunk in _PARAGRAPH_BREAK.split(text):
        paragraph = _paragraph(chunk.split("\n"))
        if paragraph:
            yield _text_mark(paragraph) or paragraph


def _text_mark(paragraph: str) -> _Mark | None:
    lines = paragraph.split("\n")
    match = _TEXT_MARK.fullmatch(lines[0])
    if match is None or len(lines) > 2 or (len(lines) == 2 and (match["rest"] or len(lines[1]) > 80)):
        return None
    title = lines[0] if len(lines) == 1 else f"{lines[0].rstrip(' .')}. {lines[1]}"
    return _Mark(title, 1 if match["part"] else 2)


# --- Markdown -------------------------------------------------------------------------------------

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
    (_UNDERSCORE_ITALICS, r"\1"),
)
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_ESCAPE_BASE: Final = 0xF0000  # a private-use plane: escaped characters hide there from the patterns


def _read_markdown(path: Path) -> Book:
    text, meta_title = _front_matter(_read_text(path))
    blocks = list(_markdown_blocks(text))
    heads = [b for b in blocks if isinstance(b, _Mark)]
    title = meta_title or _title_from_name(path)
    tops = [h for h in heads if h.level == 1]
    if len(tops) == 1 and heads[0] is tops[0]:
        title = meta_title or tops[0].title  # a single leading `#` names the book
        if len(heads) > 1:
            blocks.remove(tops[0])  # ... and its `##` headings are the chapters
    return _assemble(path, title, _split_chapters(blocks, title))


def _front_matter(text: str) -> tuple[str, str | None]:
    """Text without a leading YAML block (``---`` … ``---``), and the ``title:`` found in it."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return text, None
    title = _FRONT_MATTER_TITLE.search(match["yaml"])
    return text[match.end() :], title["title"] if title else None


def _markdown_blocks(text: str) -> Iterator[_Block]:
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


def _markdown_line(raw: str, lines: list[str]) -> Iterator[_Block]:
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


def _markdown_heading(source: str, level: int) -> Iterator[_Block]:
    title = _paragraph([_markdown_inline(source)]).replace("\n", " ")
    if title:
        yield _Mark(title, level) if level <= 2 else title


def _flush_markdown(lines: list[str]) -> Iterator[str]:
    paragraph = _paragraph(_markdown_inline("\n".join(lines)).split("\n"))
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


# --- Folder of chapter files ------------------------------------------------------------------------


def _read_folder(folder: Path) -> Book:
    try:
        entries = list(folder.iterdir())
    except OSError as e:
        raise BookError(f"{folder}: cannot list the folder ({e.strerror or e})") from e
    chapter_files = (p for p in entries if p.suffix.lower() in TEXT_SUFFIXES and not p.name.startswith("."))
    files = sorted((p for p in chapter_files if p.is_file()), key=lambda p: _natural_key(p.name))
    if not files:
        raise BookError(f"{folder}: the folder has no .txt or .md files")
    title = _paragraph([folder.resolve().name]) or "Book"
    return _assemble(folder, title, [_file_chapter(p) for p in files], sentences_only=False)


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key putting ``2.txt`` before ``10.txt``: digit runs compare as numbers."""
    return [(0, int(piece)) if piece.isdigit() else (1, piece.casefold()) for piece in re.split(r"(\d+)", name)]


def _file_chapter(path: Path) -> _Part:
    """One file, one chapter: titled by its first heading (taken out of the text), else its name."""
    text = _read_text(path)
    if path.suffix.lower() == ".txt":
        blocks = list(_text_blocks(_strip_gutenberg(text)[0]))
        meta_title = None
    else:
        text, meta_title = _front_matter(text)
        blocks = list(_markdown_blocks(text))
    title = meta_title or _title_from_name(path)
    if blocks and isinstance(first := blocks[0], _Mark):
        title = first.title
        del blocks[0]
    body = (b.title if isinstance(b, _Mark) else b for b in blocks)
    return _Part(title, "\n\n".join(body), path.name)


# --- EPUB -----------------------------------------------------------------------------------------

_CONTAINER_PATH: Final = "META-INF/container.xml"
_CONTAINER_NS: Final = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF_NS: Final = "{http://www.idpf.org/2007/opf}"
_DC_NS: Final = "{http://purl.org/dc/elements/1.1/}"
_NCX_NS: Final = "{http://www.daisy.org/z3986/2005/ncx/}"
_XHTML_TYPES: Final = frozenset({"application/xhtml+xml", "text/html"})


@dataclass(frozen=True)
class _Package:
    """What the OPF says: the title, the spine's documents (archive paths), and where the tables of
    contents are."""

    title: str
    spine: list[str]
    nav: str | None
    ncx: str | None


def _read_epub(path: Path) -> Book:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise BookError(f"{path}: broken EPUB: not a zip archive") from e
    except OSError as e:
        raise BookError(f"{path}: cannot read it ({e.strerror or e})") from e
    with archive:
        package = _package(path, archive)
        toc = _toc_titles(path, archive, package)
        parts: list[_Part] = []
        for name in package.spine:
            document = _xhtml(path, name, _member(path, archive, name))
            if parts and toc and name not in toc and not document.headings:
                # A document that no table-of-contents entry or heading starts continues the chapter
                # before it (converters split long chapters into several files).
                text = "\n\n".join(p for p in [parts[-1].text, *document.paragraphs] if p)
                parts[-1] = _Part(parts[-1].title, text)
                continue
            title = toc.get(name) or ". ".join(document.headings) or package.title
            parts.append(_Part(title, "\n\n".join(document.paragraphs)))
    return _assemble(path, package.title, parts)


def _member(path: Path, archive: zipfile.ZipFile, name: str) -> bytes:
    try:
        info = archive.getinfo(name)
    except KeyError as e:
        raise BookError(f"{path}: broken EPUB: {name} is missing from the archive") from e
    if info.file_size > MAX_EPUB_MEMBER_BYTES:
        raise BookError(f"{path}: {name} is {info.file_size} bytes uncompressed, over {MAX_EPUB_MEMBER_BYTES}")
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, OSError, ValueError) as e:  # CRC errors, bad compression data
        raise BookError(f"{path}: broken EPUB: cannot unpack {name} ({e})") from e


def _xml(path: Path, name: str, data: bytes) -> Element:
    try:
        root: Element = SafeET.fromstring(data)
    except ParseError as e:
        raise BookError(f"{path}: broken EPUB: {name} is not well-formed XML ({e})") from e
    except DefusedXmlException as e:
        raise BookError(f"{path}: {name} declares XML entities or external references, refused ({e})") from e
    return root


def _package(path: Path, archive: zipfile.ZipFile) -> _Package:
    if _CONTAINER_PATH not in archive.namelist():
        raise BookError(f"{path}: broken EPUB: no {_CONTAINER_PATH}")
    container = _xml(path, _CONTAINER_PATH, _member(path, archive, _CONTAINER_PATH))
    rootfile = container.find(f".//{_CONTAINER_NS}rootfile")
    opf_path = rootfile.get("full-path") if rootfile is not None else None
    if not opf_path:
        raise BookError(f"{path}: broken EPUB: {_CONTAINER_PATH} names no package document (OPF)")
    if opf_path not in archive.namelist():
        raise BookError(f"{path}: broken EPUB: the package document {opf_path} is missing from the archive")
    opf = _xml(path, opf_path, _member(path, archive, opf_path))
    spine = opf.find(f"{_OPF_NS}spine")
    if spine is None:
        raise BookError(f"{path}: broken EPUB: {opf_path} has no spine")
    base = posixpath.dirname(opf_path)
    items = {i.get("id", ""): i for i in opf.iterfind(f"{_OPF_NS}manifest/{_OPF_NS}item")}
    nav = next((i for i in items.values() if "nav" in i.get("properties", "").split()), None)
    ncx = items.get(spine.get("toc", "")) or next(
        (i for i in items.values() if i.get("media-type") == "application/x-dtbncx+xml"), None
    )
    title = _paragraph([opf.findtext(f"{_OPF_NS}metadata/{_DC_NS}title") or ""]).replace("\n", " ")
    return _Package(
        title=title or _title_from_name(path),
        spine=[_resolve(base, i.get("href", "")) for i in _spine_items(path, opf_path, spine, items) if i is not nav],
        nav=_resolve(base, nav.get("href", "")) if nav is not None else None,
        ncx=_resolve(base, ncx.get("href", "")) if ncx is not None else None,
    )


def _spine_items(path: Path, opf_path: str, spine: Element, items: dict[str, Element]) -> Iterator[Element]:
    """The manifest items of the spine's linear XHTML documents, in reading order."""
    for ref in spine.iterfind(f"{_OPF_NS}itemref"):
        item = items.get(ref.get("idref", ""))
        if item is None:
            raise BookError(f"{path}: broken EPUB: {opf_path}'s spine names {ref.get('idref')!r}, not in its manifest")
        if ref.get("linear") != "no" and item.get("media-type") in _XHTML_TYPES:
            yield item


def _resolve(base: str, href: str) -> str:
    """An href (relative to ``base``, percent-encoded, maybe with a #fragment) as an archive path."""
    return posixpath.normpath(posixpath.join(base, unquote(href.split("#", 1)[0])))


def _toc_titles(path: Path, archive: zipfile.ZipFile, package: _Package) -> dict[str, str]:
    """Chapter titles by document, from the EPUB 3 navigation document, else the EPUB 2 NCX; the
    first entry pointing into a document names it."""
    entries: list[tuple[str, str]] = []
    if package.nav is not None:
        parser = _NavParser()
        parser.feed(_decode_member(path, package.nav, _member(path, archive, package.nav)))
        parser.close()
        entries = [(_resolve(posixpath.dirname(package.nav), href), text) for href, text in parser.entries]
    elif package.ncx is not None:
        ncx = _xml(path, package.ncx, _member(path, archive, package.ncx))
        for point in ncx.iter(f"{_NCX_NS}navPoint"):
            label = point.findtext(f"{_NCX_NS}navLabel/{_NCX_NS}text") or ""
            content = point.find(f"{_NCX_NS}content")
            if content is not None:
                entries.append((_resolve(posixpath.dirname(package.ncx), content.get("src", "")), label))
    titles: dict[str, str] = {}
    for document, text in entries:
        if cleaned := _paragraph([text]).replace("\n", " "):
            titles.setdefault(document, cleaned)
    return titles


def _decode_member(path: Path, name: str, data: bytes) -> str:
    try:
        return _decode(data)
    except UnicodeDecodeError as e:
        raise BookError(f"{path}: {name} is not UTF-8 text (byte {e.start})") from e


class _NavParser(HTMLParser):
    """Links of the navigation document's ``<nav epub:type="toc">`` (or of its only ``<nav>``)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.entries: list[tuple[str, str]] = []
        self._navs = 0  # how deep inside a table-of-contents <nav>
        self._done = False
        self._link: list[str] | None = None
        self._href = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        kind = (dict(attrs).get("epub:type") or "toc").split()
        if tag == "nav" and not self._done and (self._navs or "toc" in kind):
            self._navs += 1
        elif tag == "a" and self._navs:
            self._href, self._link = dict(attrs).get("href") or "", []

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._navs:
            self._navs -= 1
            self._done = self._navs == 0
        elif tag == "a" and self._link is not None:
            self.entries.append((self._href, "".join(self._link)))
            self._link = None

    def handle_data(self, data: str) -> None:
        if self._link is not None:
            self._link.append(data)


@dataclass
class _Document:
    headings: list[str] = field(default_factory=list)
    """Headings before any body text: the document's title, kept out of its text."""
    paragraphs: list[str] = field(default_factory=list)


def _xhtml(path: Path, name: str, data: bytes) -> _Document:
    parser = _XhtmlText()
    parser.feed(_decode_member(path, name, data))
    parser.close()
    return parser.document


class _XhtmlText(HTMLParser):
    """XHTML body to paragraphs: block elements end a paragraph, ``<br>`` ends a line, and scripts,
    styles, ruby readings and page-break markers say nothing."""

    _HEADINGS: Final = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
    _BLOCKS: Final = _HEADINGS | {
        "address", "article", "aside", "blockquote", "body", "dd", "div", "dl", "dt", "figcaption", "figure",
        "footer", "header", "hr", "li", "main", "ol", "p", "pre", "section", "table", "td", "th", "tr", "ul",
    }  # fmt: skip
    _SILENT: Final = frozenset({"head", "script", "style", "rp", "rt", "svg", "math", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.document = _Document()
        self._text: list[str] = []
        self._silent: list[str] = []  # open elements whose content is not read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._silent:
            if tag == self._silent[-1]:
                self._silent.append(tag)  # nested in its own kind: count it so its end tag matches
        elif tag in self._SILENT or "pagebreak" in (dict(attrs).get("epub:type") or ""):
            self._silent.append(tag)
        elif tag == "br":
            self._text.append("\n")
        elif tag in self._BLOCKS:
            self._end_paragraph(heading=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._silent:
            return
        if tag == "br":
            self._text.append("\n")
        elif tag in self._BLOCKS:
            self._end_paragraph(heading=False)

    def handle_endtag(self, tag: str) -> None:
        if self._silent:
            if tag == self._silent[-1]:
                self._silent.pop()
        elif tag in self._BLOCKS:
            self._end_paragraph(heading=tag in self._HEADINGS)

    def handle_data(self, data: str) -> None:
        if not self._silent:
            self._text.append(re.sub(r"\s+", " ", data))

    def close(self) -> None:
        super().close()
        self._end_paragraph(heading=False)

    def _end_paragraph(self, heading: bool) -> None:
        paragraph = _paragraph("".join(self._text).split("\n"))
        self._text.clear()
        if not paragraph:
            return
        if heading and not self.document.paragraphs:
            self.document.headings.append(paragraph.replace("\n", " "))
        else:
            self.document.paragraphs.append(paragraph)


_READERS: Final[dict[str, Callable[[Path], Book]]] = {
    ".txt": _read_txt,
    ".md": _read_markdown,
    ".markdown": _read_markdown,
    ".epub": _read_epub,
}
