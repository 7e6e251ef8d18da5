"""Celery tasks: thin shells around :mod:`workers.pipeline` deciding what is retried and what fails.

Messages carry job ids (and segment indexes), never user text.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict
from functools import lru_cache
from typing import Any, TypeVar

import redis
from celery import Task
from celery.concurrency import get_implementation
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.solo import TaskPool as SoloPool
from celery.signals import celeryd_after_setup, worker_process_init, worker_shutdown
from celery.worker.control import inspect_command

from tts_core import TTSError
from ttsq.constants import ASSEMBLE_TASK, SEGMENT_TASK, SYNTHESIZE_TASK, segment_queue
from ttsq.jobs import JobNotFound, JobStore
from ttsq.parts import PartMissing, PartStore, RedisPartStore, S3PartStore
from ttsq.progress import SegmentStore
from ttsq.settings import get_settings
from ttsq.storage import ObjectStore, StorageError
from workers.app import app
from workers.engine import get_engine
from workers.pipeline import JobContext, assemble_job, fail_job, run_segment, start_job

log = logging.getLogger(__name__)

TRANSIENT_ERRORS = (StorageError, redis.ConnectionError, redis.TimeoutError)
"""Failures worth retrying: the store or Redis may come back. Everything else fails the job at once."""
MAX_RETRIES = 5

T = TypeVar("T")


@lru_cache
def job_context() -> JobContext:
    """Clients and engine of this process, built once."""
    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=30, socket_connect_timeout=5)
    objects = ObjectStore(settings.s3)
    parts: PartStore = (
        RedisPartStore(client, settings.part_ttl_s) if settings.part_store == "redis" else S3PartStore(objects)
    )
    jobs = JobStore(client, settings.job_ttl_s)
    return JobContext(settings, jobs, SegmentStore(client, settings.job_ttl_s), parts, objects, get_engine())


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


@worker_shutdown.connect
def _stop_batcher(**_: Any) -> None:
    job_context().engine.close()


@inspect_command(args=[("limit", int)], signature="[limit=100]")
def batches(state: Any, limit: int = 100) -> dict[str, Any]:
    """``celery inspect batches``: this worker's batching settings and its most recent calls."""
    engine = job_context().engine
    batcher = engine.batcher
    recent = batcher.records()[-limit:] if limit > 0 else []
    return {
        "max_batch": batcher.max_batch,
        "max_wait_ms": batcher.max_wait_ms,
        "calls": batcher.calls,
        "items": batcher.items,
        "recent": [asdict(r) for r in recent],
    }


def _guarded(task: Task[Any, Any], job_id: str, step: str, run: Callable[[JobContext], T]) -> T | None:
    """Run one step of a job once at a time: skip it if another task holds it (a duplicate
    delivery), retry transient outages, fail the job on anything permanent."""
    ctx = job_context()
    token = str(uuid.uuid4())
    claimed = False
    try:
        claimed = ctx.segments.claim(job_id, step, token, ctx.settings.task_time_limit_s)
        if not claimed:
            log.info("job %s: %s is already running in another task; skipping this delivery", job_id, step)
            return None
        return run(ctx)
    except JobNotFound:
        log.warning("job %s has no record (expired or deleted); dropping task", job_id)
        return None
    except TRANSIENT_ERRORS as e:
        if task.request.retries >= MAX_RETRIES:
            fail_job(job_id, ctx, e, code="storage_unavailable")
            raise
        raise task.retry(exc=e, countdown=min(60, 2 ** (task.request.retries + 1))) from e
    except TTSError as e:
        log.warning("job %s failed: %s", job_id, e.code)
        fail_job(job_id, ctx, e)
        return None
    except PartMissing as e:
        log.error("job %s lost a segment: %s", job_id, e)
        fail_job(job_id, ctx, e, code="segment_lost")
        return None
    except Exception as e:
        log.exception("job %s failed unexpectedly", job_id)
        fail_job(job_id, ctx, e, code="internal_error")
        raise
    finally:
        # Released before a retry's countdown (at least 2 s) ends, so the retry finds it free.
        if claimed:
            ctx.segments.release(job_id, step, token)


@app.task(name=SYNTHESIZE_TASK, bind=True, max_retries=MAX_RETRIES)
def synthesize_job(self: Task[[str], int | None], job_id: str) -> int | None:
    """Entry task of a job: plan it, finish it if it is one segment, else fan its segments out."""
    count = _guarded(self, job_id, "entry", lambda ctx: start_job(job_id, ctx))
    if count:
        queue = segment_queue(job_context().settings.queue)
        for index in range(count):
            synthesize_segment.apply_async((job_id, index), queue=queue)
    return count


@app.task(name=SEGMENT_TASK, bind=True, max_retries=MAX_RETRIES)
def synthesize_segment(self: Task[[str, int], bool], job_id: str, index: int) -> bool:
    """One segment of a multi-segment job; the task completing the last one asks for assembly."""
    complete = bool(_guarded(self, job_id, f"segment:{index}", lambda ctx: run_segment(job_id, index, ctx)))
    if complete:
        assemble.apply_async((job_id,), queue=job_context().settings.queue)
    return complete


@app.task(name=ASSEMBLE_TASK, bind=True, max_retries=MAX_RETRIES)
def assemble(self: Task[[str], bool], job_id: str) -> bool:
    """Join a job's parts in order into its final object."""
    return bool(_guarded(self, job_id, "assemble", lambda ctx: assemble_job(job_id, ctx)))
