"""``/synthesis`` and its kin: an AudioQuery spoken by an ordinary interactive ttsq job.

The job speaks ``spoken_text(query)`` (for Japanese the moras' katakana, so edited mora text is
honoured) with ``speed`` = ``speedScale``, ``volume_db`` = 20·log10(``volumeScale``) and the sentence
pause from ``pauseLength``/``pauseLengthScale``; this module then adds ``prePhonemeLength`` and
``postPhonemeLength`` of silence, resamples to ``outputSamplingRate`` and writes a 16-bit WAV, mono or
stereo. What is not applied (``pitchScale``, ``intonationScale``, edited mora lengths, pitches and
accents) is listed in docs/VOICEVOX.md; a non-default ``pitchScale`` or ``intonationScale`` is also
named in the answer's ``x-ttsq-not-applied`` header. Every query is checked and drafted before any job
is submitted, so a refused request leaves no job behind.
"""

from __future__ import annotations

import asyncio
import io
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Final

import anyio
import numpy as np
from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from api.deps import StateDep
from api.pacing import wait_for_turn
from api.part_reader import PartReader
from api.schemas import JobCreate
from api.state import AppState
from api.streamed_job import ClientGone, StreamedJob
from api.submission import Draft, draft_job
from api.voicevox.deps import Loc, Refused, VoicevoxTenantDep, refused_at
from api.voicevox.models import AudioQuery
from api.voicevox.queries import spoken_text
from api.voicevox.speakers import SpeakerParam, Style, find_style, initialized
from api.voicevox.waves import connect_waves, resampled, silence, wav_bytes
from tts_core.base.config import PAUSE_RANGE, SPEED_RANGE
from tts_core.mastering.formats import AudioFormat
from tts_core.mastering.resampling import OUTPUT_RATES
from tts_core.text.speech_markup import VOLUME_RANGE_DB
from ttsq.job_record import Priority
from ttsq.tenants import Tenant

router = APIRouter(tags=["voicevox"])

WAV_MEDIA_TYPE: Final = "audio/wav"
NOT_APPLIED_HEADER: Final = "x-ttsq-not-applied"
"""Names the query's settings that were given other than their defaults and not applied."""

MAX_EDGE_SILENCE_S: Final = PAUSE_RANGE[1]
"""Longest ``prePhonemeLength`` / ``postPhonemeLength``: as long as ttsq's longest pause."""

MAX_QUERIES: Final = 100
"""Most queries one ``/multi_synthesis`` speaks."""

DISCONNECT_POLL_S: Final = 0.2
"""How often ``/cancellable_synthesis`` looks whether its client is still there while it waits."""

WARM_UP_TEXT: Final = {"ja": "はい。", "en": "Hi."}
"""What ``/initialize_speaker`` has a worker say, by language; any other language says the English."""

VOLUME_SCALE_RANGE: Final = (10 ** (VOLUME_RANGE_DB[0] / 20), 10 ** (VOLUME_RANGE_DB[1] / 20))
"""The volumeScale values a job's ``volume_db`` range covers (0.01 to 3.98); 0 is silence."""


@dataclass(frozen=True)
class Rendering:
    """What the facade does to the job's audio: silence around it, rate, channels."""

    pre_s: float = 0.0
    post_s: float = 0.0
    rate: int | None = None
    """Output rate; the voice's if None."""
    stereo: bool = False
    silent: bool = False
    """``volumeScale`` 0: VOICEVOX's silence of the same length."""
    not_applied: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prepared:
    """A query checked and drafted as a job; nothing stored yet."""

    draft: Draft
    style: Style
    rendering: Rendering


def _in_range(loc: Loc, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise Refused(loc, f"must be between {low:g} and {high:g}; got {value:g}", "value_error.number.out_of_range")


def _sentence_pause(query: AudioQuery, default_s: float, loc: Loc) -> float | None:
    """``pauseLength`` (else the server's sentence pause) times ``pauseLengthScale``; None: default."""
    if query.pauseLength is None and query.pauseLengthScale == 1:
        return None
    if query.pauseLength is not None:
        _in_range((*loc, "pauseLength"), query.pauseLength, *PAUSE_RANGE)
    if query.pauseLengthScale < 0:
        raise Refused((*loc, "pauseLengthScale"), "must not be negative", "value_error.number.not_ge")
    pause = (default_s if query.pauseLength is None else query.pauseLength) * query.pauseLengthScale
    _in_range((*loc, "pauseLengthScale"), pause, *PAUSE_RANGE)
    return pause


def _volume_db(scale: float, loc: Loc) -> float | None:
    """20·log10(scale); None for 0 (silence, made by the facade) and for 1 (the voice's own level)."""
    if scale == 0 or scale == 1:
        return None
    _in_range(loc, scale, *VOLUME_SCALE_RANGE)
    return 20 * math.log10(scale)


def job_request(query: AudioQuery, style: Style, default_pause_s: float, loc: Loc) -> tuple[JobCreate, Rendering]:
    """The job a query asks for and what the facade adds; each value out of range refused by name."""
    _in_range((*loc, "speedScale"), query.speedScale, *SPEED_RANGE)
    _in_range((*loc, "prePhonemeLength"), query.prePhonemeLength, 0, MAX_EDGE_SILENCE_S)
    _in_range((*loc, "postPhonemeLength"), query.postPhonemeLength, 0, MAX_EDGE_SILENCE_S)
    if query.outputSamplingRate not in OUTPUT_RATES:
        rates = ", ".join(map(str, OUTPUT_RATES))
        raise Refused((*loc, "outputSamplingRate"), f"must be one of {rates}", "value_error.sampling_rate")
    volume_db = _volume_db(query.volumeScale, (*loc, "volumeScale"))
    pause = _sentence_pause(query, default_pause_s, loc)
    text = spoken_text(query, style.voice)
    if not text.strip():
        raise Refused((*loc, "accent_phrases"), "nothing to speak", "value_error.empty")
    not_applied = tuple(
        name
        for name, given, default in (
            ("pitchScale", query.pitchScale, 0.0),
            ("intonationScale", query.intonationScale, 1.0),
        )
        if given != default
    )
    request = job_create(text, style, speed=query.speedScale, volume_db=volume_db, sentence_pause_s=pause)
    rendering = Rendering(
        query.prePhonemeLength,
        query.postPhonemeLength,
        query.outputSamplingRate,
        query.outputStereo,
        query.volumeScale == 0,
        not_applied,
    )
    return request, rendering


def job_create(
    text: str,
    style: Style,
    *,
    speed: float = 1.0,
    volume_db: float | None = None,
    sentence_pause_s: float | None = None,
) -> JobCreate:
    return JobCreate(
        text=text,
        voice=style.voice.id,
        speaker=style.speaker,
        format=AudioFormat.WAV,
        speed=speed,
        volume_db=volume_db,
        sentence_pause_s=sentence_pause_s,
        metadata={"source": "voicevox"},
        priority=Priority.INTERACTIVE,
    )


def prepare(
    state: AppState, tenant: Tenant, request: JobCreate, style: Style, rendering: Rendering, loc: Loc
) -> Prepared:
    """The request drafted as a job. It reads the text (and Redis): call it in a worker thread."""
    with refused_at(loc):
        draft = draft_job(state, tenant, request, stream=True, keep=False)
    return Prepared(draft, style, rendering)


def prepare_query(state: AppState, tenant: Tenant, query: AudioQuery, style: Style, loc: Loc) -> Prepared:
    request, rendering = job_request(query, style, state.settings.sentence_pause_s, loc)
    return prepare(state, tenant, request, style, rendering, (*loc, "accent_phrases"))


async def speak(state: AppState, tenant: Tenant, prepared: Prepared, client: Request | None = None) -> bytes:
    """Submit the job, gather its audio, and make the WAV. With ``client``, its disconnecting cancels
    the job (:class:`ClientGone`); so does this coroutine being cancelled."""
    await wait_for_turn(state, tenant, len(prepared.draft.text.encode("utf-8", "surrogatepass")))
    job = await StreamedJob.submit(state, tenant, prepared.draft)
    parts: list[np.ndarray] = []
    async with job.reading(cancel_if_left=True) as reader:
        while (pcm := await _next_part(reader, client)) is not None:
            parts.append(pcm)
    return render(np.concatenate(parts), prepared.style.voice.sample_rate, prepared.rendering)


async def _next_part(reader: PartReader, client: Request | None) -> np.ndarray | None:
    if client is None:
        return await reader.next_part_or_end()
    waiting = asyncio.ensure_future(reader.next_part_or_end())
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
            if done:
                return waiting.result()
            if await client.is_disconnected():
                raise ClientGone
    finally:
        waiting.cancel()


def render(pcm: np.ndarray, voice_rate: int, rendering: Rendering) -> bytes:
    if rendering.silent:
        pcm = np.zeros_like(pcm)
    rate = rendering.rate or voice_rate
    padded = np.concatenate([silence(rendering.pre_s, voice_rate), pcm, silence(rendering.post_s, voice_rate)])
    return wav_bytes(resampled(padded, voice_rate, rate), rate, rendering.stereo)


def _headers(prepared: Prepared) -> dict[str, str]:
    headers = {"x-ttsq-job-id": prepared.draft.record.id}
    if prepared.rendering.not_applied:
        headers[NOT_APPLIED_HEADER] = ", ".join(prepared.rendering.not_applied)
    return headers


Ignored = str | None
"""A query parameter of VOICEVOX's that is accepted and ignored (``core_version``...). A plain type,
not ``Annotated[..., Query()]``: one ``Query`` object shared by several parameters gets each one's
alias in turn, and pydantic warns (an error under the test suite) when FastAPI rebuilds the routes."""


@dataclass(frozen=True)
class SynthesisCall:
    """What ``/synthesis`` and ``/cancellable_synthesis`` take: the query to speak and who asks."""

    request: Request
    state: AppState
    tenant: Tenant
    query: AudioQuery
    speaker: int


async def synthesis_call(
    request: Request,
    state: StateDep,
    tenant: VoicevoxTenantDep,
    query: AudioQuery,
    speaker: SpeakerParam,
    enable_interrogative_upspeak: Ignored = None,
    core_version: Ignored = None,
) -> SynthesisCall:
    return SynthesisCall(request, state, tenant, query, speaker)


SynthesisCallDep = Annotated[SynthesisCall, Depends(synthesis_call)]


async def _synthesis(call: SynthesisCall, cancellable: bool) -> Response:
    request, state, tenant, query, speaker = call.request, call.state, call.tenant, call.query, call.speaker
    style = find_style(state.catalog, speaker)
    prepared = await run_in_threadpool(prepare_query, state, tenant, query, style, ("body",))
    try:
        wav = await speak(state, tenant, prepared, request if cancellable else None)
    except ClientGone:
        return Response(status_code=499)  # nobody reads it: the connection is gone
    initialized(request).add(style.id)
    return Response(wav, media_type=WAV_MEDIA_TYPE, headers=_headers(prepared))


@router.post("/synthesis", response_class=Response, responses={200: {"content": {WAV_MEDIA_TYPE: {}}}})
async def synthesis(call: SynthesisCallDep) -> Response:
    """Speak the query: a WAV at its ``outputSamplingRate``."""
    return await _synthesis(call, cancellable=False)


@router.post("/cancellable_synthesis", response_class=Response, responses={200: {"content": {WAV_MEDIA_TYPE: {}}}})
async def cancellable_synthesis(call: SynthesisCallDep) -> Response:
    """As ``/synthesis``; a client that disconnects before the audio is done cancels the job."""
    return await _synthesis(call, cancellable=True)


@router.post("/multi_synthesis", response_class=Response, responses={200: {"content": {"application/zip": {}}}})
async def multi_synthesis(
    request: Request,
    state: StateDep,
    tenant: VoicevoxTenantDep,
    queries: Annotated[list[AudioQuery], Body()],
    speaker: SpeakerParam,
    core_version: Ignored = None,
) -> Response:
    """Speak every query (all checked first, then spoken as jobs side by side): a zip of
    ``001.wav``, ``002.wav``… in the queries' order."""
    if not 1 <= len(queries) <= MAX_QUERIES:
        raise Refused(("body",), f"{len(queries)} queries; give 1 to {MAX_QUERIES}", "value_error.list")
    style = find_style(state.catalog, speaker)
    prepared = await run_in_threadpool(_prepare_all, state, tenant, queries, style)
    waves = await _speak_all(state, tenant, prepared)
    initialized(request).add(style.id)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for index, wav in enumerate(waves, start=1):
            archive.writestr(f"{index:03d}.wav", wav)
    return Response(out.getvalue(), media_type="application/zip")


def _prepare_all(state: AppState, tenant: Tenant, queries: Sequence[AudioQuery], style: Style) -> list[Prepared]:
    return [prepare_query(state, tenant, query, style, ("body", index)) for index, query in enumerate(queries)]


async def _speak_all(state: AppState, tenant: Tenant, prepared: Sequence[Prepared]) -> list[bytes]:
    """Every job at once; one failing cancels the others (and their jobs)."""
    waves: list[bytes] = [b""] * len(prepared)

    async def one(index: int) -> None:
        waves[index] = await speak(state, tenant, prepared[index])

    try:
        async with anyio.create_task_group() as group:
            for index in range(len(prepared)):
                group.start_soon(one, index)
    except BaseExceptionGroup as failed:  # the first real failure, for the error handlers to answer
        cancelled = anyio.get_cancelled_exc_class()
        raise next((e for e in failed.exceptions if not isinstance(e, cancelled)), failed.exceptions[0]) from None
    return waves


@router.post("/connect_waves", response_class=Response, responses={200: {"content": {WAV_MEDIA_TYPE: {}}}})
async def connect(state: StateDep, _: VoicevoxTenantDep, waves: Annotated[list[str], Body()]) -> Response:
    """Join base64 WAV files of one rate and channel count into one (decoded off the event loop, at
    most the body cap's bytes of audio)."""
    joined = await run_in_threadpool(connect_waves, waves, state.settings.request_bytes_limit)
    return Response(joined, media_type=WAV_MEDIA_TYPE)


@router.post("/initialize_speaker", status_code=204, response_class=Response)
async def initialize_speaker(
    request: Request,
    state: StateDep,
    tenant: VoicevoxTenantDep,
    speaker: SpeakerParam,
    skip_reinit: Annotated[bool, Query()] = False,
    core_version: Ignored = None,
) -> Response:
    """Have a worker say a word in the style's voice (a tiny interactive job), so its model is loaded
    before the first real request; returns when that job is done."""
    style = find_style(state.catalog, speaker)
    if not (skip_reinit and style.id in initialized(request)):
        text = WARM_UP_TEXT.get(style.voice.language.split("_")[0], WARM_UP_TEXT["en"])
        job = job_create(text, style)
        prepared = await run_in_threadpool(prepare, state, tenant, job, style, Rendering(), ("query", "speaker"))
        await speak(state, tenant, prepared)
        initialized(request).add(style.id)
    return Response(status_code=204)
