"""``POST /v1/audio/speech``: OpenAI's speech endpoint, answered by a ttsq job.

The request becomes an interactive job flagged ``stream``: the worker stores each segment's PCM as
a part and announces it; this route waits for the parts through the event hub and encodes them in
order into the response, so the first sound leaves while later segments are still synthesised.
The job is otherwise a job like any other: queue, batching, record, and (unless ``keep`` is false)
the stored object, which ``GET /v1/jobs/{id}`` then lists as usual.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from pydantic import BaseModel, Field, StrictBool, field_validator

from api.audio_answer import PCM_MEDIA_TYPE, audio_answer
from api.deps import StateDep, TenantDep, require_json
from api.errors import ApiError
from api.pacing import PacedSubmission
from api.schemas import (
    JobCreate,
    LexiconNames,
    LoudnessRequest,
    RequestBody,
    SampleRate,
    error_responses,
    marks_once,
)
from api.state import AppState
from api.streamed_job import StreamedJob
from tts_core.base.config import DEFAULT_SPEED, SPEED_RANGE
from tts_core.base.errors import UnsupportedFormat
from tts_core.marks.speech_marks import MARK_TYPES, MarkType
from tts_core.mastering.formats import AudioFormat, AudioOutput
from ttsq.job_record import NormalizeOption, Priority

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
    marks: list[MarkType] = Field(
        default_factory=list,
        max_length=len(MARK_TYPES),
        description="ttsq: timing marks stored with the kept job, as a job's `marks` (GET /v1/jobs/{id} then links "
        "them): a page reads along with the audio it streamed.",
    )

    @field_validator("marks")
    @classmethod
    def _marks_once(cls, value: list[MarkType]) -> list[MarkType]:
        return marks_once(value)


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
        **error_responses(400, 401, 413, 415, 422, 429, 500, 503, 504),
    },
    dependencies=[Depends(require_json)],
    summary="Speak text, answering with the audio (OpenAI-compatible)",
)
async def create_speech(body: SpeechCreate, state: StateDep, tenant: TenantDep, _turn: PacedSubmission) -> Response:
    """Queue an interactive job, wait for its first audio, then stream the rest as it is made."""
    audio_format = _response_format(body)
    if body.marks and not body.keep:
        raise ApiError(422, "invalid_request", "marks are stored with the job: they need keep true")
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
        marks=body.marks,
        metadata={"source": "openai"},
        priority=Priority.INTERACTIVE,
    )
    job = await StreamedJob.draft_and_submit(state, tenant, request, keep=body.keep)
    return await audio_answer(job, state.catalog.get(job.record.voice).sample_rate, output, audio_format)
