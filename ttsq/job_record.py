"""A job's record: its statuses, options, progress, result and error, as stored and as every
process reads it (pure data; the store that writes it is ``ttsq.job_store``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool

from tts_core.base.config import DEFAULT_SPEED
from tts_core.marks.speech_marks import MarkType
from tts_core.mastering.formats import AudioFormat, AudioOutput
from tts_core.mastering.loudness import LoudnessPreset, LoudnessTarget, loudness_target
from ttsq.tenants import ANONYMOUS_TENANT
from ttsq.tracing import trace_id_of


class JobStatus(StrEnum):
    """Lifecycle of a job: queued → running → succeeded | failed (| canceled)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """Whether the job is finished for good: nothing will change it any more."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES: Final = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED})
"""Statuses a job never leaves."""


class Priority(StrEnum):
    """Which work a worker takes first: interactive jobs (the speech endpoint, short texts, jobs
    that ask) go ahead of bulk ones (long texts, batches) at the queue and in the batcher."""

    INTERACTIVE = "interactive"
    BULK = "bulk"


class TextType(StrEnum):
    """How a job's text is read: as plain text, or as the SSML subset of ``tts_core.text.speech_markup``."""

    TEXT = "text"
    SSML = "ssml"


class WebhookState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    """Every attempt failed, or the receiver refused the event for good (4xx)."""


class WebhookDelivery(BaseModel):
    """Where the delivery of a finished job's webhook event stands."""

    event: str
    """``job.succeeded``, ``job.failed`` or ``job.canceled``."""
    state: WebhookState = WebhookState.PENDING
    attempts: int = 0
    last_status: int | None = None
    """HTTP status of the last attempt; None if it got no answer."""
    last_error: str | None = None
    next_attempt_at: datetime | None = None


class LoudnessOption(BaseModel):
    """A job's loudness target as it was asked for: a preset, or an integrated loudness with a ceiling."""

    preset: LoudnessPreset | None = None
    target_lufs: float | None = None
    true_peak_db: float | None = None

    def target(self) -> LoudnessTarget:
        return loudness_target(self.preset, self.target_lufs, self.true_peak_db)


class LexiconUse(BaseModel):
    """A lexicon as a job applies it: its name and the version current when the job was submitted."""

    name: str
    version: int


class NormalizeOption(BaseModel):
    """Which text normalisation rules a job applies (``tts_core.text.normalization``); all on by default."""

    model_config = ConfigDict(extra="forbid")  # a misspelt rule is refused, not ignored

    urls: StrictBool = True
    emails: StrictBool = True
    phones: StrictBool = True
    units: StrictBool = True
    currency: StrictBool = True
    ordinals: StrictBool = True
    years: StrictBool = True
    times: StrictBool = True
    abbreviations: StrictBool = True
    numbers: StrictBool = True


class JobOptions(BaseModel):
    """Synthesis options as the job was accepted (validated, defaults filled)."""

    speed: float = DEFAULT_SPEED
    noise_scale: float | None = None
    noise_w: float | None = None
    speaker_id: int | None = None
    """Model speaker id of a multi-speaker voice (resolved from the request's name or index)."""
    sentence_pause_s: float | None = None
    """Silence between sentences; None: the server's ``TTSQ_SENTENCE_PAUSE_S``."""
    paragraph_pause_s: float | None = None
    """Silence after a paragraph (a blank line, an SSML ``<p>``); None: ``TTSQ_PARAGRAPH_PAUSE_S``."""
    marks: list[MarkType] = Field(default_factory=list)
    """Timing marks to store beside the audio (with subtitles); none by default."""
    sample_rate: int | None = None
    """The file's sample rate; None: the voice's (where the format has it)."""
    volume_db: float | None = None
    """A change of the whole job's level, in dB; None: the voice's own."""
    bitrate: int | None = None
    """Bits per second of an Opus or AAC file; None: the format's default for speech."""
    loudness: LoudnessOption | None = None
    """Where the whole job's level lands (one gain and a true-peak limiter); None: the voice's own."""
    lexicons: list[LexiconUse] = Field(default_factory=list)
    """The tenant's lexicons the job applies, in order (the first entry of a grapheme wins), each at
    the version it was submitted with."""
    normalize: NormalizeOption = Field(default_factory=NormalizeOption)
    """Text normalisation rules applied to the job's text (lexicon entries win where both apply)."""


class JobResult(BaseModel):
    """Where and what the finished audio is; the presigned URL is added when the record is read."""

    key: str
    bytes: int
    duration_s: float
    sample_rate: int
    content_type: str
    marks_key: str | None = None
    """``marks.json`` (sentence and/or word marks), if the job asked for marks."""
    subtitles_key: str | None = None
    """WebVTT subtitles, made with the marks."""
    srt_key: str | None = None
    """The same subtitles as SubRip."""

    def keys(self) -> list[str]:
        """Every object stored for the job."""
        return [k for k in (self.key, self.marks_key, self.subtitles_key, self.srt_key) if k is not None]


class JobError(BaseModel):
    """Why a job failed: a stable code and a human message."""

    code: str
    message: str


class JobProgress(BaseModel):
    """How far a job got and what it cost; timings are filled as the work happens."""

    segments_total: int | None = None
    """Known once the worker has planned the job."""
    segments_done: int = 0
    queued_ms: int | None = None
    """From acceptance to the first worker picking the job up."""
    synthesis_ms: int | None = None
    """Model time spent on this job (a batched call is shared among its items by length)."""
    audio_s: float | None = None
    """Seconds of speech produced so far (final: the whole object, pauses included)."""
    rtf: float | None = None
    """Real-time factor: synthesis time over audio time (lower is faster)."""

    def with_sums(self, done: int, synthesis_ms: int, audio_s: float) -> JobProgress:
        """The same progress with new running sums and the rtf they imply."""
        rtf = round(synthesis_ms / 1000 / audio_s, 4) if audio_s > 0 else None
        changes = {"segments_done": done, "synthesis_ms": synthesis_ms, "audio_s": round(audio_s, 3), "rtf": rtf}
        return self.model_copy(update=changes)


class JobRecord(BaseModel):
    """Everything ttsq keeps about one job, except its text."""

    id: str
    status: JobStatus = JobStatus.QUEUED
    voice: str
    format: str
    characters: int
    options: JobOptions = Field(default_factory=JobOptions)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: int = 0
    progress: JobProgress = Field(default_factory=JobProgress)
    result: JobResult | None = None
    """The stored audio; None until success, and after success for a streamed job told not to keep it."""
    error: JobError | None = None
    priority: Priority = Priority.BULK
    webhook_url: str | None = None
    webhook: WebhookDelivery | None = None
    """Set when the job finishes, if it has a ``webhook_url``."""
    stream: bool = False
    """The API streams this job's audio from its parts as they are counted (the speech endpoint):
    even a one-segment job stores its part, and parts are left for the API to read and delete."""
    keep: bool = True
    """Store the audio object; only a streamed job may do without."""
    text_type: TextType = TextType.TEXT
    """``ssml``: the stored text is SSML; ``characters`` counts its spoken text, not the markup."""
    charged_characters: int | None = None
    """Characters charged to the tenant's day: ``characters`` with what the job's lexicons may add
    (``ttsq.lexicon_growth``); None (jobs stored before): ``characters``."""
    tenant: str = ANONYMOUS_TENANT
    """Who owns the job: the tenant of the API key that submitted it."""
    reserved_audio_ms: int = 0
    """Audio charged to the tenant's day while the job runs (estimated at submit, then planned);
    replaced by the audio delivered when the job finishes."""
    requeues: int = 0
    """Times the sweeper found the job's work vanished and queued it again."""
    purged_at: datetime | None = None
    """When the job's stored objects were deleted (``DELETE`` of a finished job)."""
    batch_id: str | None = None
    """The batch this job is an item of (``POST /v1/batches``), if any."""
    ref: str | None = None
    """The client's reference of a batch item, unique within its batch."""
    title: str | None = None
    """A batch item's chapter title: its name in the batch's zip, its chapter mark in the m4b."""
    ttl_s: int | None = None
    """How long the job is kept after it finishes (``ttl_hours``); None: ``TTSQ_JOB_TTL_S`` from its creation."""
    traceparent: str | None = None
    """The W3C context of the request that submitted the job (``ttsq.tracing``): every step whose
    message carries none continues its trace from here, so a job keeps one trace through requeues
    and redeliveries. None: submitted without tracing and without a caller's ``traceparent``."""
    _completes_batch: bool = PrivateAttr(default=False)
    _stored: bytes | None = PrivateAttr(default=None)
    """The record's JSON exactly as the job store read or wrote it (None: not from the store): a
    write based on this record then checks that nothing changed it meanwhile, in one round trip
    (``JobStore.transition_by``'s ``known``)."""

    @property
    def output(self) -> AudioOutput:
        """The file the job makes: its format, with the sample rate and bit rate it asked for."""
        return AudioOutput(AudioFormat.parse(self.format), self.options.sample_rate, self.options.bitrate)

    @property
    def trace_id(self) -> str | None:
        """The job's trace id (32 hex digits), as clients and log lines name it."""
        return trace_id_of(self.traceparent)

    @property
    def stored(self) -> bytes | None:
        """See ``_stored``."""
        return self._stored

    def as_stored(self, raw: bytes) -> JobRecord:
        """This record, remembered as stored as ``raw`` (the job store's reads and writes)."""
        self._stored = raw
        return self

    @property
    def completes_batch(self) -> bool:
        """Whether the write that returned this record was the terminal status of its batch's last
        unfinished item: its caller sends the batch's finishing task (``ttsq.finish_batch``)."""
        return self._completes_batch


WEBHOOK_EVENTS: Final = {
    JobStatus.SUCCEEDED: "job.succeeded",
    JobStatus.FAILED: "job.failed",
    JobStatus.CANCELED: "job.canceled",
}
"""The webhook event type announcing each terminal status."""


def finish_changes(record: JobRecord, status: JobStatus) -> dict[str, Any]:
    """What every terminal transition writes besides its own changes: the finish time, and a pending
    webhook delivery if the job has a receiver (queued by the same write, :func:`_settle`)."""
    changes: dict[str, Any] = {"finished_at": utcnow()}
    if record.webhook_url:
        changes["webhook"] = WebhookDelivery(event=WEBHOOK_EVENTS[status])
    return changes


def expiry_of(created_at: datetime, finished_at: datetime | None, ttl_s: int | None, default_ttl_s: int) -> float:
    """When a finished job's (or batch's) record and objects go (Unix seconds): ``ttl_s`` after it
    finished where it asked for its own lifetime, never later than ``default_ttl_s`` from its creation."""
    latest = created_at.timestamp() + default_ttl_s
    if ttl_s is None:
        return latest
    return min((finished_at or utcnow()).timestamp() + ttl_s, latest)


def new_job_id() -> str:
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)
