"""``POST /v1/books/chapters`` through a real API (keys required): a book file read into the chapters
``ttsq narrate`` reads from the same file, with the exact batch items it would submit, and every bad
upload refused with what is wrong. Nothing runs a job, so no worker is needed."""

from __future__ import annotations

import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import redis

from api.main import create_app
from narration.books import read_book
from narration.planning import NarrateOptions, batch_body, plan
from tests.conftest import serve
from tests.test_books import (
    CONTAINER,
    CORPUS,
    DATA,
    TITLES,
    opf_with,
    write_epub,
    write_markdown,
    write_zip,
    xhtml,
)
from tts_core.books.epub import MAX_EPUB_UNPACKED_BYTES
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore

BOOK_MAX_BYTES: Final = 100_000
"""This server's own limit: the corpus (about 25 kB) fits, and a bigger file is cheap to send."""
EPUB: Final = "application/epub+zip"
OPTIONS: Final = NarrateOptions(voice=None, format="mp3", speed=None)


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[tuple[str, str]]:
    """The API's URL and a live key of a tenant of its own."""
    limits = {"auth_required": True, "book_max_bytes": BOOK_MAX_BYTES, "heavy_request_processes": 1}
    changed = settings.model_copy(update=limits)
    client = redis.Redis.from_url(settings.redis_url)
    key, _ = TenantStore(client).create(f"books-{uuid.uuid4().hex[:6]}", Limits())
    with serve(create_app(changed)) as url:
        yield url, key
    client.close()


@pytest.fixture
def books(api: tuple[str, str]) -> Iterator[httpx.Client]:
    url, key = api
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        yield client


def chapters(client: httpx.Client, data: bytes, content_type: str, **params: Any) -> httpx.Response:
    return client.post("/v1/books/chapters", content=data, headers={"Content-Type": content_type}, params=params)


def refusal(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == code
    return error["message"]


def as_narrate_submits(path: Path) -> list[dict[str, Any]]:
    """The batch items ``ttsq narrate`` submits for this file, with each chapter's file name stem."""
    planned = plan(read_book(path), OPTIONS)
    items = batch_body(planned, OPTIONS)["items"]
    return [
        {"text": item["text"], "metadata": item["metadata"], "file_stem": Path(p.file).stem}
        for item, p in zip(items, planned, strict=True)
    ]


def as_the_api_tells(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The items a page builds from the answer, as the endpoint's description says."""
    return [
        {"text": c["text"], "metadata": {"title": c["title"], "index": c["index"]}, "file_stem": c["file_stem"]}
        for c in answer["chapters"]
    ]


# --- The same chapters as ttsq narrate ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content_type", "write"),
    [
        ("pride.epub", EPUB, lambda tmp: write_epub(tmp / "pride.epub")),
        ("pride.md", "text/markdown", lambda tmp: write_markdown(tmp / "pride.md")),
        ("pride_and_prejudice.txt", "text/plain; charset=utf-8", lambda tmp: CORPUS),
    ],
)
def test_a_book_gives_the_chapters_and_batch_items_of_ttsq_narrate(
    books: httpx.Client, name: str, content_type: str, write: Any, tmp_path: Path
) -> None:
    path = write(tmp_path)
    response = chapters(books, path.read_bytes(), content_type, filename=name)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert as_the_api_tells(answer) == as_narrate_submits(path)
    assert [c["title"] for c in answer["chapters"]] == TITLES
    assert answer["title"] == read_book(path).title
    assert answer["voice"] == "en_US-joe-medium"
    for chapter in answer["chapters"]:
        assert chapter["characters"] == len(chapter["text"])
        assert 0.05 < chapter["estimated_s"] / chapter["characters"] < 0.1  # English prose, pauses included
    assert answer["characters"] == sum(c["characters"] for c in answer["chapters"])
    assert answer["estimated_s"] == pytest.approx(sum(c["estimated_s"] for c in answer["chapters"]))


def test_an_epub_says_what_it_left_out(books: httpx.Client, tmp_path: Path) -> None:
    path = write_epub(tmp_path / "pride.epub")
    answer = chapters(books, path.read_bytes(), EPUB).json()
    assert answer["title"] == "Pride and Prejudice"
    assert answer["left_out"] == read_book(path).left_out
    assert answer["left_out"] == [
        '"Pride and Prejudice": nothing to speak (empty, or only punctuation or symbols)',  # the cover
        '"Pride and Prejudice": no sentence in it (a cover, a title page or a table of contents?)',
    ]


def test_the_estimates_follow_the_speed_and_need_a_known_voice(books: httpx.Client) -> None:
    text = CORPUS.read_bytes()
    normal = chapters(books, text, "text/plain").json()
    fast = chapters(books, text, "text/plain", speed=2.0, voice="en_US-joe-medium").json()
    for quick, slow in zip(fast["chapters"], normal["chapters"], strict=True):
        assert {**quick, "estimated_s": 0} == {**slow, "estimated_s": 0}
        assert slow["estimated_s"] / 2 < quick["estimated_s"] < slow["estimated_s"]  # pauses stay
    message = refusal(chapters(books, text, "text/plain", voice="xx_XX-nobody"), 422, "voice_not_found")
    assert "xx_XX-nobody" in message
    refusal(chapters(books, text, "text/plain", speed=9), 422, "invalid_request")


def test_a_name_titles_an_untitled_text(books: httpx.Client) -> None:
    text = b"A short story with no heading at all. It ends here."
    assert chapters(books, text, "text/plain").json()["title"] == "book"
    named = chapters(books, text, "text/plain", filename="The Quiet Day").json()
    assert named["title"] == "The Quiet Day"
    assert named["chapters"][0]["file_stem"] == "01-the-quiet-day"


# --- The kind: the Content-Type, or the filename's extension with application/octet-stream --------


def test_octet_stream_goes_by_the_filename(books: httpx.Client, tmp_path: Path) -> None:
    epub = write_epub(tmp_path / "pride.epub").read_bytes()
    answer = chapters(books, epub, "application/octet-stream", filename="pride.EPUB").json()
    assert [c["title"] for c in answer["chapters"]] == TITLES
    message = refusal(chapters(books, epub, "application/octet-stream"), 415, "unsupported_media_type")
    assert message == "application/octet-stream needs ?filename= with a .txt, .md or .epub extension"
    message = refusal(chapters(books, epub, "application/octet-stream", filename="pride.pdf"), 422, "invalid_book")
    assert message == "pride.pdf: cannot read '.pdf'; a book is a .txt, .md or .epub file"


def test_a_kind_not_named_or_named_twice_differently_is_refused(books: httpx.Client) -> None:
    message = refusal(chapters(books, b"\x89PNG", "image/png"), 415, "unsupported_media_type")
    assert message == (
        "Content-Type must be text/plain, text/markdown, application/epub+zip or application/octet-stream"
    )
    message = refusal(chapters(books, b"Some text.", "text/plain", filename="a.epub"), 415, "unsupported_media_type")
    assert "text/plain says a .txt file, filename 'a.epub' a .epub one" in message
    assert chapters(books, b"# A\n\nSome text here.", "text/markdown", filename="a.markdown").status_code == 200


# --- Bad books ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "content_type", "problem"),
    [
        (b"<html>not a zip</html>", EPUB, "book.epub: broken EPUB: not a zip archive"),
        (b"* * *\n\n---\n", "text/plain", "book.txt: the book has no text to speak"),
        (b"", "text/markdown", "book.md: the book has no text to speak"),
        (
            (DATA / "latin-1.txt").read_bytes(),
            "text/plain",
            "book.txt: not UTF-8 text (byte 3 is 0xe9); save it as UTF-8",
        ),
    ],
)
def test_a_book_that_cannot_be_read_is_refused_with_why(
    books: httpx.Client, data: bytes, content_type: str, problem: str
) -> None:
    assert refusal(chapters(books, data, content_type), 422, "invalid_book") == problem


def test_an_epub_without_chapters_is_refused(books: httpx.Client, tmp_path: Path) -> None:
    files = {
        "OEBPS/content.opf": opf_with(["cover.xhtml"], nav=False),
        "OEBPS/cover.xhtml": xhtml("Cover", '<img src="images/cover.png" alt="The cover"/>'),
    }
    data = write_zip(tmp_path / "cover.epub", files, "OEBPS/content.opf").read_bytes()
    message = refusal(chapters(books, data, EPUB, filename="cover.epub"), 422, "invalid_book")
    assert message == "cover.epub: the book has no text to speak"


def test_an_epub_bomb_is_refused_unread(books: httpx.Client, tmp_path: Path) -> None:
    """A document of 64 MiB of spaces: its zip is 64 kB; the API unpacks none of it."""
    path = tmp_path / "bomb.epub"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("META-INF/container.xml", CONTAINER.format("content.opf"))
        archive.writestr("content.opf", opf_with(["one.xhtml"], nav=False))
        archive.writestr("one.xhtml", b" " * MAX_EPUB_UNPACKED_BYTES)
    data = path.read_bytes()
    assert len(data) < BOOK_MAX_BYTES
    message = refusal(chapters(books, data, EPUB), 422, "invalid_book")
    assert message == (
        f"book.epub: its documents unpack to more than {MAX_EPUB_UNPACKED_BYTES} bytes "
        f"(at one.xhtml, of {MAX_EPUB_UNPACKED_BYTES}); refused as a zip bomb would be"
    )


def test_a_long_book_is_read_in_the_helper_processes(books: httpx.Client, settings: Settings) -> None:
    """Past ``TTSQ_HEAVY_REQUEST_CHARS`` the reading runs in another process: the answer, and a
    refusal, come back from it the same."""
    text = CORPUS.read_bytes()
    long = text + b"\n\n" + text.replace(b"Chapter ", b"Chapter 1")
    assert len(long) >= settings.heavy_request_chars
    answer = chapters(books, long, "text/plain").json()
    assert [c["title"] for c in answer["chapters"]] == [*TITLES, "Chapter 11", "Chapter 12", "Chapter 13"]
    message = refusal(chapters(books, long + b"\xe9", "text/plain"), 422, "invalid_book")
    assert message == f"book.txt: not UTF-8 text (byte {len(long)} is 0xe9); save it as UTF-8"


def test_a_book_over_the_limit_is_413(books: httpx.Client) -> None:
    big = b"A sentence to speak. " * (BOOK_MAX_BYTES // 20)
    message = refusal(chapters(books, big, "text/plain"), 413, "book_too_large")
    assert message == f"the book is {len(big)} bytes; at most {BOOK_MAX_BYTES} (TTSQ_BOOK_MAX_BYTES)"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted once read
        yield big

    response = books.post("/v1/books/chapters", content=chunked(), headers={"Content-Type": "text/plain"})
    assert refusal(response, 413, "book_too_large") == message


def test_a_key_is_required_as_on_every_route(api: tuple[str, str]) -> None:
    response = httpx.post(
        f"{api[0]}/v1/books/chapters", content=b"Some text to read.", headers={"Content-Type": "text/plain"}
    )
    assert refusal(response, 401, "unauthorized").startswith("no API key given")
