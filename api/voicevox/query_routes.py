"""``/audio_query`` and ``/accent_phrases``: the routes in front of :mod:`api.voicevox.queries`,
which checks nothing of the request itself; the tenant's user dictionary reaches the analysis, so a
word a VOICEVOX client added is read that way in the query it then synthesises. The style, the
length limit and whether the voice can read the text are checked here first, each refused in
VOICEVOX's shape."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from api.deps import StateDep
from api.lexicon_use import user_dictionary
from api.state import AppState
from api.voicevox.deps import VoicevoxTenantDep, refused_at
from api.voicevox.models import AccentPhrase, AudioQuery
from api.voicevox.queries import accent_phrases, audio_query
from api.voicevox.speakers import SpeakerParam, find_style
from api.voicevox.synthesis import Ignored
from tts_core.text.sentences import check_text

router = APIRouter(tags=["voicevox"])

MAX_QUERY_CHARS: Final = 10_000
"""Longest text ``/audio_query`` and ``/accent_phrases`` analyse (the server's ``max_text_chars`` if
lower): the analysis runs in one child process shared by every tenant, and its answer lists every
mora (10,000 characters of digits are read as about 25,000 morae: 2 s of analysis, megabytes of JSON).
VOICEVOX clients send a sentence or a line at a time; a longer text is a job's (``/v1/jobs``)."""

TextParam = Annotated[str, Query(description="The text to read (for is_kana: AquesTalk-like kana notation).")]


def _check(state: AppState, text: str, voice_id: str, is_kana: bool) -> None:
    """The character limit (:data:`MAX_QUERY_CHARS`) and, for plain text, the voice's script rule
    (``unsupported_text``); it reads the whole text, so it runs in a worker thread, not on the event
    loop."""
    with refused_at(("query", "text")):
        check_text(text, min(state.settings.max_text_chars, MAX_QUERY_CHARS))
        if not is_kana:
            state.catalog.check_speakable(voice_id, text)


@router.post("/audio_query", summary="The query /synthesis speaks, from text")
async def create_audio_query(
    state: StateDep,
    tenant: VoicevoxTenantDep,
    text: TextParam,
    speaker: SpeakerParam,
    core_version: Ignored = None,
    enable_katakana_english: Ignored = None,
) -> AudioQuery:
    style = find_style(state.catalog, speaker)
    await run_in_threadpool(_check, state, text, style.voice.id, False)
    words = await run_in_threadpool(user_dictionary, state.stores.lexicons, tenant.id, style.voice)
    with refused_at(("query", "text")):
        return await run_in_threadpool(audio_query, text, style.voice, False, words)


@router.post("/accent_phrases", summary="Accent phrases (moras, accents, pauses) of text or kana")
async def create_accent_phrases(
    state: StateDep,
    tenant: VoicevoxTenantDep,
    text: TextParam,
    speaker: SpeakerParam,
    is_kana: Annotated[bool, Query()] = False,
    core_version: Ignored = None,
    enable_katakana_english: Ignored = None,
) -> list[AccentPhrase]:
    style = find_style(state.catalog, speaker)
    await run_in_threadpool(_check, state, text, style.voice.id, is_kana)
    words = await run_in_threadpool(user_dictionary, state.stores.lexicons, tenant.id, style.voice)
    with refused_at(("query", "text")):
        return await run_in_threadpool(accent_phrases, text, style.voice, is_kana, words)
