"""``POST /v1/lexicon-preview``: a short text spoken with a lexicon that is not saved, for a studio
page's Listen button (beside it, ``POST /v1/audio/speech`` of the same text says it without).

The draft goes the way a saved lexicon goes: the check ``PUT /v1/lexicons/{name}`` runs
(``api.lexicon_checks``), then a version kept by the lexicon store (``LexiconStore.put_draft``: a
name no request can give, a short life, outside the tenant's lexicons, their count and their
bytes), which a streamed interactive job uses first, as a job uses a lexicon it names: checked
against the voice at submission, read and indexed by the worker from its recorded version. The job
keeps no audio object; the answer is the audio, as the speech endpoint's is.

A path of its own, not ``/v1/lexicons/preview``: that is also the path of a tenant's lexicon named
``preview`` (a name of letters and digits), whose GET, PUT and DELETE would share it (``Allow``
would list them for the preview); no lexicon name holds a hyphen.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Final, Literal, get_args

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import Field

from api.audio_answer import audio_answer
from api.deps import StateDep, TenantDep, require_json
from api.lexicon_checks import JSON_LEXICON_SCHEMA, JSON_MEDIA_TYPE, checked_lexicon
from api.pacing import PacedSubmission
from api.schemas import JobCreate, RequestBody, error_responses
from api.state import AppState
from api.streamed_job import StreamedJob
from api.submission import Draft, draft_job
from tts_core.mastering.formats import AudioFormat, AudioOutput
from tts_core.text.sentences import check_text
from ttsq.job_record import Priority
from ttsq.tenants import Tenant

router = APIRouter(prefix="/v1/lexicon-preview", tags=["lexicons"])

PREVIEW_MAX_CHARS: Final = 500
"""Most characters a preview speaks: a sentence or two around the word being fixed, quick to hear,
and little for a page that calls it at every edit to cost (the server's ``max_text_chars`` holds
too)."""
PreviewFormat = Literal["mp3", "wav", "opus", "flac", "aac"]
"""What a preview may answer in: the speech endpoint's encoded formats, each streamable."""


class LexiconPreview(RequestBody):
    """A draft lexicon and what to say with it."""

    lexicon: dict[str, Any] = Field(
        description="The draft in ttsq's JSON form (as PUT /v1/lexicons/{name} takes it), checked as PUT checks it.",
        json_schema_extra=JSON_LEXICON_SCHEMA,
    )
    text: str = Field(
        description=f"Plain text to speak with the draft: 1 to {PREVIEW_MAX_CHARS} characters (longer: 413).",
        json_schema_extra={"minLength": 1, "maxLength": PREVIEW_MAX_CHARS},  # check_text names the problem
        examples=["Dr. Nguyen ate a ripe tomato."],
    )
    voice: str | None = Field(None, description="Voice id from GET /v1/voices; the server default if omitted.")
    format: PreviewFormat = Field("mp3", description="The audio's format.")


@router.post(
    "",
    response_class=Response,
    responses={
        200: {"content": {AudioFormat(f).content_type: {} for f in get_args(PreviewFormat)}},
        **error_responses(400, 401, 413, 415, 422, 429, 500, 503, 504),
    },
    dependencies=[Depends(require_json)],
    summary="Hear a text spoken with a lexicon that is not saved",
)
async def preview_lexicon(body: LexiconPreview, state: StateDep, tenant: TenantDep, _turn: PacedSubmission) -> Response:
    """Check the draft as a stored lexicon is checked, queue an interactive job that uses it first,
    and answer with its audio as it is made (``x-ttsq-job-id`` names the job)."""
    audio_format = AudioFormat(body.format)
    draft = await run_in_threadpool(_drafted, state, tenant, body, audio_format)
    job = await StreamedJob.submit(state, tenant, draft)
    voice_rate = state.catalog.get(draft.record.voice).sample_rate
    return await audio_answer(job, voice_rate, AudioOutput(audio_format), audio_format)


def _drafted(state: AppState, tenant: Tenant, body: LexiconPreview, audio_format: AudioFormat) -> Draft:
    """The draft checked (in a helper process if it is big, as a stored one) and kept, then the job
    drafted with it: nothing is queued yet."""
    check_text(body.text, PREVIEW_MAX_CHARS)
    document = json.dumps(body.lexicon, ensure_ascii=False).encode()
    heavy = len(document) >= state.settings.heavy_request_chars
    check = functools.partial(checked_lexicon, document=document, media_type=JSON_MEDIA_TYPE)
    lexicon = state.heavy.run(tenant.id, heavy, check)
    draft_lexicon = state.stores.lexicons.put_draft(tenant.id, lexicon)
    request = JobCreate(
        text=body.text,
        voice=body.voice,
        format=audio_format,
        metadata={"source": "lexicon-preview"},
        priority=Priority.INTERACTIVE,
    )
    return draft_job(state, tenant, request, stream=True, keep=False, draft_lexicon=draft_lexicon)
