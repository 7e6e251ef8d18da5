"""Books read into chapters (``tts_core.books``, and ``narration.books`` on top for local files and
folders): the same book as text, Markdown, EPUB and a folder gives the same chapters, paragraph
breaks survive, and every broken input says what is wrong."""

from __future__ import annotations

import codecs
import html
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from narration.books import read_book
from tts_core.base.errors import InvalidBook
from tts_core.books import epub
from tts_core.books.common import Book
from tts_core.books.reading import read_book as read_book_file
from tts_core.text.file_names import MAX_NAME_CHARS, safe_name

CORPUS = Path(__file__).resolve().parents[1] / "bench" / "corpus" / "pride_and_prejudice.txt"
DATA = Path(__file__).resolve().parent / "data" / "books"
TITLES = ["Chapter 1", "Chapter 2", "Chapter 3"]


def corpus_chapters() -> list[tuple[str, list[str]]]:
    """The corpus cut by hand: (heading, paragraphs as written, hard wraps and _italics_ kept)."""
    pieces = re.split(r"^(Chapter \d+)$", CORPUS.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    return [
        (title, [p.strip() for p in body.split("\n\n") if p.strip()])
        for title, body in zip(pieces[::2], pieces[1::2], strict=True)
    ]


def plain(paragraph: str) -> str:
    """A paragraph as it should be narrated: no italics marks, whitespace collapsed."""
    return " ".join(re.sub(r"_([^_]+)_", r"\1", paragraph).split())


def paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.split("\n\n")]


def expected() -> list[tuple[str, list[str]]]:
    return [(title, [plain(p) for p in body]) for title, body in corpus_chapters()]


def chapters_of(book: Book) -> list[tuple[str, list[str]]]:
    assert [c.index for c in book.chapters] == list(range(1, len(book.chapters) + 1))
    return [(c.title, paragraphs(c.text)) for c in book.chapters]


# --- Builders: the corpus as Markdown, EPUB and a folder ------------------------------------------


def write_markdown(path: Path) -> Path:
    lines = ["# Pride and Prejudice", "", "![Frontispiece](images/frontispiece.png)", ""]
    for title, body in corpus_chapters():
        lines += [f"## {title}", "", "<!-- page break -->", ""]
        lines += [re.sub(r"_([^_]+)_", r"*\1*", p) + "\n" for p in body]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def xhtml(title: str, body: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">\n'
        f"<head><title>{html.escape(title)}</title><style>p {{ text-indent: 1em; }}</style></head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def chapter_xhtml(heading: str, body: list[str]) -> str:
    def para(p: str) -> str:
        return "<p>" + re.sub(r"_([^_]+)_", r"<em>\1</em>", html.escape(p, quote=False)) + "</p>"

    page_break = '<span epub:type="pagebreak" id="page-1" title="1">1</span>'
    return xhtml(
        heading, f"<section>\n<h1>{heading}</h1>\n{page_break}\n" + "\n".join(map(para, body)) + "\n</section>"
    )


def write_epub(path: Path, toc: str = "nav") -> Path:
    """An EPUB 3 (``toc="nav"``), an EPUB 2-style one with only an NCX (``"ncx"``), or one with no table of
    contents (``"none"``): a cover, a title page, then the corpus chapters. Where a table of contents names
    the chapters, the documents' own headings say ``CHAPTER I`` etc., so the titles show which was read."""
    chapters = corpus_chapters()
    roman = ["I", "II", "III"]
    docs = {
        "cover.xhtml": xhtml(
            "Cover", '<div class="cover"><img src="images/cover.png" alt="Pride and Prejudice"/></div>'
        ),
        "title.xhtml": xhtml("Title page", "<h1>Pride and Prejudice</h1>\n<p>by Jane Austen</p>"),
    }
    for n, (title, body) in enumerate(chapters, start=1):
        heading = title if toc == "none" else f"CHAPTER {roman[n - 1]}"
        docs[f"text/chapter {n}.xhtml"] = chapter_xhtml(heading, body)  # a space: hrefs are percent-encoded
    links = "\n".join(
        f'<li><a href="text/chapter%20{n}.xhtml#start">{title}</a></li>' for n, (title, _) in enumerate(chapters, 1)
    )
    nav = xhtml(
        "Contents",
        f'<nav epub:type="toc" id="toc"><h1>Contents</h1><ol>\n{links}\n</ol></nav>\n'
        '<nav epub:type="landmarks"><ol><li><a epub:type="cover" href="cover.xhtml">Cover</a></li></ol></nav>',
    )
    points = "\n".join(
        f'<navPoint id="p{n}" playOrder="{n}"><navLabel><text>{title}</text></navLabel>'
        f'<content src="text/chapter%20{n}.xhtml"/></navPoint>'
        for n, (title, _) in enumerate(chapters, 1)
    )
    ncx = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">\n'
        '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><head/>'
        f"<docTitle><text>Pride and Prejudice</text></docTitle><navMap>\n{points}\n</navMap></ncx>\n"
    )
    names = ["cover.xhtml", "title.xhtml", *(f"text/chapter {n}.xhtml" for n in range(1, len(chapters) + 1))]
    ids = ["cover", "titlepage", *(f"c{n}" for n in range(1, len(chapters) + 1))]
    manifest = [
        f'<item id="{i}" href="{name.replace(" ", "%20")}" media-type="application/xhtml+xml"/>'
        for i, name in zip(ids, names, strict=True)
    ]
    manifest.append('<item id="cover-image" href="images/cover.png" media-type="image/png" properties="cover-image"/>')
    spine = [f'<itemref idref="{i}"/>' for i in ids]
    if toc == "nav":
        manifest.append('<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>')
        spine.insert(2, '<itemref idref="nav"/>')
    if toc == "ncx":
        manifest.append('<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>')
    spine_toc = ' toc="ncx"' if toc == "ncx" else ""
    opf = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">\n'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        '<dc:identifier id="uid">urn:uuid:8a4b6e0c-3f0e-4c39-9d2c-2b1f4f0f1342</dc:identifier>'
        "<dc:title>Pride and Prejudice</dc:title><dc:creator>Jane Austen</dc:creator><dc:language>en</dc:language>"
        '<meta property="dcterms:modified">2025-01-01T00:00:00Z</meta></metadata>\n'
        f"<manifest>\n{chr(10).join(manifest)}\n</manifest>\n"
        f"<spine{spine_toc}>\n{chr(10).join(spine)}\n</spine>\n</package>\n"
    )
    files = {f"OEBPS/{name}": text for name, text in docs.items()}
    files["OEBPS/content.opf"] = opf
    files["OEBPS/nav.xhtml"] = nav
    files["OEBPS/toc.ncx"] = ncx
    return write_zip(path, files, container="OEBPS/content.opf")


CONTAINER = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
    '<rootfiles><rootfile full-path="{}" media-type="application/oebps-package+xml"/></rootfiles></container>\n'
)


def write_zip(path: Path, files: dict[str, str], container: str | None) -> Path:
    """An EPUB's zip: ``mimetype`` first and stored, as the OCF spec requires, then the rest compressed."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        if container is not None:
            archive.writestr("META-INF/container.xml", CONTAINER.format(container), zipfile.ZIP_DEFLATED)
        for name, text in files.items():
            archive.writestr(name, text, zipfile.ZIP_DEFLATED)
        archive.writestr("OEBPS/images/cover.png", b"\x89PNG\r\n\x1a\n", zipfile.ZIP_DEFLATED)
    return path


def write_folder(folder: Path) -> Path:
    """One file per chapter, named so that a plain string sort would put the last chapter second."""
    folder.mkdir()
    (one, two, three) = corpus_chapters()
    (folder / "1.txt").write_text(f"{one[0]}\n\n" + "\n\n".join(one[1]) + "\n", encoding="utf-8")
    md_two = "\n\n".join(re.sub(r"_([^_]+)_", r"**\1**", p) for p in two[1])
    (folder / "2.md").write_text(f"# {two[0]}\n\n{md_two}\n", encoding="utf-8")
    (folder / "10.txt").write_text(f"{three[0]}\n\n\n" + "\n\n".join(three[1]) + "\n", encoding="utf-8")
    (folder / "notes.json").write_text("{}", encoding="utf-8")  # not a chapter: ignored
    (folder / ".draft.txt").write_text("Chapter 9\n\nA hidden draft, never read.\n", encoding="utf-8")
    return folder


def write_gutenberg(path: Path) -> Path:
    """The corpus as Project Gutenberg ships it: BOM, CRLF, header, front matter, table of contents, footer."""
    header = (
        "The Project Gutenberg eBook of Pride and Prejudice\n\n"
        "This ebook is for the use of anyone anywhere in the United States and most other parts of the world\n"
        "at no cost and with almost no restrictions whatsoever.\n\n"
        "Title: Pride and Prejudice\n\nAuthor: Jane Austen\n\nRelease date: June 1, 1998 [eBook #1342]\n\n"
        "Language: English\n\n*** START OF THE PROJECT GUTENBERG EBOOK PRIDE AND PREJUDICE ***\n\n\n"
        "                          Pride and Prejudice\n\n                             By Jane Austen\n\n\n"
        "Contents\n\n    Chapter 1\n    Chapter 2\n    Chapter 3\n\n\n\n"
    )
    footer = (
        "\n\n\nEnd of the Project Gutenberg EBook of Pride and Prejudice, by Jane Austen\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK PRIDE AND PREJUDICE ***\n\n"
        "Updated editions will replace the previous one--the old editions will be renamed.\n\n"
        "Creating the works from print editions not protected by U.S. copyright law means that no one owns\n"
        "a United States copyright in these works.\n"
    )
    text = header + CORPUS.read_text(encoding="utf-8") + footer
    path.write_bytes(codecs.BOM_UTF8 + text.replace("\n", "\r\n").encode("utf-8"))
    return path


# --- One book, every format -----------------------------------------------------------------------


def test_the_corpus_has_three_chapters_of_prose() -> None:
    chapters = corpus_chapters()
    assert [title for title, _ in chapters] == TITLES
    assert all(len(body) > 10 for _, body in chapters)
    assert 15_000 < len(CORPUS.read_text(encoding="utf-8")) < 30_000


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "txt": lambda tmp: CORPUS,
    "gutenberg-txt": lambda tmp: write_gutenberg(tmp / "pg1342.txt"),
    "md": lambda tmp: write_markdown(tmp / "pride.md"),
    "epub-nav": lambda tmp: write_epub(tmp / "pride.epub", toc="nav"),
    "epub-ncx": lambda tmp: write_epub(tmp / "pride.epub", toc="ncx"),
    "epub-headings": lambda tmp: write_epub(tmp / "pride.epub", toc="none"),
    "folder": lambda tmp: write_folder(tmp / "Pride and Prejudice"),
}


@pytest.mark.parametrize("variant", list(BUILDERS))
def test_every_format_gives_the_same_chapters(variant: str, tmp_path: Path) -> None:
    book = read_book(BUILDERS[variant](tmp_path))
    assert chapters_of(book) == expected()
    text = "\n\n".join(c.text for c in book.chapters)
    assert not set("_*<>[]#") & set(text)  # no markup is left to be read out
    assert not re.search("Gutenberg|Contents|Jane Austen", text)  # boilerplate, title page, table of contents


@pytest.mark.parametrize("variant", [v for v in BUILDERS if v != "folder"])
def test_a_files_bytes_read_under_its_name_give_what_its_path_gives(variant: str, tmp_path: Path) -> None:
    """One reader for ``ttsq narrate`` and the API: the path only finds the bytes and names the book."""
    path = BUILDERS[variant](tmp_path)
    assert read_book_file(path.read_bytes(), path.name) == read_book(path)
    assert read_book_file(path.read_bytes(), str(path)) == read_book(path)


@pytest.mark.parametrize(
    ("variant", "title"),
    [
        ("txt", "pride and prejudice"),  # no header: the file's name
        ("gutenberg-txt", "Pride and Prejudice"),  # Gutenberg's "Title:" line
        ("md", "Pride and Prejudice"),  # the one leading "#"
        ("epub-nav", "Pride and Prejudice"),  # dc:title
        ("folder", "Pride and Prejudice"),  # the folder's name
    ],
)
def test_book_titles(variant: str, title: str, tmp_path: Path) -> None:
    assert read_book(BUILDERS[variant](tmp_path)).title == title


@pytest.mark.parametrize("variant", ["txt", "md", "epub-nav", "folder"])
def test_paragraphs_are_separated_by_exactly_one_blank_line(variant: str, tmp_path: Path) -> None:
    book = read_book(BUILDERS[variant](tmp_path))
    for chapter, (_, body) in zip(book.chapters, corpus_chapters(), strict=True):
        assert chapter.text.count("\n\n") == len(body) - 1
        assert "\n\n\n" not in chapter.text
        assert chapter.text == chapter.text.strip()
        assert all(line == line.strip() and line for p in chapter.text.split("\n\n") for line in p.split("\n"))


def test_text_keeps_the_books_own_characters() -> None:
    first = read_book(CORPUS).chapters[0].text
    assert first.startswith("It is a truth universally acknowledged, that a single man in possession\nof a good")
    assert "“You want to tell me, and I have no objection to hearing it.”" in first  # was “_You_ want


def test_the_epub_skips_its_cover_title_page_and_navigation(tmp_path: Path) -> None:
    book = read_book(write_epub(tmp_path / "pride.epub"))
    assert [c.title for c in book.chapters] == TITLES
    assert not any("CHAPTER I" in c.text or c.text.startswith("1") for c in book.chapters)  # headings, page numbers


def test_an_epub_chapter_split_over_several_files_stays_one_chapter(tmp_path: Path) -> None:
    split = {
        "OEBPS/content.opf": opf_with(["one.xhtml", "one-b.xhtml", "two.xhtml"]),
        "OEBPS/nav.xhtml": xhtml(
            "Contents",
            '<nav epub:type="toc"><ol><li><a href="one.xhtml">The Start</a></li>'
            '<li><a href="two.xhtml">The End</a></li></ol></nav>',
        ),
        "OEBPS/one.xhtml": xhtml("1", "<p>The first half of a long chapter, split by a converter.</p>"),
        "OEBPS/one-b.xhtml": xhtml("1b", "<div><p>Its second half.<br/>With a line break.</p></div>"),
        "OEBPS/two.xhtml": xhtml("2", "<h2>Two</h2><p>The closing chapter &amp; its&#160;last&nbsp;words.</p>"),
    }
    book = read_book(write_zip(tmp_path / "split.epub", split, container="OEBPS/content.opf"))
    assert [(c.title, c.text) for c in book.chapters] == [
        (
            "The Start",
            "The first half of a long chapter, split by a converter.\n\nIts second half.\nWith a line break.",
        ),
        ("The End", "The closing chapter & its last words."),
    ]


def opf_with(hrefs: list[str], nav: bool = True) -> str:
    items = "".join(f'<item id="d{n}" href="{h}" media-type="application/xhtml+xml"/>' for n, h in enumerate(hrefs))
    if nav:
        items += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    refs = "".join(f'<itemref idref="d{n}"/>' for n in range(len(hrefs)))
    return (
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<dc:title>Split</dc:title></metadata><manifest>{items}</manifest><spine>{refs}</spine></package>"
    )


# --- Plain text and Markdown details ----------------------------------------------------------------


def test_plain_text_chapter_marks() -> None:
    book = read_book(DATA / "marks.txt")
    assert [(c.title, c.text) for c in book.chapters] == [
        ("PROLOGUE", "It was a quiet night on the coast, and the lamp burned low."),
        (
            "BOOK I. CHAPTER I. The Tower",
            "Mara climbed the stairs before dawn. She counted each step aloud,\none hundred and twelve of them.\n\n"
            "Chapter 3 was the one she liked best, she said later.",
        ),
        (
            "Chapter the Second",
            "The storm came in from the west. Nobody in the village slept.\n\n"
            "Nobody, that is,\nexcept the keeper's cat.",
        ),
        ("PART TWO. Chapter III: Morning", "By morning the sea had calmed. The boats went out again."),
        ("Epilogue", "Years later, the lamp still burned on the point."),
    ]


def test_text_without_chapter_marks_is_one_chapter_named_after_the_book(tmp_path: Path) -> None:
    path = tmp_path / "a_short_story.txt"
    path.write_text("Once there was a lamp.\n\nIt burned all night.\n", encoding="utf-8")
    book = read_book(path)
    assert book.title == "a short story"
    assert [(c.index, c.title, c.text) for c in book.chapters] == [
        (1, "a short story", "Once there was a lamp.\n\nIt burned all night.")
    ]


def test_markdown_markup_is_dropped() -> None:
    book = read_book(DATA / "markup.md")
    assert book.title == "Markup Sampler"
    assert [(c.title, c.text) for c in book.chapters] == [
        ("Markup Sampler", "An opening note with emphasis, strong words, underscored and double marks."),
        (
            "The First Chapter",
            "Mara read the harbour notice twice, then lamp.light() it.\n"
            "She kept a snake_case_name as it was, and a literal *star*.\n\n"
            "Bread\nSalt\nOil\n\n"
            "1. Walk to the tower.\n2. Light the lamp.\n\n"
            "The sea gives and the sea takes.\n\n"
            "A Small Section\n\n"
            "Text with small caps & an entity.",
        ),
        ("The Second Chapter", "Last words of the sampler."),
    ]


@pytest.mark.parametrize("end", ["", "\n"])
def test_markdown_keeps_its_last_paragraph_with_or_without_a_last_newline(end: str) -> None:
    book = read_book_file(f"# A Book\n\n## One\n\nFirst words.\n\n## Two\n\nLast words.{end}".encode(), "a.md")
    assert [(c.title, c.text) for c in book.chapters] == [("One", "First words."), ("Two", "Last words.")]


def test_markdown_with_several_top_headings_has_a_chapter_for_each(tmp_path: Path) -> None:
    path = tmp_path / "tales.md"
    path.write_text("# Part One\n\n## The Fox\n\nA fox ran off.\n\n# The Crow\n\nA crow sang once.\n", encoding="utf-8")
    book = read_book(path)
    assert book.title == "tales"
    assert [(c.title, c.text) for c in book.chapters] == [
        ("Part One. The Fox", "A fox ran off."),
        ("The Crow", "A crow sang once."),
    ]


def test_folder_chapters_are_titled_by_heading_or_file_name(tmp_path: Path) -> None:
    folder = tmp_path / "stories"
    folder.mkdir()
    (folder / "02_the_crow.md").write_text("A crow sang once.\n", encoding="utf-8")
    (folder / "01-the-fox.txt").write_text("Chapter 1\n\nA fox ran off.\n", encoding="utf-8")
    (folder / "11 the end.txt").write_text("They all went home.\n", encoding="utf-8")
    book = read_book(folder)
    assert [(c.index, c.title, c.text) for c in book.chapters] == [
        (1, "Chapter 1", "A fox ran off."),
        (2, "02 the crow", "A crow sang once."),
        (3, "11 the end", "They all went home."),
    ]


def test_folder_files_with_nothing_to_say_are_named_in_what_is_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "stories"
    folder.mkdir()
    (folder / "01-fox.txt").write_text("A fox ran off into the woods.\n", encoding="utf-8")
    (folder / "02-empty.txt").write_text("", encoding="utf-8")
    (folder / "03-dots.md").write_text("...\n\n* * *\n\n!?\n", encoding="utf-8")
    (folder / "04-title.txt").write_text("The Second Part\n", encoding="utf-8")
    (folder / "05-crow.md").write_text("# The Crow\n\nA crow sang once, and then flew away.\n", encoding="utf-8")
    book = read_book(folder)
    assert [(c.index, c.title, c.text, c.source) for c in book.chapters] == [
        (1, "01 fox", "A fox ran off into the woods.", "01-fox.txt"),
        (2, "04 title", "The Second Part", "04-title.txt"),  # chosen by someone: kept without a sentence
        (3, "The Crow", "A crow sang once, and then flew away.", "05-crow.md"),
    ]
    assert book.chapters[2].label == '05-crow.md (chapter 3, "The Crow")'
    assert book.left_out == [
        "02-empty.txt: nothing to speak (empty, or only punctuation or symbols)",
        "03-dots.md: nothing to speak (empty, or only punctuation or symbols)",
    ]


def test_parts_of_a_single_file_book_left_out_are_named_by_title(tmp_path: Path) -> None:
    path = tmp_path / "book.md"
    path.write_text("# Book\n\n## Contents\n\nOne, Two\n\n## One\n\nA quiet day came and went.\n", encoding="utf-8")
    book = read_book(path)
    assert [(c.title, c.source, c.label) for c in book.chapters] == [("One", None, 'chapter 1, "One"')]
    assert book.left_out == ['"Contents": no sentence in it (a cover, a title page or a table of contents?)']


@pytest.mark.parametrize(
    ("encoded", "name"),
    [
        (codecs.BOM_UTF8 + "Café au lait.".encode(), "utf-8 with a BOM"),
        (codecs.BOM_UTF16_LE + "Café au lait.".encode("utf-16-le"), "utf-16 with a BOM"),
        ("Café au lait.".encode(), "utf-8"),
    ],
)
def test_unicode_encodings_that_say_so_are_read(encoded: bytes, name: str, tmp_path: Path) -> None:
    path = tmp_path / "cafe.txt"
    path.write_bytes(encoded)
    assert read_book(path).chapters[0].text == "Café au lait.", name


# --- Errors ---------------------------------------------------------------------------------------


def refused(path: Path) -> str:
    with pytest.raises(InvalidBook) as caught:
        read_book(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


def test_a_missing_file(tmp_path: Path) -> None:
    assert refused(tmp_path / "nowhere.epub") == "no such file or folder"


def test_an_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.txt"
    path.write_text("Locked away.", encoding="utf-8")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)  # root reads a chmod 000 file, so refuse it here
    assert refused(path) == "cannot read it (Permission denied)"


@pytest.mark.parametrize(("name", "kind"), [("book.pdf", "'.pdf'"), ("README", "a file with no extension")])
def test_an_unsupported_file_type(name: str, kind: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text("Some text.", encoding="utf-8")
    assert refused(path) == f"cannot read {kind}; a book is a .txt, .md or .epub file, or a folder of .txt/.md"


def test_text_that_is_not_utf8() -> None:
    assert refused(DATA / "latin-1.txt") == "not UTF-8 text (byte 3 is 0xe9); save it as UTF-8"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.txt", ""),
        ("blank.txt", "\n\n   \n\t\n"),
        ("ornaments.txt", "* * *\n\n---\n\n~~~\n"),
        ("only-headings.txt", "Chapter 1\n\nChapter 2\n"),
        ("only-markup.md", "![cover](cover.png)\n\n```\nprint('code')\n```\n\n<div>html</div>\n\n---\n"),
    ],
)
def test_a_book_with_nothing_to_speak(name: str, content: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert refused(path) == "the book has no text to speak"


def test_an_epub_with_only_a_cover_has_nothing_to_speak(tmp_path: Path) -> None:
    files = {
        "OEBPS/content.opf": opf_with(["cover.xhtml"], nav=False),
        "OEBPS/cover.xhtml": xhtml("Cover", '<img src="images/cover.png" alt="The cover"/>'),
    }
    assert refused(write_zip(tmp_path / "cover.epub", files, "OEBPS/content.opf")) == "the book has no text to speak"


def test_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "cover.png").write_bytes(b"\x89PNG")
    assert refused(tmp_path) == "the folder has no .txt or .md files"


def test_a_bad_file_in_a_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "1.txt").write_text("Fine text.", encoding="utf-8")
    (tmp_path / "2.txt").write_bytes(b"caf\xe9")
    with pytest.raises(InvalidBook, match=re.escape(f"{tmp_path / '2.txt'}: not UTF-8 text (byte 3 is 0xe9)")):
        read_book(tmp_path)


GOOD_OPF = opf_with(["one.xhtml"], nav=False)
GOOD_DOC = xhtml("One", "<p>A single sentence to speak.</p>")
OPF_PATH = "OEBPS/content.opf"
NO_ROOTFILE = CONTAINER.replace("<rootfile ", "<!-- ").replace("/></rootfiles>", "--></rootfiles>")


@pytest.mark.parametrize(
    ("files", "container", "problem"),
    [
        ({OPF_PATH: GOOD_OPF}, None, "broken EPUB: no META-INF/container.xml"),
        ({}, CONTAINER, f"broken EPUB: the package document {OPF_PATH} is missing from the archive"),
        ({}, NO_ROOTFILE, "broken EPUB: META-INF/container.xml names no package document (OPF)"),
        (
            {OPF_PATH: "<package><manifest>"},
            CONTAINER,
            f"broken EPUB: {OPF_PATH} is not well-formed XML (no element found: line 1, column 19)",
        ),
        ({OPF_PATH: re.sub("<spine>.*</spine>", "", GOOD_OPF)}, CONTAINER, f"broken EPUB: {OPF_PATH} has no spine"),
        (
            {OPF_PATH: GOOD_OPF.replace('idref="d0"', 'idref="chapter-9"')},
            CONTAINER,
            f"broken EPUB: {OPF_PATH}'s spine names 'chapter-9', not in its manifest",
        ),
        ({OPF_PATH: GOOD_OPF}, CONTAINER, "broken EPUB: OEBPS/one.xhtml is missing from the archive"),
    ],
)
def test_a_broken_epub(files: dict[str, str], container: str | None, problem: str, tmp_path: Path) -> None:
    path = tmp_path / "broken.epub"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        if container is not None:
            archive.writestr("META-INF/container.xml", container.format(OPF_PATH))
        for name, text in files.items():
            archive.writestr(name, text)
    assert refused(path) == problem


def test_an_epub_document_that_is_not_utf8(tmp_path: Path) -> None:
    document = GOOD_DOC.replace("A single", "A caf\xe9").encode("latin-1")
    path = tmp_path / "latin.epub"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/container.xml", CONTAINER.format(OPF_PATH))
        archive.writestr(OPF_PATH, GOOD_OPF)
        archive.writestr("OEBPS/one.xhtml", document)
    offset = document.index(b"\xe9")
    assert refused(path) == f"OEBPS/one.xhtml is not UTF-8 text (byte {offset})"


def test_an_epub_that_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "fake.epub"
    path.write_text("<html>not a zip</html>", encoding="utf-8")
    assert refused(path) == "broken EPUB: not a zip archive"


def test_an_epub_unpacking_past_its_allowance_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_epub(tmp_path / "pride.epub")
    with zipfile.ZipFile(path) as archive:
        first = ("META-INF/container.xml", "OEBPS/content.opf", "OEBPS/nav.xhtml", "OEBPS/cover.xhtml")
        allowed = sum(archive.getinfo(name).file_size for name in first) + 10
    monkeypatch.setattr(epub, "MAX_EPUB_UNPACKED_BYTES", allowed)  # what is read before the title page fits
    problem = f"its documents unpack to more than {allowed} bytes (at OEBPS/title.xhtml, of "
    assert refused(path).startswith(problem)


def test_an_epub_with_xml_entity_expansion_is_refused(tmp_path: Path) -> None:
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
        '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="&lol2;" media-type="application/oebps-package+xml"/></rootfiles></container>'
    )
    path = tmp_path / "bomb.epub"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/container.xml", bomb)
    assert refused(path).startswith("META-INF/container.xml declares XML entities or external references, refused")


# --- safe_name ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "title", "name"),
    [
        (1, "Chapter 1", "01-chapter-1"),
        (3, "CHAPTER III. Down the Rabbit-Hole", "03-chapter-iii-down-the-rabbit-hole"),
        (12, "\u00c9lodie\u2019s Caf\u00e9 \u2014 Part Two", "12-elodies-cafe-part-two"),
        (5, "Straße & Smørrebrød", "05-strasse-smorrebrod"),
        (7, "第一章", "07-chapter"),
        (7, "", "07-chapter"),
        (8, "  ***  ", "08-chapter"),
        (123, "x", "123-x"),
        (0, "Preface", "00-preface"),
    ],
)
def test_safe_name(index: int, title: str, name: str) -> None:
    assert safe_name(index, title) == name


def test_a_long_title_is_cut_at_a_word() -> None:
    name = safe_name(4, "In Which the Lamp Keeper Climbs One Hundred and Twelve Steps Before Dawn Again")
    assert len(name) <= MAX_NAME_CHARS
    assert name == "04-in-which-the-lamp-keeper-climbs-one-hundred-and-twelve"
    assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", name)


def test_a_long_word_is_cut_anyway() -> None:
    name = safe_name(1, "A" * 100)
    assert name == "01-" + "a" * (MAX_NAME_CHARS - 3)


def test_a_negative_index_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        safe_name(-1, "Chapter")
