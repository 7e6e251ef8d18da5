"""Errors of the service layer (job records, storage, the queue), each with a stable code.

Exception tree (the HTTP status the API gives each is decided in ``api/errors.py`` alone)::

    ServiceError
    ├── JobNotFound             no record under that id (never created, expired, another tenant's)
    ├── BatchNotFound           no batch under that id (never created, expired, another tenant's)
    ├── TenantNotFound          no tenant (API key) with that id or name
    ├── LexiconNotFound         no lexicon of that name (never stored, deleted, another tenant's)
    │   └── LexiconVersionGone  the version a job was submitted with is no longer kept
    ├── SegmentLost             a segment counted as done has no audio (expired or deleted)
    ├── WorkerCrashed           a step stopped its worker too many times without finishing
    ├── Stalled                 a job's work vanished more often than the sweeper re-queues it
    ├── StorageRefused          the object store said no for good (AccessDenied, NoSuchBucket...)
    ├── Unauthorized            no API key, or an unknown or revoked one, where keys are required
    ├── QuotaExceeded           a tenant's limit does not allow the request now
    ├── IdempotencyConflict     an Idempotency-Key used again with another request body
    ├── IdempotencyInFlight     the first request with that key and body is still being handled
    ├── RequestRefused          a request the service will not carry out as asked
    │   ├── PlanTooLong         a text plans into more segments than a job may have
    │   ├── WebhookUrlRefused   a webhook URL ttsq will not send to
    │   ├── InvalidCursor       a list cursor that no page gave out
    │   ├── LexiconRefused      a lexicon a job cannot use, or one past the tenant's limits
    │   └── InvalidIdempotencyKey  an empty, over-long or non-ASCII Idempotency-Key
    └── TransientError          an outage: retrying later can succeed (``unconfirmed``: what a
        │                       submission cut off by it may have stored)
        ├── StorageUnavailable  the object store cannot be reached or answers 5xx
        ├── StoreUnavailable    Redis (job records) cannot be reached
        ├── QueueUnavailable    the broker refused a task message
        └── QueueBehind         the queue is too far behind to take more work now

``tts_core.base.errors.TTSError`` is the other root: what synthesis itself refuses or fails at. A failed
job's ``error.code`` is the ``code`` of whichever exception failed it (see :func:`error_code`); HTTP
status codes live in ``api/`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, Self

from tts_core.base.errors import TTSError, rebuilt

INTERNAL_ERROR: Final = "internal_error"
"""Code of a failure that no ttsq error describes (a bug): the worker log has the traceback."""


class ServiceError(Exception):
    """Base class for all errors of the service layer; ``code`` is a stable machine-readable name,
    given with each class (``class JobNotFound(ServiceError, code="job_not_found")``)."""

    code = "service_error"

    def __init_subclass__(cls, code: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt, (type(self), self.args, self.__dict__)


class JobNotFound(ServiceError, code="job_not_found"):
    """No record under that id (never created, or expired)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id


class BatchNotFound(ServiceError, code="batch_not_found"):
    """No batch under that id (never created, expired, or another tenant's)."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"no batch with id {batch_id!r}")
        self.batch_id = batch_id


class LexiconNotFound(ServiceError, code="lexicon_not_found"):
    """No lexicon of that name for this tenant (never stored, deleted, or another tenant's)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no lexicon named {name!r}")
        self.name = name


class LexiconVersionGone(LexiconNotFound, code="lexicon_version_gone"):
    """The version of a lexicon a job was submitted with is no longer stored: replaced more than
    ``TTSQ_LEXICON_VERSIONS_KEPT`` times since, dropped for the tenant's
    ``TTSQ_LEXICON_BYTES_PER_TENANT``, or past the job TTL."""

    def __init__(self, name: str, version: int) -> None:
        ServiceError.__init__(
            self,
            f"lexicon {name!r} version {version} is no longer kept (replaced more than "
            "TTSQ_LEXICON_VERSIONS_KEPT times since, or dropped for TTSQ_LEXICON_BYTES_PER_TENANT); submit again",
        )
        self.name = name
        self.version = version


class TenantNotFound(ServiceError, code="tenant_not_found"):
    """No tenant with that id or name."""


class Stalled(ServiceError, code="stalled"):
    """The job's work vanished more often than the sweeper re-queues it."""


class Unauthorized(ServiceError, code="unauthorized"):
    """No API key, or one that is unknown or revoked, where keys are required."""


class QuotaExceeded(ServiceError, code="quota_exceeded"):
    """A tenant's limit does not allow this request now; ``retry_after_s`` says when it may. The code
    names the limit (``<limit>_exceeded``)."""

    def __init__(self, limit: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.code = f"{limit}_exceeded"
        self.retry_after_s = retry_after_s


class IdempotencyConflict(ServiceError, code="idempotency_conflict"):
    """The key was used with another request body."""


class IdempotencyInFlight(ServiceError, code="idempotency_in_flight"):
    """The first request with this key and body is still being handled; retry after a moment."""

    def __init__(self, waited_s: float, retry_after_s: int) -> None:
        super().__init__(
            f"the first request with this Idempotency-Key is still being handled after {waited_s:g} s; "
            f"retry after {retry_after_s} s to get its answer"
        )
        self.retry_after_s = retry_after_s


class SegmentLost(ServiceError, code="segment_lost"):
    """A segment counted as done, or planned, has no stored data (expired or deleted)."""


class RequestRefused(ServiceError, code="request_refused"):
    """The request asks for something the service will not do (the API answers 422); subclasses
    name what, such as ``ttsq.webhook_guard.WebhookUrlRefused``."""


class PlanTooLong(RequestRefused, code="plan_too_long"):
    """The text plans into more segments than ``max_job_segments``: what a job keeps in Redis (its
    plan, its task messages, its done set) grows with its segments, so their number is bounded."""

    def __init__(self, segments: int, limit: int, how: Literal["planned", "stopped", "estimated"] = "planned") -> None:
        planned = {
            "planned": f"plans into {segments} segments",
            "stopped": f"plans into more than {limit} segments (planning stopped there)",
            "estimated": f"would plan into at least {segments} segments (its digits alone)",
        }[how]
        super().__init__(
            f"the text {planned}; a job may have at most {limit} (TTSQ_MAX_JOB_SEGMENTS): split it into several jobs"
        )
        self.segments = segments
        self.limit = limit


class WebhookUrlRefused(RequestRefused, code="webhook_url_refused"):
    """A webhook URL ttsq will not send to; the message names the reason."""


class LexiconRefused(RequestRefused, code="lexicon_refused"):
    """A job names a lexicon it cannot use (unknown, of another language than its voice, more than
    allowed, an entry the voice cannot say), or a lexicon would pass the tenant's limits; the message
    names which."""


class InvalidCursor(RequestRefused, code="invalid_cursor"):
    """A list cursor that no page of this API gave out."""


class InvalidIdempotencyKey(RequestRefused, code="invalid_idempotency_key"):
    """The header is empty, too long or not printable ASCII."""


class WorkerCrashed(ServiceError, code="worker_crashed"):
    """A step of the job was started ``max_step_starts`` times and its worker stopped each time
    before the step ended (a crash in native code, a kill, memory exhaustion): the job fails instead
    of taking the next worker down with it. Celery keeps no count across a crash, so ttsq keeps its
    own per step (``JobStore.step_started``)."""

    def __init__(self, step: str, crashed: int) -> None:
        super().__init__(
            f"the job's {step} step stopped its worker {crashed} times without finishing (a crash, a kill "
            "or memory exhaustion); it is not handed to another worker"
        )
        self.step = step
        self.crashed = crashed


class StorageRefused(ServiceError, code="storage_refused"):
    """The object store refused the request in a way that retrying cannot fix: wrong credentials,
    no such bucket, no permission. The operator has to change the configuration."""


@dataclass(frozen=True)
class Unconfirmed:
    """A job or batch whose store write was sent but whose outcome is unknown (the answer was lost,
    or taking it back failed): it may exist. Its id was fixed before the write, so the API can name
    it in its 503 and the client can look it up instead of submitting a second one."""

    kind: Literal["job", "batch"]
    id: str


class TransientError(ServiceError, code="unavailable"):
    """An outage of something ttsq depends on; the same step may succeed later, so it is retried."""

    unconfirmed: Unconfirmed | None = None
    """Set by a submission whose write may have been applied before the outage cut it off; ``None``
    when nothing was stored (refused before writing, or what was written was taken back)."""

    def maybe_stored(self, kind: Literal["job", "batch"], stored_id: str) -> Self:
        """This error, naming the job or batch the failed submission may have stored."""
        self.unconfirmed = Unconfirmed(kind, stored_id)
        return self


class StorageUnavailable(TransientError, code="storage_unavailable"):
    """The object store cannot be reached, timed out or answered with a server error."""


class StoreUnavailable(TransientError, code="store_unavailable"):
    """Redis, which holds job records, cannot be reached."""


class QueueUnavailable(TransientError, code="queue_unavailable"):
    """The broker did not take a task message."""


class QueueBehind(TransientError, code="queue_behind"):
    """The oldest waiting task of the job's class is older than the admission threshold."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def error_code(error: BaseException) -> str:
    """The code a job records for ``error``: its own, or ``internal_error`` for anything unforeseen."""
    if isinstance(error, ServiceError | TTSError):
        return error.code
    return INTERNAL_ERROR
