"""Errors of the service layer (job records, storage, the queue), each with a stable code.

Exception tree::

    ServiceError
    ├── JobNotFound             no record under that id (never created, or expired)
    ├── SegmentLost             a segment counted as done has no audio (expired or deleted)
    ├── WorkerCrashed           a step stopped its worker too many times without finishing
    ├── StorageRefused          the object store said no for good (AccessDenied, NoSuchBucket...)
    ├── RequestRefused          a request the service will not carry out as asked (e.g. a webhook URL)
    │   └── PlanTooLong         a text plans into more segments than a job may have
    └── TransientError          an outage: retrying later can succeed
        ├── StorageUnavailable  the object store cannot be reached or answers 5xx
        ├── StoreUnavailable    Redis (job records) cannot be reached
        └── QueueUnavailable    the broker refused a task message

``tts_core.errors.TTSError`` is the other root: what synthesis itself refuses or fails at. A failed
job's ``error.code`` is the ``code`` of whichever exception failed it (see :func:`error_code`); HTTP
status codes live in ``api/`` only.
"""

from __future__ import annotations

from typing import Final, Literal

from tts_core.errors import TTSError

INTERNAL_ERROR: Final = "internal_error"
"""Code of a failure that no ttsq error describes (a bug): the worker log has the traceback."""


class ServiceError(Exception):
    """Base class for all errors of the service layer; ``code`` is a stable machine-readable name,
    given with each class (``class JobNotFound(ServiceError, code="job_not_found")``)."""

    code = "service_error"

    def __init_subclass__(cls, code: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = code


class JobNotFound(ServiceError, code="job_not_found"):
    """No record under that id (never created, or expired)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id


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


class TransientError(ServiceError, code="unavailable"):
    """An outage of something ttsq depends on; the same step may succeed later, so it is retried."""


class StorageUnavailable(TransientError, code="storage_unavailable"):
    """The object store cannot be reached, timed out or answered with a server error."""


class StoreUnavailable(TransientError, code="store_unavailable"):
    """Redis, which holds job records, cannot be reached."""


class QueueUnavailable(TransientError, code="queue_unavailable"):
    """The broker did not take a task message."""


def error_code(error: BaseException) -> str:
    """The code a job records for ``error``: its own, or ``internal_error`` for anything unforeseen."""
    if isinstance(error, ServiceError | TTSError):
        return error.code
    return INTERNAL_ERROR
