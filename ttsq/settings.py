"""One settings object for every ttsq process, read from ``TTSQ_*`` environment variables and ``.env``.

Nested groups use ``__``: ``TTSQ_S3__ENDPOINT_URL``, ``TTSQ_WORKER__INTRA_OP_THREADS``.
"""

from __future__ import annotations

import json
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Final, Literal, Self

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tts_core.base.config import DEFAULT_PARAGRAPH_PAUSE_S, DEFAULT_SEGMENT_IDS, DEFAULT_SENTENCE_PAUSE_S, PAUSE_RANGE
from tts_core.base.device import Device, Spinning
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.constants import DEFAULT_QUEUE
from ttsq.lexicons import BYTES_PER_TENANT, VERSIONS_KEPT
from ttsq.secrets_check import SentinelSecrets, production_problems
from ttsq.tenants import DEFAULT_SUBMITS_PER_SECOND, Limits
from ttsq.webhook_signing import parse_secrets

DEFAULT_WEBHOOK_RETRY_SCHEDULE_S: Final = (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)
"""5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h, 8 h: eleven attempts over about a day."""

DEFAULT_WORKER_METRICS_PORT: Final = 9101
DEFAULT_WORKER_METRICS_HOST: Final = "127.0.0.1"
"""Loopback: a worker's metrics and probes stay internal (docs/SECURITY.md) unless a deployment
opens them on purpose, as the containers do for Prometheus and the kubelet's probes."""
DEFAULT_MAX_LOADED_MODELS: Final = 8
"""Models a worker holds at most by default. A Piper medium voice takes about 240 MiB once it has
spoken, the Japanese voices together about 430 MiB (measured on CPU, docs/PERFORMANCE.md): eight
models stay within the 6 GiB the Kubernetes manifests allow a worker."""

REQUEST_BYTES_PER_CHAR: Final = 12
"""Body bytes allowed per character of ``max_text_chars`` when ``max_request_bytes`` is unset: the
longest JSON escape of one character (an emoji as ``\\ud83d\\ude00``), which also covers an SSML
document of ``SSML_MARKUP_FACTOR`` (10) times the characters, mostly ASCII markup."""

REQUEST_OVERHEAD_BYTES: Final = 64 * 1024
"""Room for the other fields of a body (metadata up to 16 KiB, a webhook URL, options)."""

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


DEFAULT_SENTINEL_PORT: Final = 26379
"""Where a sentinel listens when its address names no port (Redis's own default)."""


class SentinelSettings(BaseModel):
    """Redis run by Sentinel: every process asks the sentinels where the master is and follows it
    when they fail over. ``hosts`` and ``master`` together replace ``redis_url``."""

    hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """The sentinels, ``host:port`` (port 26379 where left out), comma-separated or as a JSON list."""
    master: str | None = None
    """The name the sentinels monitor the master by (``sentinel monitor <name> ...``)."""
    password: SecretStr | None = None
    """Password of the Redis master and its replicas (their ``requirepass``)."""
    sentinel_password: SecretStr | None = None
    """Password of the sentinels themselves, where they require one."""
    db: int = Field(0, ge=0)
    """Redis database number on the master."""

    @property
    def enabled(self) -> bool:
        return bool(self.hosts)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The sentinels as ``(host, port)`` pairs."""
        return [sentinel_address(host) for host in self.hosts]

    @field_validator("hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip().startswith("["):
                return json.loads(value)  # as settings_env writes a list
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("hosts")
    @classmethod
    def _check_hosts(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            sentinel_address(host)  # raises, naming the entry
        return hosts

    @model_validator(mode="after")
    def _check_complete(self) -> Self:
        if self.hosts and not self.master:
            raise ValueError(f"{SENTINEL_ENV}HOSTS is set without {SENTINEL_ENV}MASTER (the monitored master's name)")
        if self.master and not self.hosts:
            raise ValueError(f"{SENTINEL_ENV}MASTER is set without {SENTINEL_ENV}HOSTS (the sentinels' addresses)")
        if not self.hosts:  # values, not fields set: children get every field (settings_env), defaults too
            chosen = {
                "password": self.password is not None,
                "sentinel_password": self.sentinel_password is not None,
                "db": self.db != 0,
            }
            given = [name for name, is_set in chosen.items() if is_set]
            if given:
                names = ", ".join(f"{SENTINEL_ENV}{name.upper()}" for name in given)
                raise ValueError(f"{names} set without {SENTINEL_ENV}HOSTS and {SENTINEL_ENV}MASTER")
        return self


SENTINEL_ENV: Final = "TTSQ_REDIS_SENTINEL__"
"""The environment prefix of :class:`SentinelSettings`, for errors that name a variable."""


def sentinel_address(text: str) -> tuple[str, int]:
    """``host:port``, ``host`` or ``[v6-address]:port`` as a pair; a clear error for anything else."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or "]" in port:  # no port (an IPv6 address without one ends in "]")
        host, port = text.strip(), str(DEFAULT_SENTINEL_PORT)
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{SENTINEL_ENV}HOSTS: {text!r} is not a sentinel address (host:port)")
    return host, int(port)


class WorkerSettings(BaseModel):
    """How a worker process runs inference."""

    device: Device = Device.AUTO
    intra_op_threads: int = Field(0, ge=0)
    """ONNX Runtime intra-op threads; 0 lets it use every core."""
    spinning: Spinning = Spinning.AUTO
    """When ONNX Runtime's idle threads spin: ``auto`` (``in_call`` for models whose calls under load
    run on one-thread twins, else ``off``); ``off``; ``in_call`` (within a call: a lone message about
    5 % faster, but calls that meet other work lose more, see docs/PERFORMANCE.md); ``always``
    (between calls too: only for hosts that do nothing else)."""
    concurrency: int | None = Field(None, ge=1)
    """Task threads; default: ``max_batch + 1`` so the next item is ready while results are stored."""
    max_batch: int | None = Field(None, ge=1, le=256)
    """Most segments per inference call; default by provider (CPU 1, CUDA 8), see docs/PERFORMANCE.md."""
    max_wait_ms: float | None = Field(None, ge=0, le=1000)
    """How long the first item waits for company; default by provider (CPU 0, CUDA 10)."""
    parallel_calls: int | None = Field(None, ge=1, le=8)
    """Most inference calls a batcher runs at once where ``max_batch`` is 1; default by provider (CPU 2,
    CUDA 1). A call that begins beside another runs on a one-thread session of its model, loaded
    the first time two calls meet (docs/PERFORMANCE.md, "Two calls at once")."""
    interactive_slot: bool = True
    """A task slot besides ``concurrency`` that takes only interactive messages (same process, same
    model), so an interactive job never waits for a task thread busy with bulk segments."""
    preempt_bulk: bool = True
    """Stop the bulk inference call running when interactive work arrives, and run it again after
    (each call at most once), so an interactive call never shares the cores with a bulk one."""
    preload_voices: list[str] = Field(default_factory=list)
    """Voices loaded at start besides the default one; others load on first use. Their models (and
    the default voice's) are pinned: never evicted."""
    max_loaded_models: int = Field(DEFAULT_MAX_LOADED_MODELS, ge=1)
    """Most models a worker process holds; loading one more evicts the least recently used model that
    no call is using and that is not pinned (voices that are styles or speakers of one model count
    once). Pinned models count too; if they alone exceed this, nothing else stays loaded."""
    check_interval_s: float = Field(30.0, gt=0, le=300)
    """Between two checks of what a working worker needs (its object store answers its credentials,
    its engine runs; ``workers.fitness``); a task that meets a refusal checks at once. A worker that
    cannot do the work takes no message and checks again every 3 s (``UNABLE_RECHECK_S``), taking
    messages within that of being fixed. Each check is one HEAD request to the store."""
    metrics_port: int | None = Field(DEFAULT_WORKER_METRICS_PORT, ge=1, le=65535)
    """Port of the worker's own HTTP server: ``/metrics`` (Prometheus), ``/healthz``, ``/readyz``;
    ``null`` serves none. ``ttsq worker --gpus`` gives its N workers this port and the N-1 above it."""
    metrics_host: str = DEFAULT_WORKER_METRICS_HOST
    """Address that server listens on: loopback by default (``ttsq dev`` always), so that the port stays
    internal; ``0.0.0.0`` in a container, where Prometheus and the probes come from outside it
    (docker-compose.yml and deploy/k8s set it)."""


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
    """The one Redis of a deployment without Sentinel (``redis_sentinel`` set replaces it)."""
    redis_sentinel: SentinelSettings = Field(default_factory=SentinelSettings)
    """Redis behind Sentinel (failover): where set, every ttsq process follows the master it names."""
    s3: S3Settings = Field(default_factory=S3Settings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    voices_dir: Path | None = None
    default_voice: str = DEFAULT_VOICE_ID
    queue: str = DEFAULT_QUEUE
    model_affinity: bool = True
    """Send a bulk job's segments to its model's queue (``<queue>.model.<model>``), which workers that
    hold the model ask for first and others only when they have nothing of their own, so a worker
    rarely loads a model another worker already holds; off: one segment queue for every model."""
    max_text_chars: int = Field(1_000_000, ge=1)
    """Longest text of a job, in characters (of an SSML job: its spoken text); a book of about 16 hours
    of speech. The API holds one request's text at a time; workers plan it, and then hold one segment."""
    max_batch_items: int = Field(10_000, ge=1)
    """Most items one ``POST /v1/batches`` may carry (each item is a job). Their texts together are
    bounded by the request body cap, not by ``max_text_chars`` times this."""
    max_request_bytes: int | None = Field(None, ge=1024)
    """Largest request body the API reads: above it, 413 before any parsing, so that no body can fill
    the API's memory. Unset (``null``): derived from ``max_text_chars`` (:attr:`request_bytes_limit`),
    12 bytes a character plus 64 KiB, 12,065,536 bytes (11.5 MiB) for the default 1,000,000."""
    book_max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    """Largest book file ``POST /v1/books/chapters`` reads (``413 book_too_large`` above): a long novel
    is under 2 MiB as text or EPUB, and most of a bigger EPUB is images, never unpacked. The request
    body cap (:attr:`request_bytes_limit`) applies first, whichever is lower; an EPUB's documents
    may unpack to 64 MiB at most whatever this is (``tts_core.books.epub``)."""
    job_ttl_s: int = Field(7 * 24 * 3600, ge=60)
    sentence_pause_s: float = Field(DEFAULT_SENTENCE_PAUSE_S, ge=PAUSE_RANGE[0], le=PAUSE_RANGE[1])
    paragraph_pause_s: float = Field(DEFAULT_PARAGRAPH_PAUSE_S, ge=PAUSE_RANGE[0], le=PAUSE_RANGE[1])
    """Silence after a paragraph: a blank line of plain text, the end of an SSML ``<p>`` (jobs may set their own)."""
    silence_allowance_s: float = Field(60.0, ge=0)
    silence_ratio: float = Field(1.0, ge=0)
    """A job's pauses together (sentence and paragraph pauses, SSML breaks) may be at most
    ``silence_allowance_s`` plus ``silence_ratio`` times its speech (``tts_core.text.pauses``): a book
    breathes between its sentences (about 0.1 s of pause per second of speech by default), while a
    request of a few characters and a thousand breaks is refused at submit (``too_much_silence``)."""
    segment_max_ids: int = Field(DEFAULT_SEGMENT_IDS, ge=32, le=4096)
    """Phoneme-id budget of a segment, the unit of work of one task."""
    max_job_segments: int = Field(10_000, ge=1)
    """Most segments a job may plan into; past it the job fails (``plan_too_long``) before any
    synthesis. What a job keeps in Redis besides its parts (plan, task messages, done set) grows
    with its segments: 1,000,000 characters of prose make 6,648 (~16 h of speech), but as many
    digits, each read as words, would make about 90,000."""
    part_store: Literal["redis", "s3"] = "redis"
    """Where segment PCM waits for assembly: Redis (fast, costs memory) or S3 under ``tmp/``."""
    part_ttl_s: int = Field(24 * 3600, ge=60)
    """Lifetime of an unassembled part, so a job that dies mid-way leaves nothing behind for long."""
    task_time_limit_s: int = Field(3600, ge=10)
    """Hard limit of one synthesis task."""
    visibility_timeout_s: int = Field(8, ge=3)
    """How long Redis keeps an unacknowledged task before redelivering it. A worker (synthesis or
    service) renews the messages it holds every second (``workers.leases``), so a long step is never
    redelivered while its worker lives, and a dead or frozen worker's steps come back after this long."""
    step_lease_s: int = Field(5, ge=2)
    """Lifetime of a step's claim, renewed every second while the step runs: a step of a worker that
    died or froze is free again this long after its last renewal (before its message comes back)."""
    sweep_interval_s: float = Field(2.0, gt=0)
    """How often the sweeper looks for jobs whose work vanished. One service worker sweeps at a time,
    the one holding the sweeping lease (``workers.sweeping``); a look that finds a job without work
    is confirmed a second later (``SWEEP_CONFIRM_S``)."""
    sweep_lease_s: float = Field(3.0, ge=1)
    """The sweeping lease, renewed every second (or a third of it) by its holder from a thread of its
    own: a service worker that is killed, frozen or cut off stops sweeping, and another takes the
    lease and sweeps this long after its last renewal at most."""
    sweep_grace_s: float = Field(5.0, ge=0)
    """A job created less than this long ago is never taken for stuck (it may be between being
    stored and being queued by its request)."""
    max_requeues: int = Field(3, ge=0, le=100)
    """Times the sweeper re-queues a job's vanished work before failing it as ``stalled``."""
    max_step_starts: int = Field(3, ge=1, le=100)
    """Deliveries of one step of a job that may die with their worker (a crash in native code, a kill,
    memory exhaustion) before the job fails as ``worker_crashed`` instead of being handed to the next
    worker: a poison job costs at most this many worker restarts, never the whole pool."""
    cleanup_interval_s: float = Field(600.0, gt=0)
    """How often expired jobs' objects and stale temporary parts are deleted (``ttsq beat``)."""
    ready_timeout_s: float = Field(2.0, gt=0)
    """How long /readyz waits for Redis, S3 and a worker ping."""
    task_max_retries: int = Field(10, ge=0, le=100)
    """Retries of a job step during an outage of Redis, S3 or the broker, before the job fails. With
    full jitter a wait can be short, so 5 retries could all fall inside a 30 s outage
    (docs/RELIABILITY.md); 10 waits total about 3 minutes on average."""
    task_retry_backoff_max_s: int = Field(60, ge=1)
    """Longest wait between two such retries (exponential backoff with full jitter up to this)."""
    api_url: str = "http://127.0.0.1:8000"
    """Where clients such as ``ttsq say`` reach the API."""
    api_key: SecretStr | None = None
    """The key clients such as ``ttsq say`` send (``ttsq keys create``); none = anonymous."""
    wyoming_api_key: SecretStr | None = None
    """The key whose tenant the Wyoming server (``ttsq wyoming``) speaks as: Wyoming carries no
    credentials, so every client that reaches its port gets this tenant's limits and quotas (bind it
    to a private address). None = the anonymous tenant, refused at start where keys are required."""
    wyoming_max_connections: int = Field(32, ge=1)
    """Connections the Wyoming server holds at once; one more is answered with an error event and
    closed. Each may hold an event of up to the request body cap while reading it, so this bounds the
    server's memory; Home Assistant opens one per request."""
    heavy_request_chars: int = Field(20_000, ge=0)
    """A job of at least this many characters (or naming lexicons), and a lexicon of at least this
    many bytes, is read (checked, split, estimated, parsed) in the API's helper processes at a low
    OS priority (``api.heavy_work``), not on a request thread, where it held the interpreter's lock
    against every other request of the process: another tenant's short job took 0.08-0.18 s to be
    answered instead of 0.01 s. Below it the round trip to a process would only add."""
    heavy_request_processes: int = Field(2, ge=1, le=64)
    """Helper processes of each API process for heavy requests."""
    heavy_processes_at_start: bool = True
    """Start the helper processes with the API, in the background (each imports the text stack, about
    a CPU second), so the first long request does not wait for them. Off, they start with the first
    long request: for short-lived APIs that may never get one (the test suite builds dozens)."""
    heavy_requests_per_tenant: int = Field(2, ge=1)
    """A tenant's heavy requests read at once in one API process; as many more wait (up to 10 s),
    and one past those is answered ``429 heavy_requests_exceeded`` with a ``Retry-After``: one
    tenant cannot fill the helper processes, nor the API's threads, and hold back another's."""
    interactive_max_chars: int = Field(1000, ge=0)
    """Jobs that name no priority run as ``interactive`` up to this many characters as spoken (their
    lexicons' pronunciations counted) and the speech of as many characters of prose with numbers
    (``ttsq.estimate.INTERACTIVE_SECONDS_PER_CHAR``), ``bulk`` above."""
    openai_voices: dict[str, str] = Field(default_factory=dict)
    """OpenAI voice names (``alloy``, ``nova``…) mapped to ttsq voice ids for ``/v1/audio/speech``, as
    JSON (``{"nova": "en_US-joe-medium"}``); names not mapped speak with the default voice."""
    voicevox_api_key: SecretStr | None = None
    """The API key of VOICEVOX-compatible requests that send no ``Authorization`` header (most VOICEVOX
    clients cannot): anyone who reaches the facade speaks as that key's tenant, so set it only where
    the facade's port is private (docs/VOICEVOX.md). A request with a header uses its own key."""
    lexicons_per_tenant: int = Field(100, ge=0)
    """Most lexicons a tenant may store (as Polly's 100 per account and region)."""
    lexicon_max_entries: int = Field(10_000, ge=1)
    """Most entries (lexemes) in one lexicon."""
    lexicon_max_bytes: int = Field(1_048_576, ge=1)
    """Largest lexicon document, in bytes as uploaded."""
    lexicon_versions_kept: int = Field(VERSIONS_KEPT, ge=0)
    """Replaced versions of a lexicon kept for the jobs submitted with them (at most the job TTL); a
    job whose version was dropped fails with ``lexicon_version_gone``."""
    lexicon_bytes_per_tenant: int = Field(BYTES_PER_TENANT, ge=1)
    """Bytes a tenant's lexicons may hold in Redis, replaced versions still kept included (the
    oldest are dropped first); a store past it with the current versions alone is refused."""
    voice_lexicons: dict[str, list[Path]] = Field(default_factory=dict)
    """Lexicons an operator applies to every job of a voice, after the job's own, as JSON mapping
    voice ids to PLS or JSON lexicon files (``{"en_US-joe-medium": ["/etc/ttsq/names.pls"]}``)."""
    webhook_secret: SecretStr | None = None
    """Standard Webhooks signing secret(s), ``whsec_<base64>``; several, space-separated, while one is
    rotated (each delivery is signed with all). Jobs with a ``webhook_url`` are refused without one."""
    webhook_allow_private: bool = False
    """Allow webhook URLs on loopback, private, link-local and other non-public addresses (development)."""
    webhook_connect_timeout_s: float = Field(5.0, gt=0, le=60)
    webhook_timeout_s: float = Field(15.0, gt=0, le=300)
    """Whole delivery attempt, from looking the receiver's name up to the last byte read of the answer
    (its first few KiB at most)."""
    webhook_retry_schedule_s: list[float] = Field(
        default_factory=lambda: [float(d) for d in DEFAULT_WEBHOOK_RETRY_SCHEDULE_S], min_length=0, max_length=50
    )
    """Waits before each retry of a failed delivery (jittered); attempts = len + 1."""
    webhook_concurrency: int = Field(256, ge=1, le=4096)
    """Delivery attempts in flight at once in one service worker's dispatcher (open connections on
    one event loop, not threads: ``ttsq.webhook_dispatch``). Each holds a socket, so keep it well
    under the process's file limit (1,024 by default)."""
    webhook_concurrency_per_tenant: int = Field(32, ge=1, le=4096)
    """Of those, at most this many of one tenant: a tenant whose receivers never answer takes this
    many, and every other tenant's events go on at once."""
    webhook_concurrency_per_receiver: int = Field(8, ge=1, le=4096)
    """Of one tenant's, at most this many to one receiver (``host:port``): its other receivers go on
    while one is slow, and no receiver gets more than this many connections from one tenant's burst."""

    auth_required: bool | None = None
    """Every ``/v1`` request needs an API key (``Authorization: Bearer ttsq_…``); default: true in
    production, false in development, where requests without a known key are the anonymous tenant."""
    default_limits: Limits = Field(default_factory=lambda: Limits(submits_per_second=DEFAULT_SUBMITS_PER_SECOND))
    """Limits of keys that set none of their own, and of the anonymous tenant; unset = no limit.
    Only ``submits_per_second`` has a default, and it binds only while other tenants submit too."""
    admission_max_age_interactive_s: float = Field(60.0, gt=0)
    """New interactive jobs are refused (503, Retry-After) while the oldest interactive task has
    waited longer than this: the queue is already behind, and more work would only wait longer."""
    admission_max_age_bulk_s: float = Field(3600.0, gt=0)
    """The same for bulk jobs, against the oldest bulk entry or segment task."""
    idempotency_ttl_s: int = Field(24 * 3600, ge=60)
    """How long an ``Idempotency-Key`` keeps answering with the job it created."""
    part_redis_max_bytes_per_job: int = Field(32 * 1024 * 1024, ge=0)
    """With ``part_store=redis``, a job's parts past this many bytes go to S3 under ``tmp/`` instead,
    so one long job cannot fill Redis (32 MiB ≈ 12 minutes of 22 kHz audio)."""

    @property
    def request_bytes_limit(self) -> int:
        """The body cap in force: ``max_request_bytes``, or the one ``max_text_chars`` implies."""
        if self.max_request_bytes is not None:
            return self.max_request_bytes
        return REQUEST_BYTES_PER_CHAR * self.max_text_chars + REQUEST_OVERHEAD_BYTES

    @property
    def keys_required(self) -> bool:
        return self.environment == "production" if self.auth_required is None else self.auth_required

    @model_validator(mode="after")
    def _check_consistency(self) -> Self:
        if self.visibility_timeout_s < self.step_lease_s:
            raise ValueError("visibility_timeout_s must be at least step_lease_s")
        if any(delay < 0 for delay in self.webhook_retry_schedule_s):
            raise ValueError("webhook_retry_schedule_s must not contain negative waits")
        if self.webhook_secret is not None:
            parse_secrets(self.webhook_secret.get_secret_value())  # names what is wrong, never the secret
        if self.environment == "production":
            sentinel = self.redis_sentinel
            problems = production_problems(
                redis_url=self.redis_url,
                sentinel=SentinelSecrets(sentinel.password, sentinel.sentinel_password) if sentinel.enabled else None,
                s3_access_key_id=self.s3.access_key_id,
                s3_secret_access_key=self.s3.secret_access_key,
                webhook_secret=self.webhook_secret,
            )
            if problems:
                raise ValueError("; ".join(problems))  # each names a setting, never its value
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
        return json.dumps(value, default=str)  # paths inside (voice_lexicons) as their text
    return str(value)
