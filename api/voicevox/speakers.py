"""ttsq's voices as VOICEVOX speakers: each voice one speaker, its speakers (multi-speaker Piper
voices) its styles, with ids that stay the same from one start to the next.

A speaker's ``speaker_uuid`` is ``uuid5(SPEAKER_NAMESPACE, voice id)``; a style's id is the first 31
bits of ``sha256("<voice id>/<speaker name>")`` (the name empty for a single-speaker voice). Both
depend on the voice alone, so adding or removing another voice changes no id a client has stored. Two
styles whose hashes collide (one chance in about four million for a thousand styles) are told apart by
hashing the later one (in voice-id order) again with a counter: only then can an id depend on which
other voices exist, and the routes still answer every id consistently.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request

from api.deps import StateDep
from api.voicevox.deps import Refused, VoicevoxTenantDep
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.voice_info import VoiceInfo

SPEAKER_NAMESPACE: Final = uuid.UUID("6f0c3c1e-2b7a-5d54-9a57-747473717676")
"""Namespace of the speakers' uuid5s: fixed forever, or every client's stored speaker changes."""

STYLE_ID_BITS: Final = 31
"""Style ids are non-negative 32-bit integers: what every VOICEVOX client stores them in."""

SINGLE_STYLE_NAME: Final = "ノーマル"
"""The style name of a single-speaker voice: VOICEVOX's own name for a speaker's default style."""

SPEAKER_VERSION: Final = "0.1.0"
"""The ``version`` VOICEVOX gives each speaker (its voice library's version)."""

router = APIRouter(tags=["voicevox"])


@dataclass(frozen=True)
class Style:
    """One VOICEVOX style: a voice and, for a multi-speaker voice, one of its speakers."""

    id: int
    name: str
    voice: VoiceInfo
    speaker: str | None


@dataclass(frozen=True)
class Speaker:
    """One VOICEVOX speaker: a ttsq voice with its styles."""

    uuid: str
    voice: VoiceInfo
    styles: tuple[Style, ...]


def speaker_uuid(voice_id: str) -> str:
    return str(uuid.uuid5(SPEAKER_NAMESPACE, voice_id))


def _style_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") >> (32 - STYLE_ID_BITS)


def speakers_of(catalog: VoiceCatalog) -> list[Speaker]:
    """Every voice as a speaker, in voice-id order, each style with its stable id."""
    taken: set[int] = set()
    speakers = []
    for voice in sorted(catalog.all(), key=lambda v: v.id):
        names: list[str | None] = list(voice.speakers) if voice.num_speakers > 1 else [None]
        styles = []
        for name in names:
            key = f"{voice.id}/{name or ''}"
            style_id, counter = _style_hash(key), 0
            while style_id in taken:
                counter += 1
                style_id = _style_hash(f"{key}/{counter}")
            taken.add(style_id)
            styles.append(Style(style_id, name or SINGLE_STYLE_NAME, voice, name))
        speakers.append(Speaker(speaker_uuid(voice.id), voice, tuple(styles)))
    return speakers


def find_style(catalog: VoiceCatalog, style_id: int, loc: tuple[str | int, ...] = ("query", "speaker")) -> Style:
    """The style with this id; an unknown id is bad input (422), as VOICEVOX ENGINE answers it."""
    for speaker in speakers_of(catalog):
        for style in speaker.styles:
            if style.id == style_id:
                return style
    raise Refused(loc, f"no style (speaker) with id {style_id}; GET /speakers lists them", "style_not_found")


def speaker_public(speaker: Speaker) -> dict[str, Any]:
    """``Speaker`` as VOICEVOX ENGINE's ``GET /speakers`` gives it."""
    return {
        "name": speaker.voice.id,
        "speaker_uuid": speaker.uuid,
        "styles": [{"name": style.name, "id": style.id, "type": "talk"} for style in speaker.styles],
        "version": SPEAKER_VERSION,
        "supported_features": {"permitted_synthesis_morphing": "NOTHING"},
    }


SpeakerParam = Annotated[int, Query(description="A style id from GET /speakers.")]


def initialized(request: Request) -> set[int]:
    """Style ids this API process has seen speak (a warm-up or a synthesis) since it started
    (``api.voicevox.app`` makes the set)."""
    styles: set[int] = request.app.state.voicevox_initialized
    return styles


class SpeakerNotFound(Exception):
    """An unknown ``speaker_uuid``: VOICEVOX ENGINE answers 404."""


@router.get("/speakers", summary="Every voice as a speaker, its speakers as styles")
async def list_speakers(state: StateDep, _: VoicevoxTenantDep) -> list[dict[str, Any]]:
    return [speaker_public(speaker) for speaker in speakers_of(state.catalog)]


@router.get("/speaker_info", summary="A speaker's policy and pictures (empty: ttsq's voices come without)")
async def speaker_info(
    state: StateDep, _: VoicevoxTenantDep, speaker_uuid: Annotated[str, Query(max_length=100)]
) -> dict[str, Any]:
    for speaker in speakers_of(state.catalog):
        if speaker.uuid == speaker_uuid:
            return {
                "policy": f"{speaker.voice.id}: see the voice's own licence (GET /v1/voices).",
                "portrait": "",
                "style_infos": [
                    {"id": style.id, "icon": "", "portrait": "", "voice_samples": []} for style in speaker.styles
                ],
            }
    raise SpeakerNotFound(speaker_uuid)


@router.get("/is_initialized_speaker", summary="Whether this API process has had the style speak")
async def is_initialized_speaker(
    request: Request, state: StateDep, _: VoicevoxTenantDep, speaker: SpeakerParam
) -> bool:
    style = find_style(state.catalog, speaker)
    return style.id in initialized(request)
