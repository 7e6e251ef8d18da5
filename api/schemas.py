"""Request and response bodies, in families: ``JobCreate`` in, ``JobPublic`` out (defined in
:mod:`ttsq.public`, since webhooks send it too; ``UsagePublic`` in :mod:`ttsq.usage`, since
``ttsq usage --json`` prints it too)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api.json_checks import MAX_DEPTH, check_body
from tts_core.base.config import DEFAULT_SPEED, NOISE_RANGE, PAUSE_RANGE, SPEED_RANGE
from tts_core.base.errors import UnsupportedFormat
from tts_core.marks.speech_marks import MARK_TYPES, MarkType
from tts_core.mastering.formats import DEFAULT_FORMAT, AudioFormat, AudioOutput
from tts_core.mastering.loudness import TARGET_LUFS_RANGE, TRUE_PEAK_RANGE_DB, LoudnessPreset, loudness_target
from tts_core.text.speech_markup import VOLUME_RANGE_DB
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.batch_bundles import BundleKind
from ttsq.job_record import JobOptions, LexiconUse, LoudnessOption, NormalizeOption, Priority, TextType
from ttsq.public import BatchPublic, JobPublic, JobResultPublic
from ttsq.usage import UsagePublic

MAX_METADATA_BYTES = 16 * 1024
SampleRate = Literal[8000, 16000, 22050, 24000, 44100, 48000]
"""tts_core.mastering.resampling.OUTPUT_RATES, spelled out for the schema (a test keeps them equal)."""
SAMPLE_RATE_DESCRIPTION = (
    "Sample rate of the file (Hz); the voice's if omitted (Opus: the next it has, 24000 for a 22050 Hz voice; "
    "mulaw and alaw: 8000). Opus takes 8000, 16000, 24000 or 48000; mulaw and alaw 8000 only."
)
BITRATE_DESCRIPTION = (
    "Bits per second of an `opus` (6000 to 256000; default 32000), `aac` or `m4a` file (16000 to 320000; "
    "default 64000); refused for the other formats."
)
MAX_WEBHOOK_URL_CHARS = 2048

Speed = Annotated[float, Field(ge=SPEED_RANGE[0], le=SPEED_RANGE[1], strict=True)]
Noise = Annotated[float, Field(ge=NOISE_RANGE[0], le=NOISE_RANGE[1], strict=True)]
VolumeDb = Annotated[float, Field(ge=VOLUME_RANGE_DB[0], le=VOLUME_RANGE_DB[1], strict=True)]
Pause = Annotated[float, Field(ge=PAUSE_RANGE[0], le=PAUSE_RANGE[1], strict=True)]
"""The bounded numbers of a job's options, one definition each for a job and a batch's defaults."""

__all__ = ["JobCreate", "JobPublic", "JobResultPublic", "UsagePublic"]


def named_once(names: list[str]) -> list[str]:
    """Lexicon names, each at most once."""
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"lexicon {repeated[0]!r} is named more than once")
    return names


def marks_once(marks: list[MarkType]) -> list[MarkType]:
    """Each kind of mark at most once."""
    if len(set(marks)) != len(marks):
        raise ValueError("marks names a kind twice")
    return marks


class RequestBody(BaseModel):
    """A JSON request body: unknown fields are refused, and so is what no field's type sees (a lone
    surrogate anywhere, keys included; NaN; nesting past ``MAX_DEPTH``), naming the field."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _check_json(cls, data: Any) -> Any:
        check_body(data)
        return data


class LoudnessRequest(RequestBody):
    """A loudness target for the whole job: a preset, or ``target_lufs`` with an optional ceiling."""

    preset: LoudnessPreset | None = Field(
        None,
        description="podcast: -16 LUFS integrated, -1 dBTP; broadcast (EBU R128): -23 LUFS, -1 dBTP; "
        "audiobook (ACX): RMS -20 dBFS, peaks under -3 dBFS.",
    )
    target_lufs: float | None = Field(
        None,
        ge=TARGET_LUFS_RANGE[0],
        le=TARGET_LUFS_RANGE[1],
        strict=True,
        description="Integrated loudness (ITU-R BS.1770-4) of the whole job, -30 to -10 LUFS.",
    )
    true_peak_db: float | None = Field(
        None,
        ge=TRUE_PEAK_RANGE_DB[0],
        le=TRUE_PEAK_RANGE_DB[1],
        strict=True,
        description="Ceiling of the true peaks with target_lufs, -9 to 0 dBTP; -1 if omitted.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> LoudnessRequest:
        if self.preset is None and self.true_peak_db is not None and self.target_lufs is None:
            raise PydanticCustomError("loudness", "true_peak_db goes with target_lufs, not alone")
        try:
            loudness_target(self.preset, self.target_lufs, self.true_peak_db)
        except ValueError as e:
            raise PydanticCustomError("loudness", "{reason}", {"reason": str(e)}) from None
        return self

    def option(self) -> LoudnessOption:
        return LoudnessOption(preset=self.preset, target_lufs=self.target_lufs, true_peak_db=self.true_peak_db)


LOUDNESS_DESCRIPTION = (
    'Loudness of the whole job: {"preset": "podcast" | "broadcast" | "audiobook"} or '
    '{"target_lufs": -30..-10, "true_peak_db": -9..0}; measured over all of the job\'s audio and applied as '
    "one gain with a true-peak limiter. The voice's own level if omitted; not with volume_db."
)


LEXICON_NAME_PATTERN: Final = r"^[A-Za-z0-9]{1,20}$"
"""A lexicon's name, as Polly allows them: 1 to 20 letters and digits."""
LexiconName = Annotated[str, StringConstraints(pattern=LEXICON_NAME_PATTERN)]
MAX_JOB_LEXICONS: Final = 5
"""Most lexicons one job applies (as Polly)."""
LexiconNames = Annotated[list[LexiconName], Field(max_length=MAX_JOB_LEXICONS), AfterValidator(named_once)]
"""The lexicons a request names: at most five, each once."""
LEXICONS_DESCRIPTION: Final = (
    "Names of your lexicons (PUT /v1/lexicons/{name}) to apply, in order: the first entry of a grapheme wins. "
    f"At most {MAX_JOB_LEXICONS}, each of the voice's language; the version current now is the one used."
)
NORMALIZE_DESCRIPTION: Final = (
    "Text normalisation rules (docs/NORMALIZATION.md): all on by default; false turns them all off, an object "
    'turns single rules off (`{"urls": false}`).'
)


class JobCreate(RequestBody):
    """A synthesis request."""

    text: str = Field(
        description="Text to speak: plain text of 1 to `max_text_chars` characters, or with `text_type: ssml` "
        "an SSML document of up to 10 times as many characters and one tag per 5 of them, its spoken text counting "
        "against the limit.",
        json_schema_extra={"minLength": 1},  # checked by check_text, which names the problem (empty_text)
        examples=["Hello from ttsq."],
    )
    voice: str | None = Field(
        None, description="Voice id from GET /v1/voices; the server default if omitted.", examples=[DEFAULT_VOICE_ID]
    )
    format: AudioFormat = Field(DEFAULT_FORMAT, description="Output container/codec.")
    sample_rate: SampleRate | None = Field(None, description=SAMPLE_RATE_DESCRIPTION)
    bitrate: StrictInt | None = Field(None, description=BITRATE_DESCRIPTION)
    speed: Speed = Field(DEFAULT_SPEED, description="Speaking rate multiplier.")
    noise_scale: Noise | None = Field(None, description="Timbre variation; voice default if omitted.")
    noise_w: Noise | None = Field(None, description="Rhythm variation; voice default if omitted.")
    volume_db: VolumeDb | None = Field(
        None,
        description="Change of the whole job's level in dB (-40 to +12; above 0 a loud voice's peaks may clip); "
        "the voice's own level if omitted. SSML <prosody volume> changes add to it.",
    )
    loudness: LoudnessRequest | None = Field(None, description=LOUDNESS_DESCRIPTION)
    lexicons: LexiconNames | None = Field(None, description=LEXICONS_DESCRIPTION)
    normalize: StrictBool | NormalizeOption | None = Field(None, description=NORMALIZE_DESCRIPTION)
    sentence_pause_s: Pause | None = Field(
        None,
        description="Seconds of silence between sentences; the server's default (0.25) if omitted.",
    )
    paragraph_pause_s: Pause | None = Field(
        None,
        description="Seconds of silence after a paragraph (a blank line in plain text, an SSML <p>); "
        "the server's default (0.6) if omitted.",
    )
    marks: list[MarkType] = Field(
        default_factory=list,
        max_length=len(MARK_TYPES),
        description="Timing marks to store beside the audio, any of `sentence`, `word` (plain text), `phoneme`, "
        "`viseme` (plain text or SSML; word, phoneme and viseme marks need a voice whose model times its input: "
        "Piper) and `ssml` (SSML `<mark>` elements). The result then links `marks.json` (`marks_url`) and "
        "WebVTT and SRT subtitles (`subtitles_url`, `srt_url`).",
    )
    text_type: TextType = Field(
        TextType.TEXT,
        description="text, or ssml: the documented SSML subset (speak, p, s, break, prosody rate, say-as, sub, "
        "phoneme, mark); characters are counted on the spoken text.",
    )
    speaker: Annotated[str, StringConstraints(min_length=1, max_length=200)] | StrictInt | None = Field(
        None,
        description="Speaker of a multi-speaker voice: a name from GET /v1/voices (`speakers`) or its index; "
        "the voice's first speaker if omitted.",
    )
    ttl_hours: StrictInt | None = Field(
        None,
        ge=1,
        description="Hours the job, its audio and its links are kept after it finishes; at most the server's "
        "job lifetime (TTSQ_JOB_TTL_S, 168 h by default), which also applies if omitted (from the job's creation).",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Free-form JSON object stored with the job and returned as is: at most {MAX_METADATA_BYTES} "
        f"bytes as JSON, nested at most {MAX_DEPTH - 1} levels deep.",
    )
    priority: Priority | None = Field(
        None,
        description="interactive (served first) or bulk; by default interactive up to the server's "
        "interactive_max_chars as spoken (lexicons' pronunciations counted, numbers read as words), bulk above.",
    )
    webhook_url: str | None = Field(
        None,
        max_length=MAX_WEBHOOK_URL_CHARS,
        description="http(s) URL that receives a signed job.succeeded / job.failed / job.canceled event "
        "(Standard Webhooks) when the job finishes.",
    )

    @field_validator("marks")
    @classmethod
    def _marks_once(cls, value: list[MarkType]) -> list[MarkType]:
        return marks_once(value)

    @model_validator(mode="after")
    def _output_fits_the_format(self) -> JobCreate:
        try:
            self.output.check()
        except UnsupportedFormat as e:
            raise PydanticCustomError("unsupported_output", "{reason}", {"reason": str(e)}) from None
        return self

    @model_validator(mode="after")
    def _one_level(self) -> JobCreate:
        if self.loudness is not None and self.volume_db is not None:
            raise PydanticCustomError(
                "loudness", "volume_db and loudness both set the job's level: give one (SSML volumes still apply)"
            )
        return self

    @property
    def output(self) -> AudioOutput:
        return AudioOutput(self.format, self.sample_rate, self.bitrate)

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes of JSON")
        return value

    def normalize_option(self) -> NormalizeOption:
        if self.normalize is None or self.normalize is True:
            return NormalizeOption()
        if self.normalize is False:
            return NormalizeOption.model_validate(dict.fromkeys(NormalizeOption.model_fields, False))
        return self.normalize

    def options(self, speaker_id: int | None = None, lexicons: Sequence[LexiconUse] = ()) -> JobOptions:
        """The options as stored, with the speaker resolved to the model's id and the lexicons to
        their versions by the caller."""
        return JobOptions(
            speed=self.speed,
            noise_scale=self.noise_scale,
            noise_w=self.noise_w,
            speaker_id=speaker_id,
            sentence_pause_s=self.sentence_pause_s,
            paragraph_pause_s=self.paragraph_pause_s,
            marks=self.marks,
            sample_rate=self.sample_rate,
            bitrate=self.bitrate,
            volume_db=self.volume_db,
            loudness=None if self.loudness is None else self.loudness.option(),
            lexicons=list(lexicons),
            normalize=self.normalize_option(),
        )


class JobsPublic(BaseModel):
    """A page of jobs, newest first."""

    jobs: list[JobPublic]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last one."""


class VoicePublic(BaseModel):
    """A voice a job may ask for."""

    id: str
    engine: str
    """``piper`` or ``kokoro``."""
    language: str
    sample_rate: int
    quality: str
    num_speakers: int
    speakers: list[str]
    default: bool


class VoicesPublic(BaseModel):
    voices: list[VoicePublic]


class ErrorBody(BaseModel):
    code: str
    message: str
    job_id: str | None = Field(
        None,
        description="A 503 to a submission whose job may have been stored before the outage (the answer to its "
        "write was lost): the job's id, also in `Location`. GET it to learn whether it exists.",
    )
    batch_id: str | None = Field(None, description="As `job_id`, for a batch submission.")


class ErrorPublic(BaseModel):
    """Every error response: a stable code and a message naming the problem."""

    error: ErrorBody


ErrorResponses = dict[int | str, dict[str, object]]
"""A route's documented error answers, as FastAPI's ``responses`` takes them."""


def error_responses(*codes: int) -> ErrorResponses:
    """The OpenAPI entries of these error statuses, each answered as :class:`ErrorPublic`."""
    return {code: {"model": ErrorPublic} for code in codes}


SUBMIT_ERRORS: Final[ErrorResponses] = error_responses(400, 401, 404, 409, 413, 415, 422, 429, 503)
"""What the routes that make and manage jobs and batches may answer besides success."""


class ReadinessPublic(BaseModel):
    status: str
    checks: dict[str, str]


MAX_REF_CHARS = 200
MAX_TITLE_CHARS = 500
"""Longest chapter or book title: a long heading fits, a paragraph pasted by mistake does not."""
Title = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TITLE_CHARS)]


class BatchDefaults(RequestBody):
    """Job fields every item of a batch takes unless it sets its own."""

    voice: str | None = Field(None, description="Voice id from GET /v1/voices.")
    format: AudioFormat | None = Field(None, description="Output container/codec.")
    sample_rate: SampleRate | None = Field(None, description="As a job's `sample_rate`.")
    bitrate: StrictInt | None = Field(None, description="As a job's `bitrate`.")
    speed: Speed | None = None
    noise_scale: Noise | None = None
    noise_w: Noise | None = None
    volume_db: VolumeDb | None = None
    loudness: LoudnessRequest | None = Field(None, description="As a job's `loudness`.")
    lexicons: LexiconNames | None = Field(None, description="As a job's `lexicons`.")
    normalize: StrictBool | NormalizeOption | None = Field(None, description="As a job's `normalize`.")
    sentence_pause_s: Pause | None = None
    paragraph_pause_s: Pause | None = None
    text_type: TextType | None = None
    marks: list[MarkType] | None = Field(None, max_length=len(MARK_TYPES), description="As a job's `marks`.")
    speaker: Annotated[str, StringConstraints(min_length=1, max_length=200)] | StrictInt | None = None

    @field_validator("marks")
    @classmethod
    def _marks_once(cls, value: list[MarkType] | None) -> list[MarkType] | None:
        return None if value is None else marks_once(value)


class BatchItemCreate(BatchDefaults):
    """One item of a batch: a job's text and the fields it sets itself, and the client's reference."""

    text: str = Field(description="As a job's `text`.", json_schema_extra={"minLength": 1})
    metadata: dict[str, Any] | None = Field(None, description="As a job's `metadata`.")
    ref: Annotated[str, StringConstraints(min_length=1, max_length=MAX_REF_CHARS)] | None = Field(
        None, description="The client's reference, unique within the batch; the item's index if omitted."
    )
    title: Title | None = Field(
        None,
        description="The item's chapter title: its file name in the batch's `zip` bundle and its chapter mark in "
        "the `m4b` (`Chapter N` if omitted).",
    )

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes of JSON")
        return value


class BatchCreate(RequestBody):
    """Many jobs at once: admitted whole or refused whole, followed and canceled as one."""

    items: list[BatchItemCreate] = Field(min_length=1, description="At most `max_batch_items` (10,000) items.")
    defaults: BatchDefaults = Field(default_factory=BatchDefaults)
    ttl_hours: StrictInt | None = Field(
        None, ge=1, description="As a job's `ttl_hours`, for the batch, its manifest and every item."
    )
    webhook_url: str | None = Field(
        None,
        max_length=MAX_WEBHOOK_URL_CHARS,
        description="http(s) URL that receives a signed batch.completed (or batch.canceled) event when "
        "every item is finished and the manifest is written.",
    )
    title: Title | None = Field(None, description="The book's title: the `m4b` bundle's title tag and download name.")
    bundle: list[BundleKind] | None = Field(
        None,
        max_length=len(BundleKind),
        description="Whole-book downloads made once every item is finished: `zip` (each succeeded item's audio "
        "with its subtitles and marks) and `m4b` (one AAC audiobook with a chapter mark per item; made only if every "
        "item succeeds; not from `mulaw` or `alaw` items). Shown in the batch's `bundles`.",
    )

    @field_validator("bundle")
    @classmethod
    def _bundle_once(cls, value: list[BundleKind] | None) -> list[BundleKind] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("bundle names a kind twice")
        return value

    def job_request(self, index: int) -> JobCreate:
        """Item ``index`` as the job request it stands for: the defaults, then its own fields; bulk."""
        fields = {
            **self.defaults.model_dump(exclude_none=True),
            **self.items[index].model_dump(exclude_none=True, exclude={"ref", "title"}),
            **({"ttl_hours": self.ttl_hours} if self.ttl_hours is not None else {}),
        }
        return JobCreate.model_validate({**fields, "priority": Priority.BULK})


class BatchesPublic(BaseModel):
    """A page of batches, newest first (without their items)."""

    batches: list[BatchPublic]
    next_cursor: str | None
