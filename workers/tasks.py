"""Celery tasks: thin shells around :mod:`workers.pipeline` deciding what is retried and what fails."""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import redis
from celery import Task
from celery.concurrency import get_implementation
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.solo import TaskPool as SoloPool
from celery.signals import celeryd_after_setup, worker_process_init

from tts_core import TTSError
from ttsq.constants import SYNTHESIZE_TASK
from ttsq.jobs import JobNotFound, JobStore
from ttsq.settings import get_settings
from ttsq.storage import ObjectStore, StorageError
from workers.app import app
from workers.engine import get_engine
from workers.pipeline import JobContext, fail_job, run_job

log = logging.getLogger(__name__)

TRANSIENT_ERRORS = (StorageError, redis.ConnectionError, redis.TimeoutError)
"""Failures worth retrying: the store or Redis may come back. Everything else fails the job at once."""
MAX_RETRIES = 5


@lru_cache
def job_context() -> JobContext:
    """Clients and engine of this process, built once."""
    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=30, socket_connect_timeout=5)
    jobs = JobStore(client, settings.job_ttl_s)
    return JobContext(settings, jobs, ObjectStore(settings.s3), get_engine())


@worker_process_init.connect
def _load_model_in_pool_process(**_: Any) -> None:
    """Prefork children and the solo pool: load once per process, after fork."""
    job_context().engine.warm_up()


@celeryd_after_setup.connect
def _load_model_in_main_process(instance: Any = None, **_: Any) -> None:
    """Thread pools share the main process, which gets no ``worker_process_init``: load here,
    after logging is set up and before the consumer takes its first task."""
    pool = get_implementation(getattr(instance, "pool_cls", "prefork"))
    if not (isinstance(pool, type) and issubclass(pool, PreforkPool | SoloPool)):
        job_context().engine.warm_up()


@app.task(name=SYNTHESIZE_TASK, bind=True, max_retries=MAX_RETRIES)
def synthesize_job(self: Task[[str], dict[str, Any] | None], job_id: str) -> dict[str, Any] | None:
    """Synthesise one job; the message carries only its id."""
    ctx = job_context()
    try:
        record = run_job(job_id, ctx)
    except JobNotFound:
        log.warning("job %s has no record (expired or deleted); dropping task", job_id)
        return None
    except TRANSIENT_ERRORS as e:
        if self.request.retries >= MAX_RETRIES:
            fail_job(job_id, ctx.jobs, e, code="storage_unavailable")
            raise
        raise self.retry(exc=e, countdown=min(60, 2 ** (self.request.retries + 1))) from e
    except TTSError as e:
        log.warning("job %s failed: %s", job_id, e.code)
        fail_job(job_id, ctx.jobs, e)
        return {"status": "failed", "code": e.code}
    except Exception as e:
        log.exception("job %s failed unexpectedly", job_id)
        fail_job(job_id, ctx.jobs, e, code="internal_error")
        raise
    if record is None:
        return None
    return {"status": record.status.value, "duration_s": record.result.duration_s if record.result else None}
