"""One settings object for every ttsq process, read from ``TTSQ_*`` environment variables and ``.env``.

Nested groups use ``__``: ``TTSQ_S3__ENDPOINT_URL``, ``TTSQ_WORKER__INTRA_OP_THREADS``.
"""

from __future__ import annotations

import json
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Final, Literal, Self

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tts_core.catalog import DEFAULT_VOICE_ID
from tts_core.config import DEFAULT_PARAGRAPH_PAUSE_S, DEFAULT_SEGMENT_IDS, DEFAULT_SENTENCE_PAUSE_S, PAUSE_RANGE
from tts_core.device import Device
from ttsq.constants import DEFAULT_QUEUE, PLACEHOLDER_SECRETS
from ttsq.webhook_signing import parse_secrets

DEFAULT_WEBHOOK_RETRY_SCHEDULE_S: Final = (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)
"""5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h, 8 h: eleven attempts over about a day."""

DEFAULT_WORKER_METRICS_PORT: Final = 9101

NONE_VALUE = "null"
"""How an environment variable says "None" (pydantic-settings' ``env_parse_none_str``)."""


class S3Settings(BaseModel):
    """Where finished audio goes: any S3-compatible endpoint (AWS S3, MinIO, SeaweedFS)."""

    endpoint_url: str | None = None
    """None means AWS S3 itself."""
    public_endpoint_url: str | None = None
    """Endpoint written into presigned URLs when clients reach the store by another address."""
    bucket: str = "ttsq"
    region: str = "us-east-1"
    access_key_id: str | None = None
    """None lets boto3 find credentials itself (AWS_* variables, instance roles)."""
    secret_access_key: SecretStr | None = None
    addressing_style: Literal["auto", "path", "virtual"] = "path"
    presign_ttl_s: int = Field(3600, ge=1, le=7 * 24 * 3600)
    create_bucket: bool = False
    """Create the bucket at start-up if missing (development)."""


class WorkerSettings(BaseModel):
    """How a worker process runs inference."""

    device: Device = Device.AUTO
    intra_op_threads: int = Field(0, ge=0)
    """ONNX Runtime intra-op threads; 0 lets it use every core."""
    spin_wait: bool = False
    """Let idle ONNX Runtime threads spin between calls (only for hosts that do nothing else)."""
    concurrency: int | None = Field(None, ge=1)
    """Task threads; default: ``max_batch + 1`` so the next item is ready while results are stored."""
    max_batch: int | None = Field(None, ge=1, le=256)
    """Most segments per inference call; default by provider (CPU 1, CUDA 8), see docs/PERFORMANCE.md."""
    max_wait_ms: float | None = Field(None, ge=0, le=1000)
    """How long the first item waits for company; default by provider (CPU 0, CUDA 10)."""
    preload_voices: list[str] = Field(default_factory=list)
    """Voices loaded at start besides the default one; others load on first use."""
    metrics_port: int | None = Field(DEFAULT_WORKER_METRICS_PORT, ge=1, le=65535)
    """Port of the worker's own HTTP server: ``/metrics`` (Prometheus), ``/healthz``, ``/readyz``;
    ``null`` serves none. ``ttsq worker --gpus`` gives its N workers this port and the N-1 above it."""


class Settings(BaseSettings):
    """Every knob of a ttsq deployment."""

    model_config = SettingsConfigDict(
        env_prefix="TTSQ_",
        env_file=".env",
        env_nested_delimiter="__",
        env_parse_none_str=NONE_VALUE,
        extra="ignore",
        hide_input_in_errors=True,  # errors name the setting, never echo a secret
    )

    environment: Literal["development", "production"] = "development"
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per log line, with the job id on every line of a job's work and the
    request id on every line of an API request (for log collectors)."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    s3: S3Settings = Field(default_factory=S3Settings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    voices_dir: Path | None = None
    default_voice: str = DEFAULT_VOICE_ID
    queue: str = DEFAULT_QUEUE
    max_text_chars: int = Field(100_000, ge=1)
    job_ttl_s: int = Field(7 * 24 * 3600, ge=60)
    sentence_pause_s: float = Field(DEFAULT_SENTENCE_PAUSE_S, ge=PAUSE_RANGE[0], le=PAUSE_RANGE[1])
    paragraph_pause_s: float = Field(DEFAULT_PARAGRAPH_PAUSE_S, ge=PAUSE_RANGE[0], le=PAUSE_RANGE[1])
    """Silence at the end of an SSML ``<p>``."""
    segment_max_ids: int = Field(DEFAULT_SEGMENT_IDS, ge=32, le=4096)
    """Phoneme-id budget of a segment, the unit of work of one task."""
    part_store: Literal["redis", "s3"] = "redis"
    """Where segment PCM waits for assembly: Redis (fast, costs memory) or S3 under ``tmp/``."""
    part_ttl_s: int = Field(24 * 3600, ge=60)
    """Lifetime of an unassembled part, so a job that dies mid-way leaves nothing behind for long."""
    task_time_limit_s: int = Field(3600, ge=10)
    """Hard limit of one synthesis task."""
    visibility_timeout_s: int = Field(7200, ge=10)
    """How long Redis keeps an unacknowledged task before redelivering it; must exceed the task limit."""
    ready_timeout_s: float = Field(2.0, gt=0)
    """How long /readyz waits for Redis, S3 and a worker ping."""
    task_max_retries: int = Field(5, ge=0, le=100)
    """Retries of a job step during an outage of Redis, S3 or the broker, before the job fails."""
    task_retry_backoff_max_s: int = Field(60, ge=1)
    """Longest wait between two such retries (exponential backoff with full jitter up to this)."""
    api_url: str = "http://127.0.0.1:8000"
    """Where clients such as ``ttsq say`` reach the API."""
    interactive_max_chars: int = Field(1000, ge=0)
    """Jobs that name no priority run as ``interactive`` up to this many characters, ``bulk`` above."""
    openai_voices: dict[str, str] = Field(default_factory=dict)
    """OpenAI voice names (``alloy``, ``nova``…) mapped to ttsq voice ids for ``/v1/audio/speech``, as
    JSON (``{"nova": "en_US-joe-medium"}``); names not mapped speak with the default voice."""
    webhook_secret: SecretStr | None = None
    """Standard Webhooks signing secret(s), ``whsec_<base64>``; several, space-separated, while one is
    rotated (each delivery is signed with all). Jobs with a ``webhook_url`` are refused without one."""
    webhook_allow_private: bool = False
    """Allow webhook URLs on loopback, private, link-local and other non-public addresses (development)."""
    webhook_connect_timeout_s: float = Field(5.0, gt=0, le=60)
    webhook_timeout_s: float = Field(15.0, gt=0, le=300)
    """Whole delivery attempt, from connecting to the last byte of the answer."""
    webhook_retry_schedule_s: list[float] = Field(
        default_factory=lambda: [float(d) for d in DEFAULT_WEBHOOK_RETRY_SCHEDULE_S], min_length=0, max_length=50
    )
    """Waits before each retry of a failed delivery (jittered); attempts = len + 1."""
    webhook_concurrency: int = Field(16, ge=1, le=512)
    """Threads of a webhook delivery worker: receivers are slow I/O, not CPU."""

    @model_validator(mode="after")
    def _check_consistency(self) -> Self:
        if self.visibility_timeout_s <= self.task_time_limit_s:
            raise ValueError("visibility_timeout_s must be larger than task_time_limit_s")
        if self.environment == "production":
            secret = self.s3.secret_access_key
            if secret is not None and secret.get_secret_value() in PLACEHOLDER_SECRETS:
                raise ValueError("TTSQ_S3__SECRET_ACCESS_KEY is a placeholder; set a real secret in production")
        if any(delay < 0 for delay in self.webhook_retry_schedule_s):
            raise ValueError("webhook_retry_schedule_s must not contain negative waits")
        if self.webhook_secret is not None:
            parse_secrets(self.webhook_secret.get_secret_value())  # names what is wrong, never the secret
        return self


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()


def settings_env(settings: Settings) -> dict[str, str]:
    """Every setting as the ``TTSQ_*`` variable a child process reads, so children see the same
    configuration whole, whichever source (environment, ``.env``, code) each value came from."""
    env: dict[str, str] = {}

    def add(model: BaseModel, prefix: str) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                add(value, f"{prefix}{name.upper()}__")
            else:
                env[f"{prefix}{name.upper()}"] = _env_value(value)

    add(settings, "TTSQ_")
    return env


def _env_value(value: object) -> str:
    if value is None:
        return NONE_VALUE
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool | list | dict):
        return json.dumps(value)
    return str(value)
