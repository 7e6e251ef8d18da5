"""``POST /v1/audio/speech``: OpenAI's speech endpoint, answered by a ttsq job.

The request becomes an interactive job flagged ``stream``: the worker stores each segment's PCM as
a part and announces it; this route waits for the parts through the event hub and encodes them in
order into the response, so the first sound leaves while later segments are still synthesised.
The job is otherwise a job like any other: queue, batching, record, and (unless ``keep`` is false)
the stored object, which ``GET /v1/jobs/{id}`` then lists as usual.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Final, Literal

import numpy as np
from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field, StrictBool
from starlette.background import BackgroundTask

from api.deps import StateDep, TenantDep, require_json
from api.errors import ApiError
from api.schemas import (
    ErrorPublic,
    JobCreate,
    LexiconNames,
    LoudnessRequest,
    RequestBody,
    SampleRate,
)
from api.state import AppState
from api.submission import draft_job, submit_job
from api.waiting import RESYNC_S, Subscription
from tts_core.config import DEFAULT_SPEED, SPEED_RANGE
from tts_core.encoding import StreamEncoder, encode
from tts_core.errors import UnsupportedFormat
from tts_core.formats import AudioFormat, AudioOutput
from ttsq.jobs import JobRecord, JobStatus, NormalizeOption, Priority
from ttsq.parts import PartRef, counted_parts

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/audio", tags=["openai"])

OPENAI_VOICE_NAMES: Final = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar"}
)
"""OpenAI's voice names: each speaks with the voice ``openai_voices`` maps it to, else the default."""

OFFERED_FORMATS: Final[dict[str, AudioFormat | None]] = {
    "mp3": AudioFormat.MP3,
    "flac": AudioFormat.FLAC,
    "wav": AudioFormat.WAV,
    "opus": AudioFormat.OPUS,
    "aac": AudioFormat.AAC,
    "pcm": None,
}
"""OpenAI's ``response_format`` values (``opus`` is Ogg Opus, ``aac`` is ADTS AAC); ``None`` is raw
PCM (stored as WAV)."""

PCM_MEDIA_TYPE: Final = "audio/pcm"

PART_TIMEOUT_S: Final = 120.0
"""Longest wait for the next segment's audio before the request gives up (504); a segment takes
seconds, so this only fires when no worker takes the job. Module-level so tests can shorten it."""


class VoiceRef(BaseModel):
    """OpenAI's voice object form, ``{"id": ...}``."""

    id: str


class SpeechCreate(RequestBody):
    """The body OpenAI's ``audio.speech.create`` sends, plus ttsq's ``keep``."""

    model: str = Field(
        description="Accepted and ignored (tts-1, tts-1-hd, gpt-4o-mini-tts…): the voice decides.", examples=["tts-1"]
    )
    input: str = Field(
        description="Text to speak: 1 to `max_text_chars` characters.",
        json_schema_extra={"minLength": 1},  # checked by check_text, which names the problem (empty_text)
        examples=["Hello from ttsq."],
    )
    voice: str | VoiceRef = Field(
        description="A ttsq voice id or an OpenAI voice name (see openai_voices).", examples=["alloy"]
    )
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = Field(
        "mp3", description="opus is Ogg Opus (48 kHz when decoded), aac is AAC in ADTS frames, pcm is raw 16-bit mono."
    )
    speed: float = Field(DEFAULT_SPEED, ge=SPEED_RANGE[0], le=SPEED_RANGE[1], strict=True)
    """Strict: a number, not ``true`` or ``"1"``."""
    instructions: str | None = Field(None, description="Accepted and ignored: Piper voices take no instructions.")
    stream_format: Literal["audio", "sse"] | None = Field(None, description="Only 'audio' is offered.")
    keep: bool = Field(True, strict=True, description="ttsq: also store the audio as the job's object (default true).")
    sample_rate: SampleRate | None = Field(
        None,
        description="ttsq: the audio's sample rate (Hz), as a job's `sample_rate`; the voice's if omitted (opus: 24000 "
        "for a 22050 Hz voice).",
    )
    loudness: LoudnessRequest | None = Field(
        None,
        description="ttsq: a loudness target as a job's `loudness`; streamed audio cannot be measured whole before "
        "it is sent, so each voice's gain is calibrated once on sample prose and the true-peak limiter holds the "
        "ceiling: every voice lands near the target.",
    )
    lexicons: LexiconNames | None = Field(
        None,
        description="ttsq: your lexicons to apply, as a job's `lexicons` (OpenAI clients send it through extra_body).",
    )
    normalize: StrictBool | NormalizeOption | None = Field(None, description="ttsq: as a job's `normalize`.")


def _resolve_voice(state: AppState, voice: str | VoiceRef) -> str:
    settings = state.settings
    name = voice.id if isinstance(voice, VoiceRef) else voice
    mapped = settings.openai_voices.get(name)
    if mapped is not None:
        return mapped
    if name in OPENAI_VOICE_NAMES and name not in state.catalog.ids():
        return settings.default_voice
    return name


def _response_format(body: SpeechCreate) -> AudioFormat | None:
    if body.stream_format == "sse":
        raise ApiError(422, "unsupported_stream_format", "stream_format 'sse' is not offered; use 'audio'")
    return OFFERED_FORMATS[body.response_format]


@router.post(
    "/speech",
    response_class=Response,
    responses={
        200: {"content": {f.content_type: {} for f in OFFERED_FORMATS.values() if f} | {PCM_MEDIA_TYPE: {}}},
        **{code: {"model": ErrorPublic} for code in (400, 401, 413, 415, 422, 429, 500, 503, 504)},
    },
    dependencies=[Depends(require_json)],
    summary="Speak text, answering with the audio (OpenAI-compatible)",
)
async def create_speech(body: SpeechCreate, state: StateDep, tenant: TenantDep) -> Response:
    """Queue an interactive job, wait for its first audio, then stream the rest as it is made."""
    audio_format = _response_format(body)
    output = AudioOutput(audio_format or AudioFormat.WAV, body.sample_rate)  # pcm is stored as WAV
    try:
        output.check()
    except UnsupportedFormat as e:
        raise ApiError(422, "invalid_request", str(e)) from None
    voice = _resolve_voice(state, body.voice)
    request = JobCreate(
        text=body.input,
        voice=voice,
        format=output.format,
        sample_rate=body.sample_rate,
        speed=body.speed,
        loudness=body.loudness,
        lexicons=body.lexicons,
        normalize=body.normalize,
        metadata={"source": "openai"},
        priority=Priority.INTERACTIVE,
    )
    draft = draft_job(state, tenant, request, stream=True, keep=body.keep)
    record = draft.record
    voice_rate = state.catalog.get(record.voice).sample_rate
    await run_in_threadpool(submit_job, state, tenant, draft)
    reader = PartReader(state, record.id)
    await reader.open()
    try:
        first = await reader.next_part()
    except BaseException:
        await reader.close()
        raise
    media_type = audio_format.content_type if audio_format else PCM_MEDIA_TYPE
    rate = output.rate_for(voice_rate)
    headers = {"x-ttsq-job-id": record.id, "x-ttsq-sample-rate": str(rate)}
    if reader.total == 1 and audio_format is not None:  # all there is: one whole file, with its length
        whole = encode(first, voice_rate, output).data
        return Response(whole, media_type=media_type, headers=headers, background=BackgroundTask(reader.close))
    encoder = StreamEncoder(output if audio_format else None, voice_rate, rate)
    if reader.total == 1:  # raw PCM, whole
        whole = encoder.write(first) + encoder.close()
        return Response(whole, media_type=media_type, headers=headers, background=BackgroundTask(reader.close))
    return StreamingResponse(_encoded(reader, first, encoder), media_type=media_type, headers=headers)


async def _encoded(reader: PartReader, first: np.ndarray, encoder: StreamEncoder) -> AsyncIterator[bytes]:
    try:
        yield encoder.write(first)
        while (pcm := await reader.next_part_or_end()) is not None:  # parts carry their own pauses
            yield encoder.write(pcm)
        yield encoder.close()
    finally:
        await reader.close()


class PartReader:
    """A streamed job's parts in order, as the workers count them done; deletes them once read."""

    def __init__(self, state: AppState, job_id: str) -> None:
        self._state = state
        self.job_id = job_id
        self.voice = ""
        self.total: int | None = None
        self._next = 0
        self._context = state.hub.subscribe(job_id)
        self._events: Subscription | None = None

    async def open(self) -> None:
        self._events = await self._context.__aenter__()

    async def close(self) -> None:
        await self._context.__aexit__(None, None, None)
        await run_in_threadpool(self._release)

    def _release(self) -> None:
        """Delete the parts if the worker is done with them too; else leave that to the worker
        (the flag is set before the status is read, so one of the two always sees the other)."""
        self._state.stores.segments.mark_streamed(self.job_id)
        if self._state.stores.jobs.get(self.job_id).status.terminal and self.total:
            self._state.stores.parts.delete(
                counted_parts(self.job_id, self._state.stores.segments.winners(self.job_id))
            )

    async def next_part(self) -> np.ndarray:
        """The next part, waiting for it; raises if the job failed before it came."""
        pcm = await self.next_part_or_end()
        if pcm is None:
            raise ApiError(500, "stream_ended", f"job {self.job_id} finished without audio")
        return pcm

    async def next_part_or_end(self) -> np.ndarray | None:
        """The next part, or None once every part was read; 504 if it takes longer than
        ``PART_TIMEOUT_S`` (no worker, or a stuck one: the job itself goes on)."""
        assert self._events is not None
        deadline = time.monotonic() + PART_TIMEOUT_S
        while True:
            if time.monotonic() > deadline:
                message = f"no audio for {PART_TIMEOUT_S:.0f} s; the job goes on: GET /v1/jobs/{self.job_id}"
                raise ApiError(504, "speech_timeout", message)
            record, done = await run_in_threadpool(self._look)
            if self.total is not None and self._next >= self.total:
                return None
            if self._next in done:
                part = PartRef(self.job_id, self._next, done[self._next])
                data = await run_in_threadpool(self._state.stores.parts.get, part)
                self._next += 1
                return np.frombuffer(data, dtype=np.int16)
            if record.status is not JobStatus.RUNNING and record.status is not JobStatus.QUEUED:
                _raise_unfinished(record)
            await self._events.next(min(RESYNC_S, max(0.0, deadline - time.monotonic())))
            self._events.drain()

    def _look(self) -> tuple[JobRecord, dict[int, str]]:
        """The record and the counted segments (with the attempt whose part counts). A one-segment
        job's total is written only at its success, after its part: a part counted while the total
        is unknown means a one-segment job."""
        record = self._state.stores.jobs.get(self.job_id)
        done = self._state.stores.segments.winners(self.job_id)
        self.voice = record.voice
        total = record.progress.segments_total
        self.total = total if total is not None else (1 if done else None)
        return record, done


def _raise_unfinished(record: JobRecord) -> None:
    if record.status is JobStatus.SUCCEEDED:  # counted parts vanished (expired): nothing to stream
        raise ApiError(500, "segment_lost", f"job {record.id} succeeded but its parts are gone")
    error = record.error
    code = error.code if error else record.status.value
    message = error.message if error else f"job {record.id} is {record.status.value}"
    raise ApiError(500, code, message)
