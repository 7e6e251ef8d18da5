"""One Wyoming connection: its events read in order, its utterances spoken one after another by a
task of its own, so that the connection keeps being read (streamed text, a client gone) while audio
is being sent.

A ``synthesize`` is one job. A stream (``synthesize-start``, ``synthesize-chunk``…, ``synthesize-stop``)
is a job per run of sentences completed by a chunk, and the rest at the stop, then
``synthesize-stopped``; the ``synthesize`` Home Assistant sends inside a stream for older servers is
ignored. Bad input is answered with an ``error`` event and the connection goes on. When the
connection ends (closed, garbage read, a stream idle for ``STREAM_IDLE_S``) its unfinished jobs are
canceled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.server import AsyncEventHandler
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeTextFormat,
    SynthesizeVoice,
)

from api.deps import tenant_of
from api.errors import ApiError
from api.heavy_work import Drafting
from api.state import AppState
from api.wyoming.events import (
    EVENT_READ_S,
    INVALID_EVENT,
    EventRefused,
    check_fields,
    read_event,
    validation_message,
)
from api.wyoming.sentences import SentenceBuffer
from api.wyoming.speech import Utterance, speak
from api.wyoming.voices import chosen_voice, wyoming_info
from tts_core.base.errors import TTSError
from tts_core.text.sentences import has_speech, normalize_text
from ttsq.errors import INTERNAL_ERROR, ServiceError
from ttsq.lifecycle import cancel_job

log = logging.getLogger(__name__)

STREAM_IDLE_S: Final = 60.0
"""Longest wait for the next event while a stream is open: a client that never sends
``synthesize-stop`` is closed then, and its jobs canceled. Module-level so tests can shorten it."""

MAX_QUEUED_WORK: Final = 8
"""Answers and utterances one connection may have waiting to be sent: past them its input is not read
until the client reads what it was sent, so a client that sends without reading (200,000 describes)
holds this much, not an answer per event."""

REFUSALS: Final = (TTSError, ServiceError, ApiError)
"""What bad input or a failed job raises: answered with an ``error`` event carrying its code."""

Work = Utterance | Event
"""What the speaking task takes in turn: an utterance to speak, or an event to send after the
utterances before it (``synthesize-stopped``, an error about a later request)."""


@dataclass
class Stream:
    """An open ``synthesize-start``: the utterance every sentence is spoken as (None if the start was
    refused: its chunks are dropped), and the text not spoken yet."""

    template: Utterance | None
    buffer: SentenceBuffer


class WyomingHandler(AsyncEventHandler):
    """The events of one connection, answered through the queue."""

    def __init__(
        self,
        state: AppState,
        key: str | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_close: Callable[[], None] = lambda: None,
    ):
        super().__init__(reader, writer)
        self._on_close = on_close
        self._state = state
        self._key = key
        self._stream: Stream | None = None
        self._work: asyncio.Queue[Work] = asyncio.Queue(MAX_QUEUED_WORK)  # full: the connection is not read
        self._jobs: set[str] = set()
        self._speaker = asyncio.create_task(self._speak_all(), name="wyoming speaker")

    async def run(self) -> None:
        """The library's loop, read with ttsq's own bounded reader (:mod:`api.wyoming.events`), and
        with more ways to end: a stream idle too long, and input that cannot be read on (no JSON, over
        a limit, an event not sent whole in time), each answered with an error event first."""
        try:
            while True:
                timeout = STREAM_IDLE_S if self._stream is not None else None
                try:
                    event = await read_event(self.reader, self._state.settings.request_bytes_limit, timeout)
                except TimeoutError:
                    log.info("wyoming: stream idle for %.0f s; closing the connection", STREAM_IDLE_S)
                    message = f"no synthesize-stop within {STREAM_IDLE_S:g} s of the last event; closing"
                    await self._say_last(Error(text=message, code="stream_timeout").event())
                    break
                except EventRefused as e:  # the input cannot be read on
                    log.info("wyoming: unreadable input (%s); closing the connection", e.code)
                    await self._say_last(Error(text=str(e), code=e.code).event())
                    break
                except OSError:
                    break
                if event is None or not await self.handle_event(event):
                    break
        finally:
            try:
                await self.disconnect()
                self.writer.close()
            finally:
                self._on_close()

    async def _say_last(self, event: Event) -> None:
        """Send ``event`` before closing, past whatever is queued, giving up on a client that does not
        read; an event is written whole before any await, so it cannot split one being sent."""
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(self.write_event(event), EVENT_READ_S)

    async def handle_event(self, event: Event) -> bool:
        try:
            check_fields(event)
            await self._handle(event)
        except EventRefused as e:
            await self._refuse(e.code, str(e))
        except (KeyError, TypeError, ValueError) as e:  # an event without its fields
            await self._work.put(Error(text=f"malformed {event.type} event: {e!r}", code="invalid_event").event())
        return True

    async def _handle(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self._work.put(self._info())
        elif Synthesize.is_type(event.type):
            if self._stream is None:  # inside a stream it only repeats the streamed text
                await self._synthesize(Synthesize.from_event(event))
        elif SynthesizeStart.is_type(event.type):
            await self._start(SynthesizeStart.from_event(event))
        elif SynthesizeChunk.is_type(event.type):
            await self._chunk(SynthesizeChunk.from_event(event).text)
        elif SynthesizeStop.is_type(event.type):
            await self._stop()
        # other events are dropped, as Wyoming servers do

    def _info(self) -> Event:
        return wyoming_info(self._state.catalog).event()

    async def _synthesize(self, request: Synthesize) -> None:
        _check_text(request.text)
        template = await self._template(request.voice, request.text_format)
        if template is not None:
            await self._work.put(replace(template, text=request.text))

    async def _start(self, request: SynthesizeStart) -> None:
        if self._stream is not None:
            await self._refuse("stream_open", "synthesize-start while a stream is open; send synthesize-stop first")
            return
        template = await self._template(request.voice, request.text_format)
        self._stream = Stream(template, SentenceBuffer(self._state.settings.max_text_chars))

    async def _chunk(self, text: str) -> None:
        _check_text(text)
        stream = self._stream
        if stream is None:
            await self._refuse("no_stream", "synthesize-chunk without synthesize-start")
            return
        if stream.template is None:
            return
        heavy = len(text) >= self._state.settings.heavy_request_chars
        work = functools.partial(_completed_apart, buffer=stream.buffer, text=text, cut=not stream.template.ssml)
        try:  # SSML is spoken whole, at the stop
            stream.buffer, done = await run_in_threadpool(self._state.heavy.run, stream.template.tenant.id, heavy, work)
        except (TTSError, ServiceError) as e:
            stream.template = None
            await self._refuse(e.code, str(e))
            return
        if done is not None:
            await self._work.put(replace(stream.template, text=done))

    async def _stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            await self._refuse("no_stream", "synthesize-stop without synthesize-start")
            return
        rest = await run_in_threadpool(_finished, stream.buffer)
        if stream.template is not None and rest is not None:
            await self._work.put(replace(stream.template, text=rest))
        await self._work.put(SynthesizeStopped().event())

    async def _template(
        self, voice: SynthesizeVoice | None, text_format: str | SynthesizeTextFormat | None
    ) -> Utterance | None:
        """The tenant (this request counted) and the voice of a request, or None after an error event."""
        try:
            tenant = await run_in_threadpool(tenant_of, self._state, self._key)
            voice_id, speaker = chosen_voice(self._state.catalog, self._state.settings.default_voice, voice)
        except REFUSALS as e:
            await self._refuse(e.code, str(e))
            return None
        ssml = text_format == SynthesizeTextFormat.SSML
        return Utterance(tenant=tenant, text="", voice=voice_id, speaker=speaker, ssml=ssml)

    async def _refuse(self, code: str, text: str) -> None:
        await self._work.put(Error(text=text, code=code).event())

    async def _speak_all(self) -> None:
        """Speak or send each piece of work in turn; an error answers its own utterance only. Once the
        client is gone the rest is dropped, never left in the queue, where a full one would stop the
        reading side before it reads the end of the connection and closes it."""
        gone = False
        while True:
            work = await self._work.get()
            if gone:
                continue
            try:
                await self._do(work)
            except OSError:
                gone = True

    async def _do(self, work: Work) -> None:
        try:
            if isinstance(work, Event):
                await self.write_event(work)
            else:
                await speak(self._state, work, self.write_event, self._jobs)
        except REFUSALS as e:
            await self.write_event(Error(text=str(e), code=e.code).event())
        except ValidationError as e:  # a field the job refuses that the event's own check let through
            await self.write_event(Error(text=validation_message(e), code=INVALID_EVENT).event())
        except OSError:
            raise
        except Exception:
            log.exception("wyoming: an utterance failed")
            await self.write_event(Error(text="internal error; see the server log", code=INTERNAL_ERROR).event())

    async def disconnect(self) -> None:
        """Stop speaking and cancel every job whose audio was not all sent."""
        self._speaker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._speaker
        for job_id in sorted(self._jobs):
            try:
                await run_in_threadpool(functools.partial(cancel_job, job_id, self._state.lifecycle, purge=False))
            except ServiceError:  # never stored (cut off while submitting), or Redis down: the sweeper's
                log.warning("wyoming: job %s of a closed connection not canceled", job_id, exc_info=True)
        self._jobs.clear()


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, not {type(text).__name__}")


def _completed(buffer: SentenceBuffer, text: str, cut: bool) -> str | None:
    """The sentences ``text`` completed that have something to say. Called in a worker thread: text
    is never split or normalised on the event loop, which serves every other connection."""
    return _speakable(buffer.add(text, cut))


def _completed_apart(_: Drafting, *, buffer: SentenceBuffer, text: str, cut: bool) -> tuple[SentenceBuffer, str | None]:
    """:func:`_completed`, where the API reads heavy requests (a long chunk: in a helper process,
    ``api.heavy_work``, whose copy of the buffer comes back as the chunk left it)."""
    return buffer, _completed(buffer, text, cut)


def _finished(buffer: SentenceBuffer) -> str | None:
    """What the stream left that has something to say (in a worker thread, as :func:`_completed`)."""
    return _speakable(buffer.finish())


def _speakable(text: str | None) -> str | None:
    return text if text is not None and has_speech(normalize_text(text)) else None
