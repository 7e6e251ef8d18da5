"""EPUB books: the spine's XHTML documents in reading order, titled by the navigation document or
the NCX. Needs only the standard library (an EPUB is a zip with ``META-INF/container.xml`` pointing at
the package document, whose spine lists the documents); package, container and NCX files go through
defusedxml (no DTDs' entities, no external references), XHTML through ``html.parser``, which knows
HTML's named entities and loads nothing."""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Final
from urllib.parse import unquote
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from narration.books.common import Book, BookError, Part, assemble, decode, join_paragraph, title_from_name

MAX_EPUB_MEMBER_BYTES: Final = 64 * 1024 * 1024
"""Largest uncompressed EPUB member read: far above any real chapter, below a zip bomb."""

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


def read_epub(path: Path) -> Book:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as e:
        raise BookError(f"{path}: broken EPUB: not a zip archive") from e
    except OSError as e:
        raise BookError(f"{path}: cannot read it ({e.strerror or e})") from e
    with archive:
        package = _package(path, archive)
        toc = _toc_titles(path, archive, package)
        parts: list[Part] = []
        for name in package.spine:
            document = _xhtml(path, name, _member(path, archive, name))
            if parts and toc and name not in toc and not document.headings:
                # A document that no table-of-contents entry or heading starts continues the chapter
                # before it (converters split long chapters into several files).
                text = "\n\n".join(p for p in [parts[-1].text, *document.paragraphs] if p)
                parts[-1] = Part(parts[-1].title, text)
                continue
            title = toc.get(name) or ". ".join(document.headings) or package.title
            parts.append(Part(title, "\n\n".join(document.paragraphs)))
    return assemble(path, package.title, parts)


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
    # `is None`, not `or`: an element without children is false (a DeprecationWarning from Python 3.12 on).
    ncx = items.get(spine.get("toc", ""))
    if ncx is None:
        ncx = next((i for i in items.values() if i.get("media-type") == "application/x-dtbncx+xml"), None)
    title = join_paragraph([opf.findtext(f"{_OPF_NS}metadata/{_DC_NS}title") or ""]).replace("\n", " ")
    return _Package(
        title=title or title_from_name(path),
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
        if cleaned := join_paragraph([text]).replace("\n", " "):
            titles.setdefault(document, cleaned)
    return titles


def _decode_member(path: Path, name: str, data: bytes) -> str:
    try:
        return decode(data)
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
        paragraph = join_paragraph("".join(self._text).split("\n"))
        self._text.clear()
        if not paragraph:
            return
        if heading and not self.document.paragraphs:
            self.document.headings.append(paragraph.replace("\n", " "))
        else:
            self.document.paragraphs.append(paragraph)
