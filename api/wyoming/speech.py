"""One Wyoming utterance as one ttsq job: drafted and submitted as the speech endpoint does
(interactive, streamed, not kept), its parts sent as ``audio-chunk`` events as the workers finish them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
from fastapi.concurrency import run_in_threadpool
from opentelemetry.trace import Span, SpanKind
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from api.pacing import wait_for_turn
from api.part_reader import PartReader
from api.schemas import JobCreate
from api.state import AppState
from api.streamed_job import StreamedJob
from api.submission import draft_job
from tts_core.mastering.formats import AudioFormat
from ttsq import tracing
from ttsq.job_record import TextType
from ttsq.tenants import Tenant

SAMPLES_PER_CHUNK: Final = 1024
"""Samples per ``audio-chunk`` (46 ms at 22,050 Hz), as wyoming-piper sends: a part (a sentence or
more) is cut into chunks this size so that a player can start on the first."""

SAMPLE_WIDTH: Final = 2
"""Bytes per sample: the parts are 16-bit PCM, mono, at the voice's rate."""

UTTERANCE_SPAN: Final = "wyoming synthesize"
"""The span of one utterance, from its turn to its ``audio-stop``: the job it submits continues its trace."""

SOURCE: Final = "wyoming"
"""The jobs' ``metadata.source``, telling them apart from other clients' jobs."""

Send = Callable[[Event], Awaitable[None]]


@dataclass(frozen=True)
class Utterance:
    """Text to speak as one job, with the caller's tenant and voice."""

    tenant: Tenant
    text: str
    voice: str
    speaker: str | int | None = None
    ssml: bool = False

    def request(self) -> JobCreate:
        """No priority of its own: an utterance is interactive when what it speaks is short (a voice
        assistant's sentences), bulk past ``TTSQ_INTERACTIVE_MAX_CHARS`` as spoken, as a job without
        one is. Forced interactive, one client's stream of 180,000 characters held every other
        client's first audio behind it (issue 34)."""
        return JobCreate(
            text=self.text,
            voice=self.voice,
            speaker=self.speaker,
            text_type=TextType.SSML if self.ssml else TextType.TEXT,
            format=AudioFormat.WAV,
            metadata={"source": SOURCE},
        )


async def speak(state: AppState, utterance: Utterance, send: Send, jobs: set[str]) -> None:
    """Submit the utterance's job and send its audio: ``audio-start`` with the first part, a chunk
    per ``SAMPLES_PER_CHUNK`` samples, ``audio-stop``. Bad input raises before any job exists. The
    job's id stays in ``jobs`` unless its audio was all sent, so the connection's end cancels it.
    The utterance is a span (:data:`UTTERANCE_SPAN`), the root of its job's trace."""
    attributes: dict[str, str | int] = {"ttsq.tenant.id": utterance.tenant.id, "ttsq.characters": len(utterance.text)}
    with tracing.span(UTTERANCE_SPAN, kind=SpanKind.SERVER, attributes=attributes) as span:
        await _speak(state, utterance, send, jobs, span)


async def _speak(state: AppState, utterance: Utterance, send: Send, jobs: set[str], span: Span) -> None:
    tenant = utterance.tenant
    await wait_for_turn(state, tenant, len(utterance.text.encode("utf-8", "surrogatepass")))
    draft = await run_in_threadpool(draft_job, state, tenant, utterance.request(), stream=True, keep=False)
    span.set_attributes({"ttsq.job.id": draft.record.id, "ttsq.voice": draft.record.voice})
    rate = state.catalog.get(draft.record.voice).sample_rate
    jobs.add(draft.record.id)  # before it exists: a connection closed while it is submitted cancels it
    try:
        job = await StreamedJob.submit(state, tenant, draft)
    except Exception:  # refused (quota, queue behind): no job was left behind
        jobs.discard(draft.record.id)
        raise
    async with job.reading(cancel_if_left=False) as reader:  # the connection's end cancels it
        sent = await _send_audio(reader, rate, send)
    # Its audio is all sent: no longer the connection's to cancel. Before audio-stop, since a client
    # closes once it has it, and a close seen first canceled a job still storing its object.
    jobs.discard(draft.record.id)
    await send(AudioStop(timestamp=_ms(sent, rate)).event())


async def _send_audio(reader: PartReader, rate: int, send: Send) -> int:
    """``audio-start`` once the first part is there (a job that fails before any audio is an error
    alone), then each part's chunks; timestamps in milliseconds of audio sent. Returns the samples
    sent."""
    pcm: np.ndarray | None = await reader.next_part()
    await send(AudioStart(rate=rate, width=SAMPLE_WIDTH, channels=1, timestamp=0).event())
    sent = 0
    while pcm is not None:
        for chunk in chunks(pcm):
            event = AudioChunk(rate=rate, width=SAMPLE_WIDTH, channels=1, audio=chunk, timestamp=_ms(sent, rate))
            await send(event.event())
            sent += len(chunk) // SAMPLE_WIDTH
        pcm = await reader.next_part_or_end()
    return sent


def chunks(pcm: np.ndarray) -> Iterator[bytes]:
    """The part's samples as little-endian bytes, ``SAMPLES_PER_CHUNK`` at a time."""
    data = pcm.astype("<i2").tobytes()
    step = SAMPLES_PER_CHUNK * SAMPLE_WIDTH
    for start in range(0, len(data), step):
        yield data[start : start + step]


def _ms(samples: int, rate: int) -> int:
    return samples * 1000 // rate
