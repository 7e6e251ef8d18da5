"""Celery tasks: thin shells around :mod:`workers.pipeline` deciding what is retried and what fails.

Messages carry job ids (and segment indexes), never user text. Outages (``TransientError``) are
retried by Celery's own ``autoretry_for`` with exponential backoff and full jitter; any other ttsq or
synthesis error fails the job at once with its code; anything unforeseen fails it as
``internal_error``. The model runtime is imported when a worker starts (``workers.voice_host``), not
with this module, so Flower can import the tasks without loading it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

import redis
from celery import Task, current_task
from celery.concurrency import get_implementation
from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.concurrency.solo import TaskPool as SoloPool
from celery.exceptions import Reject
from celery.signals import celeryd_after_setup, worker_process_init, worker_ready, worker_shutdown
from celery.utils.dispatch import Signal
from celery.worker.control import inspect_command

from tts_core.base.errors import TTSError
from tts_core.voices.catalog import VoiceCatalog
from ttsq.broker import register_model_queues
from ttsq.celery_signals import Handler
from ttsq.constants import (
    ASSEMBLE_STEP,
    ASSEMBLE_TASK,
    ENTRY_STEP,
    SEGMENT_TASK,
    SYNTHESIZE_TASK,
    bulk_segments_queue,
    interactive_queue,
    is_interactive_queue,
    is_model_queue,
    model_queue,
    segment_step,
)
from ttsq.cpu_priority import BULK_NICENESS, lowered_thread
from ttsq.errors import (
    JobNotFound,
    ServiceError,
    StorageRefused,
    StorageUnavailable,
    StoreUnavailable,
    TransientError,
    WorkerCrashed,
    error_code,
)
from ttsq.redis_clients import redis_client, redis_outage
from ttsq.settings import Settings
from ttsq.stores import CONNECT_TIMEOUT_S
from workers import metrics
from workers.app import app
from workers.exclusive import exclusive
from workers.fitness import FITNESS, ConsumerGate, check_store, store_and_engine
from workers.held_models import worker_id
from workers.job_context import JobContext
from workers.pipeline import assemble_job, fail_job, run_segment, start_job
from workers.step_spans import mark_attempt, report_died, step_span
from workers.steps import StepRun, StepSuperseded, new_attempt_id
from workers.synthesis_process import SYNTHESIS, SynthesisProcess
from workers.worker_start import WorkerStart

log = logging.getLogger(__name__)


class JobTask(Task):  # type: ignore[type-arg]
    """A step of a job: outages are retried with backoff; a failure that escapes is recorded on the job.
    How often and how long at most come from the settings, as the configuration's task annotations
    (``ttsq.broker.celery_config``), applied when the worker binds its tasks."""

    autoretry_for = (TransientError,)
    retry_backoff = 2
    """The first retry waits up to 2 s, each next one up to twice as long (full jitter)."""
    retry_jitter = True

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        """The step failed for good (an outage outlasting its retries, or a bug): fail the job."""
        job_id = str(args[0])
        metrics.TASK_FAILURES.labels(error_code(exc)).inc()
        try:
            fail_job(job_id, SYNTHESIS.get().context, exc)
        except Exception:  # Redis may be the outage itself; the traceback is in the log either way
            log.exception("job %s: could not record its failure", job_id)


class SynthesisStart:
    """The synthesis worker's start handlers, on the settings the worker read as it was built: each
    builds what it needs of this process's :class:`SynthesisProcess` (once) and starts it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model_queues: list[str] = []
        """The model queues this worker reads, registered for the sweeper once it is ready."""

    def process(self) -> SynthesisProcess:
        return SYNTHESIS.start(lambda: SynthesisProcess.build(self.settings, app))

    def handlers(self) -> tuple[tuple[Signal, Handler], ...]:
        return (
            (worker_process_init, self.load_model_in_pool_process),
            (celeryd_after_setup, self.load_model_in_main_process),
            (celeryd_after_setup, self.consume_model_queues),
            (worker_ready, self.mark_ready),
            (worker_shutdown, self.stop),
        )

    def load_model_in_pool_process(self, **_: Any) -> None:
        """Prefork children and the solo pool: load once per process, after fork; each process checks
        what it needs itself (a prefork child's tasks see its own verdict)."""
        self.process().engine.warm_up()
        self.check_fitness()

    def load_model_in_main_process(self, instance: Any = None, **_: Any) -> None:
        """Thread pools share the main process, which gets no ``worker_process_init``: load here,
        after logging is set up and before the consumer takes its first task. The metrics and probe
        server starts first, so ``/healthz`` answers while the model loads."""
        worker = self.settings.worker
        if worker.metrics_port is not None:
            metrics.serve(worker.metrics_port, worker.metrics_host)
        pool = get_implementation(getattr(instance, "pool_cls", "prefork"))
        if not (isinstance(pool, type) and issubclass(pool, PreforkPool | SoloPool)):
            engine = self.process().engine
            metrics.PROBES.healthy = lambda: engine.healthy
            engine.warm_up()

    def consume_model_queues(self, instance: Any = None, **_: Any) -> None:
        """A worker reading the interactive queue, or the bulk segments queue, reads the model queues
        of that class for every model of its catalog too (voice affinity); the transport asks for
        those of the models it holds first (``ttsq.broker_transport``). Whatever ``model_affinity``
        says here (it decides where work is sent), so that no process sending to a model queue finds
        it unread."""
        if instance is None:
            return
        queues = instance.app.amqp.queues
        reading = set(queues.consume_from)
        settings = self.settings
        models = VoiceCatalog.discover(settings.voices_dir).model_keys()
        for interactive, fixed in (
            (True, interactive_queue(settings.queue)),
            (False, bulk_segments_queue(settings.queue)),
        ):
            if fixed in reading:
                for key in models:
                    queues.select_add(model_queue(settings.queue, key, interactive))
        self.model_queues = [name for name in queues.consume_from if is_model_queue(name)]

    def check_fitness(self) -> None:
        """Check what this process needs now, then every ``check_interval_s`` (``workers.fitness``)."""
        process = self.process()
        engine = process.engine
        check = store_and_engine(process.context.stores.objects, worker_id(), lambda: engine.healthy)
        FITNESS.start(check, self.settings.worker.check_interval_s)

    def watch_fitness(self, consumer: Any) -> None:
        """Check what this worker needs before its consumer takes a message (this runs on the
        consumer's thread, before its loop's first read), and every few seconds after: consume only
        while able."""
        self.check_fitness()
        metrics.PROBES.able = lambda: FITNESS.able
        if consumer is not None and hasattr(consumer, "task_consumer"):
            gate = ConsumerGate(consumer)
            gate.sync()
            FITNESS.listen(gate)

    def mark_ready(self, sender: Any = None, **_: Any) -> None:
        """The consumer is about to take tasks, and (thread pool) the model is loaded: ``/readyz`` is
        200 if the worker is able (``workers.fitness``). The model queues it reads are registered for
        the sweeper."""
        self.watch_fitness(sender)
        try:
            client = redis_client(self.settings, 5, CONNECT_TIMEOUT_S)
            with client:
                register_model_queues(client, self.model_queues)
        except redis.RedisError as e:  # the sweeper may then send such work again: a late duplicate, skipped
            log.warning("could not register the model queues this worker reads: %s", e)
        metrics.PROBES.ready.set()
        process = self.process()
        process.leases.start()
        process.held.start()
        process.heartbeat.start()

    def stop(self, **_: Any) -> None:
        FITNESS.stop()
        if not SYNTHESIS.started:
            return
        process = SYNTHESIS.get()
        process.heartbeat.stop()
        process.held.stop()
        process.leases.stop()
        process.engine.close()


@inspect_command(args=[("limit", int)], signature="[limit=100]")
def batches(state: Any, limit: int = 100) -> dict[str, Any]:
    """``celery inspect batches``: this worker's batching settings and its most recent calls."""
    engine = SYNTHESIS.get().engine
    batcher = engine.batcher
    records = engine.records()
    recent = records[-limit:] if limit > 0 else []
    return {
        "device": engine.device.value,
        "max_batch": batcher.max_batch,
        "max_wait_ms": batcher.max_wait_ms,
        "parallel_calls": batcher.parallel_calls,
        "twins": engine.twins.loaded() if engine.twins is not None else [],
        "calls": batcher.calls + engine.interactive.calls,
        "items": batcher.items + engine.interactive.items,
        "recent": [asdict(r) for r in recent],
    }


def _run_step(job_id: str, step: str, work: Callable[[JobContext, StepRun], None]) -> None:
    """Run one step of a job in one task at a time: skip it if another task holds it (a duplicate
    delivery); fail the job if the step already took down ``max_step_starts`` workers, or on a
    permanent error; let outages through to be retried. A worker that cannot do the work
    (``workers.fitness``) gives the message back for another."""
    _able_or_give_back(job_id, step)
    process = SYNTHESIS.get()
    ctx = process.context
    with step_span(job_id, step, lambda: ctx.stores.jobs.get(job_id).traceparent):
        _run_claimed(ctx, process, job_id, step, work)


def _run_claimed(
    ctx: JobContext, process: SynthesisProcess, job_id: str, step: str, work: Callable[[JobContext, StepRun], None]
) -> None:
    lock = ctx.stores.jobs.step_lock(job_id, step, ctx.settings.step_lease_s)
    try:
        with exclusive(lock, f"job {job_id}: {step}") as mine:
            if not mine:
                return
            with process.leases.holding(lock), _step_class(ctx):
                _run_counted(ctx, StepRun(job_id, step, new_attempt_id(), lock), work)
    except JobNotFound:
        log.warning("job %s has no record (expired or deleted); dropping task", job_id)
    except StepSuperseded as e:
        log.warning("%s; this late delivery stops and leaves the step to it", e)
    except redis.RedisError as e:
        if not redis_outage(e):
            raise
        raise StoreUnavailable(f"Redis unreachable: {e}") from e
    except TransientError:
        raise
    except (TTSError, ServiceError) as e:
        _fail(ctx, job_id, step, e)


@contextlib.contextmanager
def _step_class(ctx: JobContext) -> Iterator[None]:
    """The step runs as its class, told by its message's queue. An interactive step counts as
    coming in the engine's interactive lane while it runs, on whichever thread (the slot announces
    its own before that): bulk steps wait at their next gate, so its reading, planning and encoding
    have the interpreter's lock too, not only its inference call. A bulk step's thread steps back
    on the cores (``ttsq.cpu_priority``): between its gates it would take half of the core an
    interactive inference thread runs on."""
    task = current_task
    delivery = (task.request.delivery_info or {}) if task is not None else {}
    if not is_interactive_queue(str(delivery.get("routing_key", ""))):
        with lowered_thread(BULK_NICENESS):
            yield
        return
    release = ctx.engine.interactive.expect()
    try:
        yield
    finally:
        release()


def _fail(ctx: JobContext, job_id: str, step: str, error: TTSError | ServiceError) -> None:
    """Fail the job with ``error``; but a refusal by the object store that the worker's own check
    meets too is this worker's settings, not the job: the message goes to another worker. A refusal
    the check does not meet may have ended just before the check (the store changed its mind): the
    step is tried once more, and fails the job only if refused again."""
    if isinstance(error, StorageRefused):
        if not _store_accepts(ctx):
            FITNESS.check_now()  # the verdict others read (a refusal makes this worker stop consuming)
            log.warning("job %s: %s given back, the store refused this worker: %s", job_id, step, error)
            raise Reject(str(error), requeue=True)
        if _first_try():
            log.warning("job %s: %s refused by the store, which accepts this worker now: tried again", job_id, step)
            raise StorageUnavailable(f"refused, then accepted by the store's check: {error}") from error
    log.warning("job %s failed: %s", job_id, error.code)
    metrics.TASK_FAILURES.labels(error.code).inc()
    fail_job(job_id, ctx, error)


def _store_accepts(ctx: JobContext) -> bool:
    """Whether the store answers this worker's check now (and takes its writes): only then is a
    refusal the request's own. An outage meanwhile (a connection cut as the store changed its mind)
    proves nothing, so the job is not failed on it."""
    try:
        check_store(ctx.stores.objects, worker_id())
    except (StorageRefused, StorageUnavailable):
        return False
    return True


def _first_try() -> bool:
    """Whether the running task is its message's first try (no retry of it has run yet)."""
    task = current_task
    return task is None or not task.request.retries


def _able_or_give_back(job_id: str, step: str) -> None:
    """Return if this worker can do the work (``workers.fitness``). Else raise ``Reject``: the message
    goes back to its queue at once (not after the visibility timeout) for a worker that can, and the
    job is not touched; its step, if it had begun, is safe to repeat."""
    if FITNESS.able:
        return
    log.warning("job %s: %s given back, this worker cannot do the work: %s", job_id, step, FITNESS.reason)
    raise Reject(FITNESS.reason, requeue=True)


def _run_counted(ctx: JobContext, run: StepRun, work: Callable[[JobContext, StepRun], None]) -> None:
    """Run the step, counted among the step's starts until it ends in any way a process survives:
    starts that never end are deliveries whose worker died in them. Past ``max_step_starts`` of those,
    the job fails (``worker_crashed``) before the step's input reaches native code once more."""
    if run.step == ENTRY_STEP:  # the entry reads its job first: in the same round trip
        start = ctx.stores.jobs.step_started_reading(run.job_id, run.step, run.attempt)
        run = dataclasses.replace(run, start=start)
        started = start.runs
    else:
        started = ctx.stores.jobs.step_started(run.job_id, run.step, run.attempt)
    mark_attempt(started, run.attempt)
    if started > 1:
        report_died(run.job_id, run.step, ctx.stores.jobs.take_died(run.job_id, run.step, run.attempt), run.attempt)
    try:
        crashed = started - 1
        if crashed >= ctx.settings.max_step_starts:
            raise WorkerCrashed(run.step, crashed)
        work(ctx, run)
    finally:
        ctx.stores.jobs.step_ended(run.job_id, run.step, run.attempt)


@app.task(name=SYNTHESIZE_TASK, base=JobTask)
def synthesize_job(job_id: str) -> None:
    """Entry task of a job: plan it, finish it if it is one segment, else fan its segments out."""
    _run_step(job_id, ENTRY_STEP, lambda ctx, run: start_job(job_id, ctx, run))


@app.task(name=SEGMENT_TASK, base=JobTask)
def synthesize_segment(job_id: str, index: int) -> None:
    """One segment of a multi-segment job; the task completing the last one sends the assembly."""
    _run_step(job_id, segment_step(index), lambda ctx, run: run_segment(job_id, index, ctx, run))


@app.task(name=ASSEMBLE_TASK, base=JobTask)
def assemble(job_id: str) -> None:
    """Join a job's parts in order into its final object."""
    _run_step(job_id, ASSEMBLE_STEP, lambda ctx, run: assemble_job(job_id, ctx, run))


class SynthesisWorkerStart(WorkerStart):
    """The synthesis worker's handlers, connected as it is built (``workers.app`` names this step)."""

    def handlers(self, settings: Settings) -> Sequence[tuple[Signal, Handler]]:
        return SynthesisStart(settings).handlers()
