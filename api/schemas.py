"""Request and response bodies, in families: ``JobCreate`` in, ``JobPublic`` out."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tts_core.config import DEFAULT_SPEED, NOISE_RANGE, SPEED_RANGE
from tts_core.formats import DEFAULT_FORMAT, AudioFormat
from ttsq.jobs import JobError, JobOptions, JobProgress, JobRecord, JobResult, JobStatus

MAX_METADATA_BYTES = 16 * 1024


class JobCreate(BaseModel):
    """A synthesis request."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="Text to speak (plain text). Up to the server's character limit.")
    voice: str | None = Field(None, description="Voice id from GET /v1/voices; the server default if omitted.")
    format: AudioFormat = Field(DEFAULT_FORMAT, description="Output container/codec.")
    speed: float = Field(DEFAULT_SPEED, ge=SPEED_RANGE[0], le=SPEED_RANGE[1], description="Speaking rate multiplier.")
    noise_scale: float | None = Field(
        None, ge=NOISE_RANGE[0], le=NOISE_RANGE[1], description="Timbre variation; voice default if omitted."
    )
    noise_w: float | None = Field(
        None, ge=NOISE_RANGE[0], le=NOISE_RANGE[1], description="Rhythm variation; voice default if omitted."
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Free-form JSON object stored with the job and returned as is."
    )

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value)) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes of JSON")
        return value

    def options(self) -> JobOptions:
        return JobOptions(speed=self.speed, noise_scale=self.noise_scale, noise_w=self.noise_w)


class JobResultPublic(JobResult):
    """Finished audio as stored, plus a presigned download URL made when the job is read."""

    url: str


class JobPublic(BaseModel):
    """A job as clients see it."""

    id: str
    status: JobStatus
    voice: str
    format: str
    characters: int
    options: JobOptions
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    progress: JobProgress
    result: JobResultPublic | None
    error: JobError | None
    metadata: dict[str, Any]

    @classmethod
    def from_record(cls, record: JobRecord, url: str | None) -> JobPublic:
        result = None
        if record.result is not None and url is not None:
            result = JobResultPublic(url=url, **record.result.model_dump())
        fields = record.model_dump(exclude={"result", "attempts"})
        return cls(**fields, result=result)


class VoicePublic(BaseModel):
    """A voice a job may ask for."""

    id: str
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


class ErrorPublic(BaseModel):
    """Every error response: a stable code and a message naming the problem."""

    error: ErrorBody


class ReadinessPublic(BaseModel):
    status: str
    checks: dict[str, str]
