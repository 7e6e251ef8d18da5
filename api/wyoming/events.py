"""Reading Wyoming events with every size and wait bounded, and checking the fields of the events
ttsq takes.

The wyoming library's ``async_read_event`` reads whatever ``data_length`` and ``payload_length`` a
header declares (300 MiB declared and sent grew the server by 301 MiB; 2 GB declared and never sent
held the connection for good), so ttsq reads events itself: a header line of at most
``MAX_HEADER_BYTES``, data of at most the request body cap (``max_request_bytes``: a ``synthesize``
carries at most ``max_text_chars`` of text, as a ``POST /v1/jobs`` does), a payload of at most
``MAX_PAYLOAD_BYTES``, and the whole event within ``EVENT_READ_S`` of its first byte. A header over a
limit is refused before anything it declares is read, with an :class:`EventRefused` that closes the
connection: what follows it cannot be told from the next event.

The fields of an event ttsq takes are checked before it is acted on (:func:`check_fields`): each
string a string, names no longer than a name can be, no lone surrogate anywhere (it could not be
stored or written back), so that bad input is an ``invalid_event`` error naming the field, never an
internal error.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, StrictStr, StringConstraints, ValidationError
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from api.json_checks import check_body

MAX_HEADER_BYTES: Final = 64 * 1024
"""Longest header line (the JSON object with the type and the lengths of what follows): tens of bytes
from today's clients, which send the data after it; older ones put the data in it. Also asyncio's
default stream limit, which a longer line would pass."""

MAX_PAYLOAD_BYTES: Final = 64 * 1024
"""Largest binary payload: no event ttsq takes has one (audio goes the other way); one audio chunk a
client sends by mistake is read and dropped, as other events ttsq does not take are."""

EVENT_READ_S: Final = 30.0
"""Longest time from an event's first byte to its last (12 MB of data, the default cap, at 3.2 Mbit/s):
a client that declares more than it sends is closed then. Module-level so tests can shorten it."""

MAX_NAME_CHARS: Final = 200
"""Longest voice name, language or speaker a request may give (as ``speaker`` in ``POST /v1/jobs``)."""

INVALID_EVENT: Final = "invalid_event"
"""Code of an event whose fields are wrong, or of input that is no event at all."""

EVENT_TOO_LARGE: Final = "event_too_large"
"""Code of an event over one of the limits above."""


class EventRefused(Exception):
    """An event ttsq will not read or take, answered with an ``error`` event of ``code``; after a
    ``fatal`` one the connection is closed, since the rest of the input cannot be read on."""

    def __init__(self, code: str, message: str, *, fatal: bool) -> None:
        super().__init__(message)
        self.code = code
        self.fatal = fatal


async def read_event(reader: asyncio.StreamReader, max_data_bytes: int, idle_s: float | None) -> Event | None:
    """The next event; None at the end of the input. Waits up to ``idle_s`` (forever if None) for
    its first byte, raising ``TimeoutError``, then ``EVENT_READ_S`` for the rest."""
    try:
        first = await asyncio.wait_for(reader.readexactly(1), idle_s)
    except asyncio.IncompleteReadError:
        return None
    try:
        async with asyncio.timeout(EVENT_READ_S):
            return await _rest_of_event(reader, first, max_data_bytes)
    except TimeoutError:
        message = f"an event was not sent whole within {EVENT_READ_S:g} s of its first byte; closing"
        raise EventRefused("event_timeout", message, fatal=True) from None
    except asyncio.IncompleteReadError:  # the client went away inside an event
        return None


async def _rest_of_event(reader: asyncio.StreamReader, first: bytes, max_data_bytes: int) -> Event:
    line = first if first == b"\n" else first + await _rest_of_line(reader)
    if len(line) > MAX_HEADER_BYTES:
        raise _too_large("the header line", len(line), MAX_HEADER_BYTES)
    header = _json_object(line, "header")
    data_length = _length(header, "data_length", max_data_bytes)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    event_type, data = header.get("type"), header.get("data") or {}
    if not isinstance(event_type, str) or not isinstance(data, dict):
        raise EventRefused(INVALID_EVENT, "an event's header needs a string 'type' and an object 'data'", fatal=True)
    if data_length:
        data.update(_json_object(await reader.readexactly(data_length), "data"))
    payload = await reader.readexactly(payload_length) if payload_length else None
    return Event(type=event_type, data=data, payload=payload)


async def _rest_of_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:  # past the stream's limit: longer than MAX_HEADER_BYTES too
        raise _too_large("the header line", None, MAX_HEADER_BYTES) from None


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        raise EventRefused(INVALID_EVENT, f"the event's {what} is not JSON; closing", fatal=True) from None
    if not isinstance(value, dict):
        raise EventRefused(INVALID_EVENT, f"the event's {what} is not a JSON object; closing", fatal=True)
    return value


def _length(header: dict[str, Any], name: str, limit: int) -> int:
    value = header.get(name) or 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise EventRefused(INVALID_EVENT, f"{name} must be a byte count, not {value!r:.40}; closing", fatal=True)
    if value > limit:
        raise _too_large(name, value, limit)
    return value


def _too_large(what: str, size: int | None, limit: int) -> EventRefused:
    found = f"{what} of {size} bytes" if size is not None else what
    return EventRefused(EVENT_TOO_LARGE, f"{found} is over the limit of {limit} bytes; closing", fatal=True)


Name = Annotated[StrictStr, StringConstraints(max_length=MAX_NAME_CHARS)]


class _Fields(BaseModel):
    """An event's data as ttsq reads it: fields it does not know are let through, as Wyoming does."""

    model_config = ConfigDict(extra="allow")


class _Voice(_Fields):
    name: Name | None = None
    language: Name | None = None
    speaker: Name | None = None


class _Format(_Fields):
    voice: _Voice | None = None
    text_format: Name | None = None
    context: dict[str, Any] | None = None


class _Synthesize(_Format):
    text: StrictStr


class _Chunk(_Fields):
    text: StrictStr


FIELDS: Final[dict[str, type[_Fields]]] = {
    Describe().event().type: _Fields,
    Synthesize(text="").event().type: _Synthesize,
    SynthesizeStart().event().type: _Format,
    SynthesizeChunk(text="").event().type: _Chunk,
    SynthesizeStop().event().type: _Fields,
}
"""The events ttsq takes, and what their data must be."""


def check_fields(event: Event) -> None:
    """Refuse an event ttsq takes whose data is not what it should be, naming the field; other events
    are dropped unread, so they are not checked."""
    model = FIELDS.get(event.type)
    if model is None:
        return
    try:
        check_body(event.data)
        model.model_validate(event.data)
    except ValidationError as e:
        raise EventRefused(INVALID_EVENT, f"{event.type}: {validation_message(e)}", fatal=False) from None
    except ValueError as e:  # check_body's refusals (a lone surrogate, NaN, too deep)
        raise EventRefused(INVALID_EVENT, f"{event.type}: {e}", fatal=False) from None


def validation_message(error: ValidationError) -> str:
    """The first problem pydantic found, with where it is (``voice.speaker: String should have…``)."""
    first = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "data"
    return f"{where}: {first['msg']}"
