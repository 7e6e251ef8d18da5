"""Submitting work, for every route that makes jobs (``/v1/jobs``, ``/v1/batches``,
``/v1/audio/speech``): a request becomes a draft (its text checked against the limits and the voice,
its marks and options resolved, its audio estimated), and a draft is submitted (the
``Idempotency-Key``, admission against the queue's age and the tenant's limits, the store, the
queue).

Nothing is stored until every check has passed, and what a failing step stored is taken back: a
refused request leaves no job behind. The job's (and batch's) id is made with its draft, before any
write, so a write whose answer was lost (Redis applied it, then the connection dropped) and whose
taking back fails too is answered 503 naming that id (``Location``, ``job_id``): the job may exist,
and the client can look it up, or repeat with its ``Idempotency-Key``, instead of making a second
one. Admission looks at the age of the oldest task waiting for the
job's class (interactive, or bulk entry and segment tasks): past ``TTSQ_ADMISSION_MAX_AGE_*_S`` the
queue is already behind by that much, and a new job is refused with 503 and a ``Retry-After`` rather
than growing it without bound.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import redis
from kombu.exceptions import (  # type: ignore[attr-defined]  # BatchPublishError: kombu 5.7, newer than its stubs
    BatchPublishError,
    OperationalError,
)
from pydantic import BaseModel, ValidationError

from api.errors import ApiError, describe_validation_errors
from api.heavy_work import Drafting
from api.idempotency import submit_once
from api.lexicon_use import job_lexicons, spoken_growth
from api.metrics import oldest_age_s
from api.schemas import BatchCreate, JobCreate
from api.state import AppState
from api.webhook_urls import check_webhook_url
from tts_core.base.errors import InvalidSsml, MarksUnsupported, TextTooLong, TTSError
from tts_core.marks.speech_marks import MarkType
from tts_core.text.sentences import check_text
from tts_core.text.speech_markup import SsmlDocument, parse_ssml
from tts_core.voices.engines import SpeechEngine, engine_of
from tts_core.voices.voice_info import VoiceInfo
from ttsq import logs, tracing
from ttsq.batch_bundles import BundleKind, BundleState, m4b_refusal
from ttsq.batches import BatchRecord, new_batch_id
from ttsq.broker import entry_queue, segments_queue
from ttsq.constants import SYNTHESIZE_TASK
from ttsq.errors import QueueBehind, QueueUnavailable, ServiceError, StoreUnavailable, TransientError
from ttsq.estimate import INTERACTIVE_SECONDS_PER_CHAR, estimate_job
from ttsq.job_record import JobRecord, Priority, TextType, new_job_id, utcnow
from ttsq.lexicons import LexiconRef
from ttsq.quotas import Charge, usage_day
from ttsq.settings import Settings
from ttsq.tenants import Tenant

log = logging.getLogger(__name__)

SSML_MARKUP_FACTOR: Final = 10
"""An SSML body may be this many times the character limit in all, markup included."""

SSML_CHARS_PER_TAG: Final = 5
"""An SSML document may have one tag (a ``<``) per this many characters of the limit, and 1,000 in
any case: 200,000 at the default, plenty for a book marked up word by word. Each parsed element
costs the API (and the planning worker) memory, about 120 bytes: ten million characters of
``<s>a</s>`` took the API from 114 to 415 MiB before this bound."""

MIN_SSML_TAGS: Final = 1000

PUBLISH_PIPELINE: Final = 1000
"""Redis commands sent in one round trip when a batch's entry tasks are queued (two per item: the
message and its ``task-sent`` event), so 10,000 items take 20 round trips instead of 20,000."""

ITEM_FIELD_OF_CODE: Final = {
    "voice_not_found": "voice",
    "invalid_option": "speaker",
    "marks_unsupported": "marks",
    "lexicon_refused": "lexicons",
}
"""Which batch item field a refusal names; any other refusal of an item is about its text."""


@dataclass(frozen=True)
class Draft:
    """A job checked and estimated, not yet stored: its record and its text."""

    record: JobRecord
    text: str


@dataclass(frozen=True)
class BatchDraft:
    """A batch checked item by item, not yet stored."""

    batch: BatchRecord
    items: list[Draft]


@dataclass(frozen=True)
class Submitted:
    """What a submission answers with: the id made now, or the one an earlier request with the same
    ``Idempotency-Key`` and body made (``replayed``)."""

    id: str
    replayed: bool


@dataclass(frozen=True)
class Repeatable:
    """A request that may be a repeat: its ``Idempotency-Key`` header (if any) and its body."""

    key: str | None
    body: BaseModel


# --- Drafts ------------------------------------------------------------------------------------


def draft_job(
    state: AppState,
    tenant: Tenant,
    request: JobCreate,
    *,
    stream: bool = False,
    keep: bool = True,
    batch_id: str | None = None,
    ref: str | None = None,
    title: str | None = None,
    draft_lexicon: LexiconRef | None = None,
) -> Draft:
    """The request as a job of the tenant (:func:`read_job`), read in the API's helper processes if
    it is heavy (``api.heavy_work``): long, or using lexicons (a new version is read and checked).
    ``draft_lexicon`` (``LexiconStore.put_draft``) is used first, as a lexicon the job named. The job
    continues the request's trace (read here: a helper process has no request)."""
    work = functools.partial(
        read_job,
        traceparent=tracing.current_traceparent(),
        tenant=tenant,
        request=request,
        stream=stream,
        keep=keep,
        batch_id=batch_id,
        ref=ref,
        title=title,
        draft_lexicon=draft_lexicon,
    )
    heavy = is_heavy(request, state.settings) or draft_lexicon is not None
    return state.heavy.run(tenant.id, heavy, work)


def is_heavy(request: JobCreate, settings: Settings) -> bool:
    """Whether reading the request may cost the API more than its round trip to a helper process."""
    return len(request.text) >= settings.heavy_request_chars or bool(request.lexicons)


def read_job(
    drafting: Drafting,
    *,
    tenant: Tenant,
    request: JobCreate,
    stream: bool,
    keep: bool,
    batch_id: str | None,
    ref: str | None,
    title: str | None,
    draft_lexicon: LexiconRef | None = None,
    traceparent: str | None = None,
) -> Draft:
    """The request as a job of the tenant: voice, text (plain or SSML), what the voice can speak,
    marks, options, the audio estimate (speech and pauses) and the webhook URL, each refused with its
    own code before anything exists."""
    settings = drafting.settings
    voice = request.voice or settings.default_voice
    info = drafting.catalog.get(voice)
    spoken, document = parsed_text(request, info.language, settings.max_text_chars)
    drafting.catalog.check_speakable(voice, spoken)
    check_marks(request, info)
    lexicons = job_lexicons(drafting.lexicons, tenant.id, request.lexicons or [], info, draft_lexicon)
    growth = spoken_growth(drafting.lexicons, tenant.id, lexicons, spoken)
    if growth.characters and len(spoken) + growth.characters > settings.max_text_chars:
        raise TextTooLong(len(spoken) + growth.characters, settings.max_text_chars, written=len(spoken))
    options = request.options(info.speaker_index(request.speaker), lexicons)
    estimate = estimate_job(spoken, document, options, info.engine.value, settings, growth.seconds)
    if request.webhook_url is not None:
        check_webhook_url(request.webhook_url, settings)
    ttl_s = lifetime_s(request.ttl_hours, settings)
    record = JobRecord(
        id=new_job_id(),
        voice=voice,
        format=request.format.value,
        characters=len(spoken),
        charged_characters=len(spoken) + growth.characters,
        options=options,
        metadata=request.metadata,
        created_at=utcnow(),
        priority=request.priority
        or default_priority(len(request.text) + growth.characters, estimate.speech_s * options.speed, settings),
        webhook_url=request.webhook_url,
        text_type=request.text_type,
        stream=stream,
        keep=keep,
        tenant=tenant.id,
        reserved_audio_ms=estimate.audio_ms,
        batch_id=batch_id,
        ref=ref,
        title=title,
        ttl_s=ttl_s,
        traceparent=traceparent,
    )
    return Draft(record, request.text)


def lifetime_s(ttl_hours: int | None, settings: Settings) -> int | None:
    """A job's or batch's own lifetime after it finishes, within the server's (``TTSQ_JOB_TTL_S``)."""
    if ttl_hours is None:
        return None
    longest = settings.job_ttl_s // 3600
    if ttl_hours > longest:
        raise ApiError(
            422, "invalid_request", f"ttl_hours: {ttl_hours} is over this server's {longest} (TTSQ_JOB_TTL_S)"
        )
    return ttl_hours * 3600


def draft_batch(state: AppState, tenant: Tenant, body: BatchCreate) -> BatchDraft:
    """Every item as a bulk job of one new batch; a refusal names the item (``items[3].voice: …``)."""
    limit = state.settings.max_batch_items
    if len(body.items) > limit:
        raise ApiError(422, "invalid_request", f"items: {len(body.items)} items; a batch takes at most {limit}")
    if body.webhook_url is not None:
        check_webhook_url(body.webhook_url, state.settings)
    ttl_s = lifetime_s(body.ttl_hours, state.settings)
    batch_id = new_batch_id()
    items = [_draft_item(state, tenant, body, index, batch_id) for index in range(len(body.items))]
    _check_refs(items)
    kinds = body.bundle or []
    if BundleKind.M4B in kinds and (refusal := m4b_refusal([item.record.format for item in items])):
        raise ApiError(422, "invalid_request", refusal)
    batch = BatchRecord(
        id=batch_id,
        tenant=tenant.id,
        total=len(items),
        characters=sum(item.record.characters for item in items),
        created_at=utcnow(),
        webhook_url=body.webhook_url,
        ttl_s=ttl_s,
        title=body.title,
        bundles={kind: BundleState() for kind in kinds},
    )
    return BatchDraft(batch, items)


def _draft_item(state: AppState, tenant: Tenant, body: BatchCreate, index: int, batch_id: str) -> Draft:
    try:
        request = body.job_request(index)
    except ValidationError as e:  # what only the item and the defaults together get wrong (bitrate for wav)
        raise ApiError(422, "invalid_request", f"items[{index}]: {describe_validation_errors(e.errors())}") from None
    item = body.items[index]
    try:
        return draft_job(state, tenant, request, batch_id=batch_id, ref=item.ref or str(index), title=item.title)
    except (TTSError, ServiceError) as e:
        field = ITEM_FIELD_OF_CODE.get(e.code, "text")
        raise ApiError(422, e.code, f"items[{index}].{field}: {e}") from e


def _check_refs(items: list[Draft]) -> None:
    first: dict[str | None, int] = {}
    for index, item in enumerate(items):
        ref = item.record.ref
        if ref in first:
            message = f"items[{index}].ref: {ref!r} is already the ref of items[{first[ref]}]"
            raise ApiError(422, "invalid_request", message)
        first[ref] = index


def parsed_text(request: JobCreate, language: str, max_chars: int) -> tuple[str, SsmlDocument | None]:
    """What the voice will read: the text itself, or an SSML document's spoken text with the document
    (parsed here, so invalid SSML is refused with its line and column before any job exists). Limits
    count spoken characters; the markup around them may add up to ``SSML_MARKUP_FACTOR`` times as much."""
    if request.text_type is TextType.TEXT:
        check_text(request.text, max_chars)
        return request.text, None
    if len(request.text) > SSML_MARKUP_FACTOR * max_chars:
        raise TextTooLong(len(request.text), SSML_MARKUP_FACTOR * max_chars)
    check_tag_count(request.text, max(max_chars // SSML_CHARS_PER_TAG, MIN_SSML_TAGS))
    document = parse_ssml(request.text, default_lang=language)
    check_text(document.spoken_text, max_chars)
    return document.spoken_text, document


MARKS_NEED: Final[dict[str, str]] = {
    "sentence": "are made for plain text only",
    "word": "need plain text and a voice whose model times its input",
    "phoneme": "need a voice whose model times its phonemes",
    "viseme": "need a voice whose model times its phonemes",
    "ssml": "come from the <mark> elements of SSML, so need text_type ssml",
}
"""Why a kind of mark may be refused, said in the refusal."""


def marks_available(text_type: TextType, engine: SpeechEngine) -> list[MarkType]:
    """The marks a job of this text type can have with a voice of this engine: sentence and word
    marks point at plain text (words need a model that times its input), ssml marks come from SSML,
    phoneme and viseme marks need a model that times its phonemes (plain text or SSML)."""
    kinds: list[MarkType] = ["sentence"] if text_type is TextType.TEXT else ["ssml"]
    if text_type is TextType.TEXT and engine.times_words:
        kinds.append("word")
    if engine.times_phonemes:
        kinds += ["phoneme", "viseme"]
    return kinds


def check_marks(request: JobCreate, voice: VoiceInfo) -> None:
    """Refuse the first kind of mark the job cannot have, naming what it needs and what it can have."""
    allowed = marks_available(request.text_type, engine_of(voice))
    for kind in request.marks:
        if kind not in allowed:
            raise MarksUnsupported(
                f"{kind} marks {MARKS_NEED[kind]}: {voice.id} ({voice.engine.value}) gives {', '.join(allowed)} "
                f"marks only with text_type {request.text_type.value} (the values marks may hold)"
            )


def check_tag_count(source: str, limit: int) -> None:
    """Refuse an SSML document of more than ``limit`` tags before parsing it, naming where the first
    tag past the limit is."""
    if source.count("<") <= limit:
        return
    at = -1
    for _ in range(limit + 1):
        at = source.index("<", at + 1)
    line = source.count("\n", 0, at) + 1
    raise InvalidSsml(
        f"more than {limit} tags (one per {SSML_CHARS_PER_TAG} characters of the limit)",
        line,
        at - source.rfind("\n", 0, at),
    )


def default_priority(characters: int, speech_s: float, settings: Settings) -> Priority:
    """Interactive for a job that speaks little: at most ``interactive_max_chars`` characters, its
    lexicons' pronunciations counted, and at most the speech that many characters of prose with
    numbers make (``INTERACTIVE_SECONDS_PER_CHAR``: digits read as words count); bulk otherwise.
    Judged on what is spoken, not on what is written: a 999-character job of a letter aliased to 200
    characters planned 1,000 segments as interactive and held another tenant's short job 62 s."""
    limit = settings.interactive_max_chars
    small = characters <= limit and speech_s <= limit * INTERACTIVE_SECONDS_PER_CHAR
    return Priority.INTERACTIVE if small else Priority.BULK


# --- Submitting --------------------------------------------------------------------------------


def draft_and_submit(state: AppState, tenant: Tenant, request: JobCreate, *, stream: bool, keep: bool) -> Draft:
    """:func:`draft_job` then :func:`submit_job`, for a caller that waits for both off the event loop:
    one thread hop, not two, on a short answer's path."""
    draft = draft_job(state, tenant, request, stream=stream, keep=keep)
    submit_job(state, tenant, draft)
    return draft


def submit_job(state: AppState, tenant: Tenant, draft: Draft, request: Repeatable | None = None) -> Submitted:
    """Admit, store and queue the job, unless ``request`` repeats an earlier one (then its job)."""
    record = draft.record
    return _once(state, tenant, request, record.id, state.stores.jobs.exists, lambda: _admit_job(state, tenant, draft))


def submit_batch(state: AppState, tenant: Tenant, draft: BatchDraft, request: Repeatable) -> Submitted:
    """Admit the batch whole (its items' characters and estimated audio in one charge, each item
    counting against the active-jobs limit) or refuse it whole; then store and queue every item."""
    batch = draft.batch
    return _once(
        state, tenant, request, batch.id, state.stores.batches.exists, lambda: _admit_batch(state, tenant, draft)
    )


def _once(
    state: AppState,
    tenant: Tenant,
    request: Repeatable | None,
    new_id: str,
    exists: Callable[[str], bool],
    submit: Callable[[], None],
) -> Submitted:
    if request is None:
        submit()
        return Submitted(new_id, replayed=False)
    body = request.body.model_dump(mode="json")
    earlier = submit_once(state.idempotency, tenant.id, request.key, body, new_id, exists, submit)
    return Submitted(earlier, replayed=True) if earlier is not None else Submitted(new_id, replayed=False)


def _admit_job(state: AppState, tenant: Tenant, draft: Draft) -> None:
    with logs.job_context(draft.record.id, tenant.id), _admitted(state, tenant, [draft.record], draft.record.priority):
        _store_and_queue(state, draft)


def _admit_batch(state: AppState, tenant: Tenant, draft: BatchDraft) -> None:
    with _admitted(state, tenant, [item.record for item in draft.items], Priority.BULK):
        _store_and_queue_batch(state, draft)


def queue_age_s(state: AppState, priority: Priority) -> float:
    """Age of the oldest task waiting for work of ``priority`` (producers LPUSH: the tail is oldest),
    over its fixed queues and its model queues of every model of the catalog."""
    queue = state.settings.queue
    queues = {entry_queue(queue, priority), segments_queue(queue, priority)}
    queues.update(segments_queue(queue, priority, model) for model in state.catalog.model_keys())
    with state.stores.redis.pipeline(transaction=False) as pipe:
        for name in sorted(queues):
            pipe.lindex(name, -1)
        tails = pipe.execute()
    now = time.time()
    return max(oldest_age_s(tail, now) for tail in tails)


def check_queue(state: AppState, priority: Priority) -> None:
    settings = state.settings
    limit = (
        settings.admission_max_age_interactive_s
        if priority is Priority.INTERACTIVE
        else settings.admission_max_age_bulk_s
    )
    age = queue_age_s(state, priority)
    if age > limit:
        message = f"the {priority.value} queue is {age:.0f} s behind (limit {limit:.0f} s); retry later"
        raise QueueBehind(message, max(1, math.ceil(min(age - limit, 60))))


@contextlib.contextmanager
def _admitted(state: AppState, tenant: Tenant, records: list[JobRecord], priority: Priority) -> Iterator[None]:
    """Check the queue and admit ``records`` at once against the tenant's limits (charging their
    sum, each to its voice), then run the block; if the block fails, the admission is given back."""
    charges = {r.id: Charge(r.voice, charged_characters(r), r.reserved_audio_ms) for r in records}
    ids = list(charges)
    created_at = records[0].created_at
    try:
        with tracing.span("ttsq.admission", attributes={"ttsq.jobs": len(ids), "ttsq.tenant.id": tenant.id}):
            check_queue(state, priority)
            state.stores.quotas.admit_many(tenant.id, charges, tenant.limits, created_at)
    except redis.RedisError as e:
        raise StoreUnavailable(f"job store unavailable: {e}") from e
    try:
        yield
    except BaseException:
        try:
            state.stores.quotas.release_many(tenant.id, charges, usage_day(created_at))
        except redis.RedisError:  # Redis is the outage: nothing was stored
            log.warning("job %s…: could not release its admission", ids[0])
        raise


def charged_characters(record: JobRecord) -> int:
    """What the job's characters cost its tenant's day: what it speaks, its lexicons' pronunciations counted."""
    return record.characters if record.charged_characters is None else record.charged_characters


def _store_and_queue(state: AppState, draft: Draft) -> None:
    """Store the job, then queue it. A failed write may still have been applied (its answer lost):
    it is taken back, and only if that is confirmed does the 503 say that no job exists; otherwise
    it names the job (:meth:`~ttsq.errors.TransientError.maybe_stored`), which, if it exists, the
    sweeper queues as it queues any job that no message names."""
    record = draft.record
    try:
        state.stores.jobs.create(record, draft.text)
    except redis.RedisError as e:
        raise _taken_back(state, draft, StoreUnavailable(f"job store unavailable: {e}")) from e
    model = state.catalog.model_key(record.voice) if state.settings.model_affinity else None
    queue = entry_queue(state.settings.queue, record.priority, model)
    try:
        state.producer.send_task(SYNTHESIZE_TASK, args=[record.id], task_id=record.id, queue=queue)
    except (OperationalError, redis.RedisError) as e:
        raise _taken_back(state, draft, QueueUnavailable(f"job queue unavailable: {e}")) from e
    state.metrics.submitted.labels(record.voice, record.priority.value).inc()
    log.info(
        "job %s queued: tenant=%s voice=%s format=%s chars=%d priority=%s",
        record.id, record.tenant, record.voice, record.format, record.characters, record.priority.value,
    )  # fmt: skip


def _taken_back(state: AppState, draft: Draft, error: TransientError) -> TransientError:
    """``error``, after removing the job a failed submission may have stored: naming the job when
    the removal fails too (Redis is the outage; the job may exist)."""
    try:
        state.stores.jobs.delete(draft.record)
    except redis.RedisError:
        log.warning("job %s: may be stored; could not take it back", draft.record.id)
        return error.maybe_stored("job", draft.record.id)
    return error


def _store_and_queue_batch(state: AppState, draft: BatchDraft) -> None:
    """If the store or the queue fails part way, everything is removed again: items already queued
    find no record and are dropped by the worker. If the removal fails too, the 503 names the batch,
    which may exist."""
    batch, records = draft.batch, [item.record for item in draft.items]
    try:
        state.stores.batches.create(batch, [record.id for record in records])
        state.stores.jobs.create_many([(item.record, item.text) for item in draft.items])
    except redis.RedisError as e:
        raise _batch_taken_back(state, draft, StoreUnavailable(f"job store unavailable: {e}")) from e
    queue = entry_queue(state.settings.queue, Priority.BULK)
    try:
        # kombu's publish batch pipelines the sends through one producer; a failed flush raises
        # BatchPublishError (some chunks may be queued: they find no record once it is forgotten).
        with state.producer.producer_or_acquire() as producer, producer.batch(PUBLISH_PIPELINE):
            for record in records:
                state.producer.send_task(
                    SYNTHESIZE_TASK, args=[record.id], task_id=record.id, queue=queue, producer=producer
                )
    except (OperationalError, BatchPublishError, redis.RedisError) as e:
        raise _batch_taken_back(state, draft, QueueUnavailable(f"job queue unavailable: {e}")) from e
    for record in records:
        state.metrics.submitted.labels(record.voice, record.priority.value).inc()
    log.info("batch %s queued: tenant=%s items=%d chars=%d", batch.id, batch.tenant, batch.total, batch.characters)


def _batch_taken_back(state: AppState, draft: BatchDraft, error: TransientError) -> TransientError:
    """``error``, after removing what a failed batch submission stored: naming the batch when the
    removal fails too."""
    try:
        for item in draft.items:
            state.stores.jobs.delete(item.record)
        state.stores.batches.delete(draft.batch)
    except redis.RedisError:
        log.warning("batch %s: may be stored, in part; could not take it back", draft.batch.id)
        return error.maybe_stored("batch", draft.batch.id)
    return error
