"""What one synthesis job does, apart from Celery: load, synthesise, encode, upload, record.

Every step is safe to repeat: the S3 key is deterministic and status changes are conditional, so a
redelivered task overwrites its own object and cannot move a finished job.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from tts_core import AudioFormat, SynthesisConfig, TTSError, encode
from ttsq.constants import result_key
from ttsq.jobs import JobError, JobRecord, JobResult, JobStatus, JobStore, utcnow
from ttsq.settings import Settings
from ttsq.storage import ObjectStore
from workers.engine import Engine

log = logging.getLogger(__name__)

_STARTABLE = (JobStatus.QUEUED, JobStatus.RUNNING)


@dataclass(frozen=True)
class JobContext:
    """What a job needs from its worker process."""

    settings: Settings
    jobs: JobStore
    objects: ObjectStore
    engine: Engine


def _mark_started(record: JobRecord) -> dict[str, Any]:
    return {"started_at": record.started_at or utcnow(), "attempts": record.attempts + 1}


def run_job(job_id: str, ctx: JobContext) -> JobRecord | None:
    """Synthesise job ``job_id``; returns the succeeded record, or None if the job was not startable."""
    record = ctx.jobs.transition(job_id, _STARTABLE, JobStatus.RUNNING, _mark_started)
    if record is None:
        log.info("job %s is no longer runnable; skipping", job_id)
        return None
    started = time.perf_counter()
    voice = ctx.engine.voice(record.voice)
    config = SynthesisConfig(
        speed=record.options.speed,
        noise_scale=record.options.noise_scale,
        noise_w=record.options.noise_w,
        sentence_pause_s=ctx.settings.sentence_pause_s,
    )
    pcm = voice.speak(ctx.jobs.text(job_id), config)
    encoded = encode(pcm, voice.sample_rate, AudioFormat.parse(record.format))
    key = result_key(job_id, encoded.format.extension)
    ctx.objects.put(key, encoded.data, encoded.content_type)
    result = JobResult(
        key=key,
        bytes=len(encoded.data),
        duration_s=round(encoded.duration_s, 3),
        sample_rate=encoded.sample_rate,
        content_type=encoded.content_type,
    )
    done = ctx.jobs.transition(
        job_id, (JobStatus.RUNNING,), JobStatus.SUCCEEDED, {"finished_at": utcnow(), "result": result}
    )
    log.info("job %s succeeded: %.2fs of audio in %.2fs", job_id, encoded.duration_s, time.perf_counter() - started)
    return done


def fail_job(job_id: str, jobs: JobStore, error: TTSError | Exception, code: str | None = None) -> None:
    """Record a permanent failure with a stable code; a finished or canceled job is left alone."""
    default_code = error.code if isinstance(error, TTSError) else "internal_error"
    job_error = JobError(code=code or default_code, message=str(error))
    jobs.transition(job_id, _STARTABLE, JobStatus.FAILED, {"finished_at": utcnow(), "error": job_error})
