"""EPUB books: the spine's XHTML documents in reading order, titled by the navigation document or
the NCX. Needs only the standard library (an EPUB is a zip with ``META-INF/container.xml`` pointing at
the package document, whose spine lists the documents); package, container and NCX files go through
defusedxml (no DTDs' entities, no external references), XHTML through ``html.parser``, which knows
HTML's named entities and loads nothing. The archive is read from memory: the API reads uploads with
it, and no member is unpacked past :data:`MAX_EPUB_UNPACKED_BYTES` (a zip bomb)."""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Final
from urllib.parse import unquote
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from tts_core.base.errors import InvalidBook
from tts_core.books.common import Book, Part, assemble, decode, join_paragraph, title_from_name

MAX_EPUB_UNPACKED_BYTES: Final = 64 * 1024 * 1024
"""Most bytes unpacked from one EPUB, all members read together: far above any real book's text
(its images are never read), below a zip bomb. A member's declared size is checked before it is
unpacked, and :mod:`zipfile` unpacks no more than it declares (a member that holds more fails its CRC)."""

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


@dataclass
class _Archive:
    """The book's zip, the file's name (for messages), and what may still be unpacked from it."""

    name: str
    files: zipfile.ZipFile
    left: int

    def member(self, member: str) -> bytes:
        try:
            info = self.files.getinfo(member)
        except KeyError as e:
            raise InvalidBook(f"{self.name}: broken EPUB: {member} is missing from the archive") from e
        if info.file_size > self.left:
            raise InvalidBook(
                f"{self.name}: its documents unpack to more than {MAX_EPUB_UNPACKED_BYTES} bytes "
                f"(at {member}, of {info.file_size}); refused as a zip bomb would be"
            )
        self.left -= info.file_size
        try:
            return self.files.read(info)
        except (zipfile.BadZipFile, OSError, ValueError) as e:  # CRC errors, bad compression data
            raise InvalidBook(f"{self.name}: broken EPUB: cannot unpack {member} ({e})") from e

    def has(self, member: str) -> bool:
        try:
            self.files.getinfo(member)
        except KeyError:
            return False
        return True


def read_epub(data: bytes, name: str) -> Book:
    try:
        files = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise InvalidBook(f"{name}: broken EPUB: not a zip archive") from e
    with files:
        archive = _Archive(name, files, left=MAX_EPUB_UNPACKED_BYTES)
        package = _package(archive)
        toc = _toc_titles(archive, package)
        parts: list[Part] = []
        for document_name in package.spine:
            document = _xhtml(archive, document_name)
            if parts and toc and document_name not in toc and not document.headings:
                # A document that no table-of-contents entry or heading starts continues the chapter
                # before it (converters split long chapters into several files).
                text = "\n\n".join(p for p in [parts[-1].text, *document.paragraphs] if p)
                parts[-1] = Part(parts[-1].title, text)
                continue
            title = toc.get(document_name) or ". ".join(document.headings) or package.title
            parts.append(Part(title, "\n\n".join(document.paragraphs)))
    return assemble(name, package.title, parts)


def _xml(archive: _Archive, member: str) -> Element:
    try:
        root: Element = SafeET.fromstring(archive.member(member))
    except ParseError as e:
        raise InvalidBook(f"{archive.name}: broken EPUB: {member} is not well-formed XML ({e})") from e
    except DefusedXmlException as e:
        raise InvalidBook(
            f"{archive.name}: {member} declares XML entities or external references, refused ({e})"
        ) from e
    return root


def _package(archive: _Archive) -> _Package:
    name = archive.name
    if not archive.has(_CONTAINER_PATH):
        raise InvalidBook(f"{name}: broken EPUB: no {_CONTAINER_PATH}")
    container = _xml(archive, _CONTAINER_PATH)
    rootfile = container.find(f".//{_CONTAINER_NS}rootfile")
    opf_path = rootfile.get("full-path") if rootfile is not None else None
    if not opf_path:
        raise InvalidBook(f"{name}: broken EPUB: {_CONTAINER_PATH} names no package document (OPF)")
    if not archive.has(opf_path):
        raise InvalidBook(f"{name}: broken EPUB: the package document {opf_path} is missing from the archive")
    opf = _xml(archive, opf_path)
    spine = opf.find(f"{_OPF_NS}spine")
    if spine is None:
        raise InvalidBook(f"{name}: broken EPUB: {opf_path} has no spine")
    base = posixpath.dirname(opf_path)
    items = {i.get("id", ""): i for i in opf.iterfind(f"{_OPF_NS}manifest/{_OPF_NS}item")}
    nav = next((i for i in items.values() if "nav" in i.get("properties", "").split()), None)
    # `is None`, not `or`: an element without children is false (a DeprecationWarning from Python 3.12 on).
    ncx = items.get(spine.get("toc", ""))
    if ncx is None:
        ncx = next((i for i in items.values() if i.get("media-type") == "application/x-dtbncx+xml"), None)
    title = join_paragraph([opf.findtext(f"{_OPF_NS}metadata/{_DC_NS}title") or ""]).replace("\n", " ")
    return _Package(
        title=title or title_from_name(name),
        spine=[_resolve(base, i.get("href", "")) for i in _spine_items(name, opf_path, spine, items) if i is not nav],
        nav=_resolve(base, nav.get("href", "")) if nav is not None else None,
        ncx=_resolve(base, ncx.get("href", "")) if ncx is not None else None,
    )


def _spine_items(name: str, opf_path: str, spine: Element, items: dict[str, Element]) -> Iterator[Element]:
    """The manifest items of the spine's linear XHTML documents, in reading order."""
    for ref in spine.iterfind(f"{_OPF_NS}itemref"):
        item = items.get(ref.get("idref", ""))
        if item is None:
            raise InvalidBook(
                f"{name}: broken EPUB: {opf_path}'s spine names {ref.get('idref')!r}, not in its manifest"
            )
        if ref.get("linear") != "no" and item.get("media-type") in _XHTML_TYPES:
            yield item


def _resolve(base: str, href: str) -> str:
    """An href (relative to ``base``, percent-encoded, maybe with a #fragment) as an archive path."""
    return posixpath.normpath(posixpath.join(base, unquote(href.split("#", 1)[0])))


def _toc_titles(archive: _Archive, package: _Package) -> dict[str, str]:
    """Chapter titles by document, from the EPUB 3 navigation document, else the EPUB 2 NCX; the
    first entry pointing into a document names it."""
    entries: list[tuple[str, str]] = []
    if package.nav is not None:
        parser = _NavParser()
        parser.feed(_decode_member(archive, package.nav))
        parser.close()
        entries = [(_resolve(posixpath.dirname(package.nav), href), text) for href, text in parser.entries]
    elif package.ncx is not None:
        ncx = _xml(archive, package.ncx)
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


def _decode_member(archive: _Archive, member: str) -> str:
    try:
        return decode(archive.member(member))
    except UnicodeDecodeError as e:
        raise InvalidBook(f"{archive.name}: {member} is not UTF-8 text (byte {e.start})") from e


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


def _xhtml(archive: _Archive, member: str) -> _Document:
    parser = _XhtmlText()
    parser.feed(_decode_member(archive, member))
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
