"""Names and numbers that the API, the workers and operators must agree on."""

from __future__ import annotations

from typing import Final

KEY_PREFIX: Final = "ttsq"
"""Prefix of every Redis key ttsq writes, so a shared Redis stays readable."""

SYNTHESIZE_TASK: Final = "ttsq.synthesize_job"
"""Celery task name; its only argument is the job id (user text never travels in task messages)."""

DEFAULT_QUEUE: Final = "tts"
"""Celery queue the API sends synthesis tasks to and workers consume."""

RESULT_KEY_TEMPLATE: Final = "jobs/{job_id}/audio.{ext}"
"""S3 key of a job's audio; deterministic so a redelivered task overwrites instead of duplicating."""

DEV_S3_ACCESS_KEY: Final = "ttsq-dev"
DEV_S3_SECRET_KEY: Final = "ttsq-dev-secret"
"""Credentials of the embedded SeaweedFS in development; refused outside development."""

PLACEHOLDER_SECRETS: Final = frozenset({"", "changeme", "change-me", "changethis", DEV_S3_SECRET_KEY})
"""Secret values the settings refuse when ``environment`` is ``production``."""


def job_key(job_id: str) -> str:
    return f"{KEY_PREFIX}:job:{job_id}"


def job_text_key(job_id: str) -> str:
    """The text lives apart from the record so status reads never carry it."""
    return f"{KEY_PREFIX}:job:{job_id}:text"


def result_key(job_id: str, extension: str) -> str:
    return RESULT_KEY_TEMPLATE.format(job_id=job_id, ext=extension)
