"""``/v1/books/chapters``: a book file (``.txt``, ``.md``, ``.epub``) read into the chapters ``ttsq
narrate`` would narrate, by the same readers (``tts_core.books``), each with the text its batch item
carries, its file name and its estimated audio, so that a page submits the book as one batch exactly
as the command would. It creates nothing.

The body is the file itself. Its kind is the ``Content-Type``'s (``text/plain``, ``text/markdown``,
``application/epub+zip``); with ``application/octet-stream`` it is ``?filename=``'s extension. A
``filename`` whose extension names another kind than the ``Content-Type`` is refused (415), not
guessed at; otherwise it only names the book (where nothing inside does) and the refusals.
"""

from __future__ import annotations

import functools
from pathlib import PurePosixPath
from typing import Annotated, Final

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from api.body_limit import declared_length
from api.deps import StateDep, TenantDep
from api.errors import ApiError
from api.heavy_work import Drafting
from api.pacing import wait_for_turn
from api.schemas import error_responses
from api.state import AppState
from tts_core.base.config import DEFAULT_SPEED, SPEED_RANGE
from tts_core.books.common import Book
from tts_core.books.reading import READERS, book_suffix, read_book
from tts_core.text.file_names import safe_name
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.estimate import estimate_text
from ttsq.job_record import JobOptions
from ttsq.settings import Settings

router = APIRouter(prefix="/v1/books", tags=["books"])

KINDS: Final = {"text/plain": ".txt", "text/markdown": ".md", "application/epub+zip": ".epub"}
"""Content types that say a book's kind, and the extension that chooses its reader."""

ANY_FILE: Final = "application/octet-stream"
"""A file whose kind the client does not know: ``filename``'s extension says it."""

UNNAMED: Final = "book"
"""The file's name when the request gives none (a plain text without a heading is titled so)."""

MAX_FILENAME_CHARS: Final = 255
"""Longest ``filename``: the longest file name most file systems allow."""

_ERRORS = error_responses(401, 413, 415, 422, 429, 503)

_FILE: Final = {"schema": {"type": "string", "format": "binary"}}
"""Any bytes: text is a file's too, read as UTF-8 (or UTF-16 with its BOM) or refused with where it is not."""
_BODY: Final = {
    "requestBody": {
        "required": True,
        "description": "The book file itself: plain text or Markdown (UTF-8, or UTF-16 with its BOM), or an EPUB.",
        "content": {media_type: _FILE for media_type in [*KINDS, ANY_FILE]},
    }
}
"""The body as the OpenAPI document shows it (the route reads it raw: it is a file, not JSON)."""


class ChapterPublic(BaseModel):
    """One chapter, as ``ttsq narrate`` submits it: one batch item."""

    index: int = Field(description="From 1, in reading order; `ttsq narrate` sends it as the item's `metadata.index`.")
    title: str = Field(description="The chapter's title; `ttsq narrate` sends it as the item's `metadata.title`.")
    characters: int = Field(description="Characters of `text`, as a job counts them.")
    estimated_s: float = Field(
        description="Seconds of audio (speech and pauses) a job of `text` would make with the voice at the speed: "
        "the estimate a job reserves of its tenant's day."
    )
    file_stem: str = Field(
        description="`NN-title`: the chapter's file name without its extension, as `ttsq narrate` saves it."
    )
    text: str = Field(description="What the chapter's batch item carries as its `text`, exactly.")


class BookChaptersPublic(BaseModel):
    """A book read into chapters; nothing was created."""

    title: str = Field(description="From the book's metadata or heading, else from its file name.")
    voice: str = Field(description="The voice the estimates are for.")
    characters: int
    estimated_s: float = Field(description="All chapters together.")
    left_out: list[str] = Field(
        description="Parts read but not chapters (a cover, a title page, a table of contents), one line each, with why."
    )
    chapters: list[ChapterPublic]


@router.post(
    "/chapters",
    response_model=BookChaptersPublic,
    responses=_ERRORS,
    summary="Read a book file into the chapters `ttsq narrate` would narrate",
    openapi_extra=_BODY,
)
async def book_chapters(
    request: Request,
    state: StateDep,
    tenant: TenantDep,
    content_type: Annotated[str | None, Header()] = None,
    filename: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_FILENAME_CHARS,
            description="The file's name. Names the book where nothing inside does; with "
            "`application/octet-stream` its extension (.txt, .md, .markdown, .epub) says the kind.",
        ),
    ] = None,
    voice: Annotated[
        str | None,
        Query(
            max_length=200,
            description="Voice id from GET /v1/voices, for the estimates; the server default if omitted.",
            examples=[DEFAULT_VOICE_ID],
        ),
    ] = None,
    speed: Annotated[
        float, Query(ge=SPEED_RANGE[0], le=SPEED_RANGE[1], description="Speaking rate, for the estimates.")
    ] = DEFAULT_SPEED,
) -> BookChaptersPublic:
    """The chapters, titles and texts are those ``ttsq narrate`` reads from the same file; submit each
    chapter as a batch item (``{"text": text, "metadata": {"title": title, "index": index}}``) to
    narrate the book as it would. Refused: a file over ``TTSQ_BOOK_MAX_BYTES`` (413 book_too_large),
    a kind not named (415), and a book that cannot be read (422 invalid_book: not UTF-8, a broken
    EPUB, nothing to speak), each naming the problem."""
    name = book_name(content_type, filename)
    limit = state.settings.book_max_bytes
    declared = declared_length(request.scope)
    if declared is not None and declared > limit:
        raise too_big(declared, limit)
    data = await request.body()
    if len(data) > limit:
        raise too_big(len(data), limit)
    await wait_for_turn(state, tenant, len(data))
    return await run_in_threadpool(_read, state, tenant.id, data, name, voice, speed)


def book_name(content_type: str | None, filename: str | None) -> str:
    """The name the book is read under: its extension chooses the reader (the one rule above)."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type == ANY_FILE:
        if filename is None:
            raise ApiError(
                415, "unsupported_media_type", f"{ANY_FILE} needs ?filename= with a .txt, .md or .epub extension"
            )
        return filename
    suffix = KINDS.get(media_type)
    if suffix is None:
        raise ApiError(415, "unsupported_media_type", f"Content-Type must be {', '.join(KINDS)} or {ANY_FILE}")
    if filename is None:
        return UNNAMED + suffix
    named = book_suffix(filename)
    if named not in READERS:  # "My Book", "notes.text": a name only
        return filename + suffix
    if READERS[named] is not READERS[suffix]:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {media_type} says a {suffix} file, filename {PurePosixPath(filename).name!r} a {named} "
            f"one; send {ANY_FILE} to let the filename say it",
        )
    return filename


def too_big(size: int, limit: int) -> ApiError:
    return ApiError(413, "book_too_large", f"the book is {size} bytes; at most {limit} (TTSQ_BOOK_MAX_BYTES)")


def _read(state: AppState, tenant: str, data: bytes, name: str, voice: str | None, speed: float) -> BookChaptersPublic:
    """Read in the API's helper processes if the file is big (``api.heavy_work``)."""
    heavy = len(data) >= state.settings.heavy_request_chars
    work = functools.partial(_chapters, data=data, name=name, voice=voice, speed=speed)
    return state.heavy.run(tenant, heavy, work)


def _chapters(drafting: Drafting, *, data: bytes, name: str, voice: str | None, speed: float) -> BookChaptersPublic:
    voice_id = voice or drafting.settings.default_voice
    drafting.catalog.get(voice_id)  # an unknown voice: 422 voice_not_found, as a job's
    return public_book(read_book(data, name), voice_id, speed, drafting.settings)


def public_book(book: Book, voice: str, speed: float, settings: Settings) -> BookChaptersPublic:
    """The book as answered: each chapter with its text as is, and the audio a job of it would reserve."""
    options = JobOptions(speed=speed)
    chapters = [
        ChapterPublic(
            index=chapter.index,
            title=chapter.title,
            characters=len(chapter.text),
            estimated_s=estimate_text(chapter.text, None, options, settings).audio_ms / 1000,
            file_stem=safe_name(chapter.index, chapter.title),
            text=chapter.text,
        )
        for chapter in book.chapters
    ]
    return BookChaptersPublic(
        title=book.title,
        voice=voice,
        characters=sum(c.characters for c in chapters),
        estimated_s=round(sum(c.estimated_s for c in chapters), 3),
        left_out=book.left_out,
        chapters=chapters,
    )
