"""What a job's tasks do, apart from Celery: plan, synthesise segments, assemble, record.

A job's text is planned into segments by its entry task. One segment: the entry task synthesises,
encodes, uploads and marks it succeeded itself. Several: the entry task sends one segment task per
segment; each stores its PCM as a part and counts itself done (atomically, once); the task that
completes the last one sends the assembly, which encodes the parts in order into the final object.

Every step is safe to repeat, and safe to run twice at once (a worker paused past its lease, then
resumed beside the task that took its step over): status changes are conditional, a segment is
counted once and its part is the counting attempt's, and every object or part a run stores carries
its attempt id (``workers.steps``), so the write that commits names the winner's keys and a loser
deletes only its own. Parts are deleted only after the job succeeded or ended.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Final

import numpy as np

from tts_core.base.audio import PCM16
from tts_core.base.errors import TTSError
from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import UtteranceTiming
from tts_core.mastering.encoding import encode, encode_stream
from tts_core.mastering.level_meter import LevelSummary
from tts_core.mastering.leveling import Leveling, leveling_for, spread_sample
from tts_core.text.first_part import cut_sentence_segments
from tts_core.text.pauses import Silence
from ttsq import lifecycle, logs, tracing
from ttsq.constants import result_key
from ttsq.errors import JobNotFound, QuotaExceeded, SegmentLost, ServiceError, error_code
from ttsq.estimate import planned_audio_s
from ttsq.job_record import JobError, JobRecord, JobResult, JobStatus, finish_changes, utcnow
from ttsq.parts import PartRef, counted_parts, iter_parts
from ttsq.quotas import usage_day
from ttsq.tenants import Limits
from workers.job_context import JobContext
from workers.marks_output import marks_keys, store_marks
from workers.owned_objects import OwnedObjects, owned_objects
from workers.speaking import SegmentAudio, plan_segments, pronunciation_of, speak, synthesis_config
from workers.steps import StepRun

log = logging.getLogger(__name__)

_STARTABLE = tuple(status for status in JobStatus if not status.terminal)
"""Where a job may be (re)started and failed from: every status but the terminal ones."""


def _describe(record: JobRecord) -> None:
    """The job's tenant, voice and class on the running step's span (``workers.step_spans``), and its
    tenant on the task's log lines from here to its end (``workers.log_context``)."""
    logs.tenant_id_var.set(record.tenant)
    span = tracing.current_span()
    span.set_attribute("ttsq.tenant.id", record.tenant)
    span.set_attribute("ttsq.voice", record.voice)
    span.set_attribute("ttsq.priority", record.priority.value)


def _mark_started(record: JobRecord, taken_at: datetime, segments_total: int | None = None) -> dict[str, Any]:
    started_at = record.started_at or taken_at
    queued_ms = round((started_at - record.created_at).total_seconds() * 1000)
    planned = {} if segments_total is None else {"segments_total": segments_total}
    progress = record.progress.model_copy(update={"queued_ms": queued_ms, **planned})
    return {"started_at": started_at, "attempts": record.attempts + 1, "progress": progress}


FAN_OUT_CHUNK: Final = 4
"""Segment tasks a bulk job's entry sends between two looks for interactive work (``make_way``):
each send is a message built in Python, most of a millisecond of the interpreter's lock, and a job
of 1,000 segments sent at once held it against another tenant's short job for about a second
(issue 34's alias flood)."""

FAN_OUT_LOOK_EVERY: Final = 8 * FAN_OUT_CHUNK
"""Segment tasks sent between two looks at the job's status while a long job fans out: a job canceled
(or failed) meanwhile gets no more of them. Each one sent would be taken and skipped by a worker, a
round trip through Redis apiece: 600 to 800 of them for a long book chapter canceled as it started.
One look (a record read) per 32 sends costs about 1% of the fan-out."""

STREAM_INLINE_SEGMENTS: Final = 3
"""A streamed job of at most this many segments, or of its first sentence's pieces and one more (a
short answer: its first clause, the rest of its sentence, maybe one more) is made whole by its entry
task, segment after segment, and assembled there: a worker's batcher makes one call at a time on CPU
anyway, and the segment tasks' hops and the assembly's were time the answer waited."""


def start_job(job_id: str, ctx: JobContext, run: StepRun) -> None:
    """Plan the job, then claim it with its plan in one record write (running, its segment count,
    the plan's audio charged); finish it here if it has one segment, else send its segment tasks (a
    streamed job's first segment is synthesised here first, and announced as soon as it is stored;
    a short streamed job is made and assembled here whole, see :data:`STREAM_INLINE_SEGMENTS`).

    A job that is no longer startable (finished, failed or canceled already) is left alone.
    """
    taken_at = utcnow()
    record, text = _opened(job_id, ctx, run)
    if record.status not in _STARTABLE:
        # Its webhook event was queued by its terminal write; a batch's finishing task by the terminal
        # write of the batch's last item (a lost one is sent again by the sweeper, ttsq.batch_sweep).
        log.info("job %s is no longer runnable; skipping", job_id)
        return
    _describe(record)
    if text is None:
        raise JobNotFound(job_id)
    try:
        with tracing.span("ttsq.plan") as span:
            segments = plan_segments(record, text, ctx)
            span.set_attribute("ttsq.segments", len(segments))
        run.ensure_current()
        claimed = _claim_planned(record, segments, taken_at, ctx)
    except (TTSError, ServiceError):  # the job fails as one this worker took, started and tried once
        ctx.stores.jobs.transition_by(job_id, _STARTABLE, JobStatus.RUNNING, lambda c: _mark_started(c, taken_at))
        raise
    if claimed is None:
        log.info("job %s was canceled or ended while it was planned; skipping", job_id)
        return
    record = claimed
    if len(segments) == 1:  # no fan-out
        audio = speak(ctx, record, segments[0], f"{job_id}/0", last=True)
        if record.stream:  # the API sends this part while the object is encoded and stored
            _store_part(ctx, run, PartRef(job_id, 0, run.attempt), audio)
        _finish_single(job_id, record, segments[0], audio, ctx, run)
        return
    run.ensure_current()
    ctx.stores.segments.save_plan(job_id, segments)
    log.info("job %s planned: %d segments", job_id, len(segments))
    first = _made_here(job_id, segments, ctx, run) if record.stream else 0
    if first < len(segments):
        run.ensure_current()
        _fan_out(record, first, len(segments), ctx)


def _opened(job_id: str, ctx: JobContext, run: StepRun) -> tuple[JobRecord, str | None]:
    """The job's record and text as the run's start read them, or read now."""
    start = run.start
    if start is None:
        return ctx.stores.jobs.get_with_text(job_id)
    if start.record is None:
        raise JobNotFound(job_id)
    return start.record, start.text


def _made_here(job_id: str, segments: list[list[PlannedUtterance]], ctx: JobContext, run: StepRun) -> int:
    """A streamed job's segments its entry task makes itself, one after the other: its first
    sentence's pieces (no queue between the first and the API, and none made beside another, later
    than their pace planned), or all of a short answer, assembled here. How many it made."""
    first = cut_sentence_segments(segments)
    if len(segments) <= max(STREAM_INLINE_SEGMENTS, first + 1):
        for index in range(len(segments)):  # each part is announced the moment it is stored
            run_segment(job_id, index, ctx, run, assemble_here=True)
        return len(segments)
    for index in range(first):
        run_segment(job_id, index, ctx, run)
    return first


def _fan_out(record: JobRecord, first: int, total: int, ctx: JobContext) -> None:
    """Send the segment tasks from ``first`` on, a few at a time, making way for interactive work
    between sends and stopping if the job ended meanwhile."""
    model = ctx.engine.model_key(record.voice) if ctx.settings.model_affinity else None
    for start in range(first, total, FAN_OUT_CHUNK):
        ctx.engine.make_way(record.priority)
        if start > first and (start - first) % FAN_OUT_LOOK_EVERY == 0 and _ended_while_sent(record.id, ctx):
            log.info("job %s ended while its segment tasks were sent: %d of %d sent", record.id, start, total)
            return
        ctx.send.segments(record.id, range(start, min(start + FAN_OUT_CHUNK, total)), record.priority, model)


def _ended_while_sent(job_id: str, ctx: JobContext) -> bool:
    """Whether the job is no longer running (canceled, failed by a segment already sent, deleted)."""
    try:
        return ctx.stores.jobs.get(job_id).status is not JobStatus.RUNNING
    except JobNotFound:
        return True


def _store_part(ctx: JobContext, run: StepRun, part: PartRef, audio: SegmentAudio) -> tuple[bool, int]:
    """Store this run's part and count its segment done with it; a part that lost the count to
    another attempt is deleted again. Returns (this run counted it, segments done). The claim's
    renewal and the part's write are one round trip while the claim holds (issue 38: each trip
    here is on a short answer's path)."""
    pcm = audio.pcm.tobytes()
    if not ctx.stores.parts.put_while_held(part, pcm, run.claim):
        run.ensure_current()  # it lapsed: taken back, or StepSuperseded
        ctx.stores.parts.put(part, pcm)
    won, done = ctx.stores.segments.mark_done(
        part.job_id, part.index, part.attempt, audio.synthesis_ms, audio.audio_s, audio.timing, audio.level
    )
    if not won:
        log.info("job %s: segment %d was counted by another attempt; dropping this one's part", part.job_id, part.index)
        ctx.stores.parts.delete([part])
    return won, done


def _tenant_limits(tenant_id: str, ctx: JobContext) -> Limits:
    tenant = ctx.stores.tenants.get(tenant_id)
    own = tenant.limits if tenant is not None else Limits()
    return own.over(ctx.settings.default_limits)


def _claim_planned(
    record: JobRecord, segments: list[list[PlannedUtterance]], taken_at: datetime, ctx: JobContext
) -> JobRecord | None:
    """Replace the submit-time estimate of the job's audio with the plan's and claim the job
    (running, started, its segment count) in one record write; None if it ended meanwhile. A plan
    the tenant's day cannot take fails the job before any synthesis (``audio_seconds_per_day_exceeded``)."""
    utterances = [u for segment in segments for u in segment]
    sentence_pause = synthesis_config(record, ctx.settings).sentence_pause_s
    pauses = sum(sentence_pause if u.pause_after_s is None else u.pause_after_s for u in utterances)
    pauses += utterances[0].pause_before_s - (sentence_pause if utterances[-1].pause_after_s is None else 0.0)
    engine = ctx.engine.catalog.get(record.voice).engine.value
    speech_s = planned_audio_s(engine, (round(len(u.ids) / u.rate) for u in utterances), 0.0, record.options.speed)
    # The API checked the text's pauses; the plan may hold more (a long sentence cut into several
    # utterances, each followed by the sentence pause), so the plan is checked as well.
    Silence(pauses, 0.0, 0).check(speech_s, ctx.settings.silence_allowance_s, ctx.settings.silence_ratio)
    planned_ms = round((speech_s + pauses) * 1000)
    delta = planned_ms - record.reserved_audio_ms
    # The day's limit only bounds a larger reservation: a plan within the estimate (the usual case)
    # gives audio back without reading the tenant (a round trip before a short answer's call).
    limits = _tenant_limits(record.tenant, ctx) if delta > 0 else Limits()
    if not ctx.stores.quotas.replan(record.tenant, usage_day(record.created_at), record.voice, delta, limits):
        message = (
            f"the job's planned {planned_ms / 1000:.0f} s of audio pass what is left of the key's "
            f"{limits.audio_seconds_per_day:g} s per day"
        )
        raise QuotaExceeded("audio_seconds_per_day", message, 0)
    replaced = [False]

    def claim(current: JobRecord) -> dict[str, Any]:
        changes = _mark_started(current, taken_at, len(segments))
        # Only over the reservation this run read: a duplicate run that replanned first charged it.
        replaced[0] = current.reserved_audio_ms == record.reserved_audio_ms
        return {**changes, "reserved_audio_ms": planned_ms} if replaced[0] else changes

    claimed = ctx.stores.jobs.transition_by(record.id, _STARTABLE, JobStatus.RUNNING, claim, known=record)
    if claimed is None or not replaced[0]:  # ended meanwhile, or replanned by another run: give it back
        ctx.stores.quotas.replan(record.tenant, usage_day(record.created_at), record.voice, -delta, limits)
    return claimed


def _finish_single(
    job_id: str,
    record: JobRecord,
    segments_plan: list[PlannedUtterance],
    audio: SegmentAudio,
    ctx: JobContext,
    run: StepRun,
) -> None:
    if not record.keep:
        _succeed(job_id, record, None, round(audio.synthesis_ms), audio.audio_s, ctx)
        return
    sample_rate = ctx.engine.sample_rate(record.voice)
    leveling = None
    if audio.level is not None and record.options.loudness is not None:
        with tracing.span("ttsq.loudness", attributes={"ttsq.segments": 1}):
            leveling = leveling_for(record.options.loudness.target(), audio.level, lambda: [audio.pcm], sample_rate)
    with tracing.span("ttsq.encode", attributes={"ttsq.format": record.format}):
        encoded = encode(audio.pcm, sample_rate, record.output, leveling)
    key = result_key(record.tenant, job_id, run.attempt, encoded.format.extension)
    result = JobResult(
        key=key,
        bytes=len(encoded.data),
        duration_s=round(encoded.duration_s, 3),
        sample_rate=encoded.sample_rate,
        content_type=encoded.content_type,
    )
    with owned_objects(ctx, record, run) as owned:
        owned.claim(key)
        ctx.stores.objects.put(key, encoded.data, encoded.content_type)
        if record.options.marks and audio.timing is not None:
            timed = zip(segments_plan, audio.timing.utterances, strict=True)
            result = _store_marks(ctx, record, timed, sample_rate, result, owned)
        if _succeed(job_id, record, result, round(audio.synthesis_ms), result.duration_s, ctx):
            owned.commit()


def _succeed(
    job_id: str, record: JobRecord, result: JobResult | None, synthesis_ms: int, audio_s: float, ctx: JobContext
) -> bool:
    total = record.progress.segments_total or 1
    progress = record.progress.with_sums(total, synthesis_ms, audio_s)

    def changes(current: JobRecord) -> dict[str, Any]:
        return {**finish_changes(current, JobStatus.SUCCEEDED), "result": result, "progress": progress}

    done = ctx.stores.jobs.transition_by(job_id, (JobStatus.RUNNING,), JobStatus.SUCCEEDED, changes, known=record)
    if done is not None:
        log.info("job %s succeeded: %.2fs of audio, rtf %s", job_id, audio_s, progress.rtf)
        if record.stream and ctx.stores.segments.was_streamed(job_id):  # the API is done with the parts
            ctx.stores.parts.delete(counted_parts(job_id, ctx.stores.segments.winners(job_id)))
        _announce(done, ctx)
    return done is not None


def _announce(record: JobRecord, ctx: JobContext) -> None:
    """A finished job with a receiver gets its webhook delivery sent, and the last item of a batch
    its batch's finishing task (the status change itself was already published by the transition)."""
    ctx.lifecycle.announce(record)


def run_segment(job_id: str, index: int, ctx: JobContext, run: StepRun, assemble_here: bool = False) -> None:
    """Synthesise segment ``index`` unless already counted; whichever task sees every segment done
    sends the assembly (a redelivered last segment sends it again, harmlessly), or with
    ``assemble_here`` (a task making every segment of its job) assembles the job itself."""
    record = ctx.stores.jobs.get(job_id)
    _describe(record)
    total = record.progress.segments_total
    if record.status is not JobStatus.RUNNING or total is None:
        log.info("job %s is %s; skipping segment %d", job_id, record.status.value, index)
        return
    if ctx.stores.segments.is_done(job_id, index):
        done = ctx.stores.segments.progress(job_id).done
    else:
        utterances = ctx.stores.segments.segment(job_id, index)
        if utterances is None:
            raise SegmentLost(f"job {job_id} has no plan for segment {index}")
        ctx.engine.make_way(record.priority)
        audio = speak(ctx, record, utterances, f"{job_id}/{index}", last=index == total - 1)
        ctx.engine.make_way(record.priority)
        part = PartRef(job_id, index, run.attempt)
        counted, done = _store_part(ctx, run, part, audio)
        if counted and done == 1:  # the job's first audio exists from now on
            ctx.stores.jobs.count_first_audio(record)
        if counted and ctx.stores.jobs.get(job_id).status is not JobStatus.RUNNING:
            # The job failed or was canceled while this segment ran, and its clean-up may have come
            # before this part was counted: remove it, so nothing outlives the job.
            ctx.stores.parts.delete([part])
            return
    if done >= total:
        run.ensure_current()
        if assemble_here:
            assemble_job(job_id, ctx, run)
        else:
            ctx.send.assembly(job_id, record.priority)


def assemble_job(job_id: str, ctx: JobContext, run: StepRun) -> None:
    """Encode the counted parts in order into this run's object, mark the job succeeded naming it,
    drop the parts. A second assembly of the same job writes its own object, loses the conditional
    status change and deletes that object: no visible effect."""
    record = ctx.stores.jobs.get(job_id)
    _describe(record)
    total = record.progress.segments_total
    if record.status is not JobStatus.RUNNING or total is None:
        log.info("job %s is %s; nothing to assemble", job_id, record.status.value)
        return
    sums = ctx.stores.segments.progress(job_id)
    if sums.done < total:
        raise SegmentLost(f"job {job_id} has {sums.done} of {total} segments done; cannot assemble")
    if not record.keep:  # streamed from the parts by the API; nothing to store
        run.ensure_current()
        audio_s = sums.audio_s  # each part holds the pause after it
        if _succeed(job_id, record, None, sums.synthesis_ms, audio_s, ctx):
            cleanup(job_id, ctx, keep_parts=True)
        return
    output = record.output
    sample_rate = ctx.engine.sample_rate(record.voice)
    key = result_key(record.tenant, job_id, run.attempt, output.format.extension)
    winners = ctx.stores.segments.winners(job_id)

    def parts() -> Iterator[PCM16]:
        for data in iter_parts(ctx.stores.parts, job_id, winners, total):
            ctx.engine.make_way(record.priority)
            yield np.frombuffer(data, dtype=np.int16)

    leveling = _job_leveling(job_id, record, total, winners, sample_rate, ctx)
    with owned_objects(ctx, record, run) as owned:
        with tempfile.TemporaryFile(prefix="ttsq-assembly-") as sink:
            with tracing.span("ttsq.encode", attributes={"ttsq.format": record.format, "ttsq.segments": total}):
                samples = encode_stream(parts(), 0.0, sample_rate, output, sink, leveling)  # parts carry their pauses
            size = sink.seek(0, 2)
            sink.seek(0)
            owned.claim(key)
            ctx.stores.objects.upload(key, sink, output.format.content_type)
        result = JobResult(
            key=key,
            bytes=size,
            duration_s=round(samples / sample_rate, 3),
            sample_rate=output.rate_for(sample_rate),
            content_type=output.format.content_type,
        )
        if record.options.marks:
            timed = _job_timings(job_id, total, ctx)
            result = _store_marks(ctx, record, timed, sample_rate, result, owned)
        if _succeed(job_id, record, result, sums.synthesis_ms, result.duration_s, ctx):
            owned.commit()
            cleanup(job_id, ctx, keep_parts=record.stream)


def _job_leveling(
    job_id: str, record: JobRecord, total: int, winners: dict[int, str], rate: int, ctx: JobContext
) -> Leveling | None:
    """The leveling of a multi-segment job with a loudness target, from its segments' levels and a
    sample of its parts spread over it (``tts_core.mastering.leveling``); None for a job without one or one
    leveled as it streamed."""
    if record.options.loudness is None or record.stream:
        return None
    summary, levels = LevelSummary(), []
    for index in range(total):
        level = ctx.stores.segments.level(job_id, index)
        if level is None:
            raise SegmentLost(f"job {job_id} has no level for segment {index}; cannot level it")
        summary.add(level)
        levels.append(level.samples / rate)
    chosen = spread_sample(levels)

    def sample() -> Iterator[PCM16]:
        for index in chosen:
            data = ctx.stores.parts.get(PartRef(job_id, index, winners[index]))
            yield np.frombuffer(data, dtype=np.int16)

    with tracing.span("ttsq.loudness", attributes={"ttsq.segments": total, "ttsq.sampled": len(chosen)}):
        return leveling_for(record.options.loudness.target(), summary, sample, rate)


def _store_marks(
    ctx: JobContext,
    record: JobRecord,
    timed: Iterable[tuple[PlannedUtterance, UtteranceTiming]],
    sample_rate: int,
    result: JobResult,
    owned: OwnedObjects,
) -> JobResult:
    weigh = ctx.engine.word_weight(record.voice, pronunciation_of(record, ctx))
    keys = marks_keys(record, owned.run.attempt)
    owned.claim(*keys.values())
    return store_marks(
        ctx.stores.objects, record, ctx.stores.jobs.text(record.id), timed, sample_rate, result, weigh, keys
    )


def _job_timings(job_id: str, total: int, ctx: JobContext) -> Iterator[tuple[PlannedUtterance, UtteranceTiming]]:
    """Every planned utterance of the job with its timing in the job's audio, segment by segment."""
    offset = 0
    for index in range(total):
        plan, timing = ctx.stores.segments.segment(job_id, index), ctx.stores.segments.timing(job_id, index)
        if plan is None or timing is None:
            raise SegmentLost(f"job {job_id} has no plan or timing for segment {index}; cannot make its marks")
        for utterance, utterance_timing in zip(plan, timing.utterances, strict=True):
            yield utterance, utterance_timing.shifted(offset)
        offset += timing.samples


def cleanup(job_id: str, ctx: JobContext, keep_parts: bool = False) -> None:
    """Drop a multi-segment job's counted parts and plan; the small done marks and sums stay until
    the job expires, as the record of what each segment counted. A streamed job's parts are left to
    whichever of the API (once it sent them) and the worker (once the job succeeded) comes last;
    their TTL covers an API that dies mid-stream."""
    if not keep_parts:
        ctx.stores.parts.delete(counted_parts(job_id, ctx.stores.segments.winners(job_id)))
    ctx.stores.segments.drop_plan(job_id)


def fail_job(job_id: str, ctx: JobContext, error: BaseException) -> None:
    """Record a permanent failure with the error's stable code; a finished or canceled job is left alone."""
    lifecycle.fail_job(job_id, JobError(code=error_code(error), message=str(error)), ctx.lifecycle)
