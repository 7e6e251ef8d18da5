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

import contextlib
import logging
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import redis

from tts_core.base.audio import PCM16, gain_of, timed_pcm
from tts_core.base.config import SPEED_RANGE, SynthesisConfig
from tts_core.base.errors import TTSError
from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import SegmentTiming, UtteranceTiming
from tts_core.lexicon.pronunciation import Pronunciation
from tts_core.mastering.encoding import encode, encode_stream
from tts_core.mastering.formats import AudioFormat
from tts_core.mastering.level_meter import LevelSummary, measure
from tts_core.mastering.leveling import Leveling, leveling_for, spread_sample
from tts_core.mastering.limiter import PeakLimiter
from tts_core.text.pauses import Silence
from tts_core.text.speech_markup import VOLUME_RANGE_DB
from tts_core.voices.batching import BatchResult
from ttsq import lifecycle
from ttsq.broker import TaskPublisher
from ttsq.constants import OBJECT_STEPS, result_key
from ttsq.errors import QuotaExceeded, SegmentLost, ServiceError, TransientError, error_code
from ttsq.estimate import planned_audio_s
from ttsq.job_record import JobError, JobRecord, JobResult, JobStatus, Priority, finish_changes, utcnow
from ttsq.parts import PartRef, counted_parts, iter_parts
from ttsq.quotas import usage_day
from ttsq.settings import Settings
from ttsq.stores import Stores
from ttsq.tenants import Limits
from workers.marks_output import marks_keys, segment_timing, store_marks, wants_phonemes
from workers.pronunciations import job_pronunciation
from workers.steps import StepRun

if TYPE_CHECKING:
    from workers.voice_host import VoiceHost

log = logging.getLogger(__name__)

_STARTABLE = tuple(status for status in JobStatus if not status.terminal)
"""Where a job may be (re)started and failed from: every status but the terminal ones."""


@dataclass(frozen=True)
class JobContext:
    """What a job needs from its worker process: its stores, its engine, its task sender."""

    stores: Stores
    engine: VoiceHost
    send: TaskPublisher

    @property
    def settings(self) -> Settings:
        return self.stores.settings

    @property
    def lifecycle(self) -> lifecycle.Lifecycle:
        return self.stores.lifecycle(self.send.finish_batch)


@dataclass(frozen=True)
class SegmentAudio:
    """One segment's PCM and what it cost."""

    pcm: PCM16
    synthesis_ms: float
    audio_s: float
    timing: SegmentTiming | None = None
    """Where its utterances and words lie, for a job with marks."""
    level: LevelSummary | None = None
    """Its measured level, for a job with a loudness target that is leveled whole at the end."""


def _mark_started(record: JobRecord, taken_at: datetime, segments_total: int | None = None) -> dict[str, Any]:
    started_at = record.started_at or taken_at
    queued_ms = round((started_at - record.created_at).total_seconds() * 1000)
    planned = {} if segments_total is None else {"segments_total": segments_total}
    progress = record.progress.model_copy(update={"queued_ms": queued_ms, **planned})
    return {"started_at": started_at, "attempts": record.attempts + 1, "progress": progress}


def synthesis_config(record: JobRecord, settings: Settings) -> SynthesisConfig:
    return SynthesisConfig(
        speed=record.options.speed,
        noise_scale=record.options.noise_scale,
        noise_w=record.options.noise_w,
        sentence_pause_s=(
            settings.sentence_pause_s if record.options.sentence_pause_s is None else record.options.sentence_pause_s
        ),
        speaker_id=record.options.speaker_id,
    )


MAX_GAIN: Final = gain_of(VOLUME_RANGE_DB[1])
"""The loudest a piece of speech is made, however the job's volume and its SSML volumes add up."""

FAN_OUT_CHUNK: Final = 4
"""Segment tasks a bulk job's entry sends between two looks for interactive work (``make_way``):
each send is a message built in Python, most of a millisecond of the interpreter's lock, and a job
of 1,000 segments sent at once held it against another tenant's short job for about a second
(issue 34's alias flood)."""

STREAM_INLINE_SEGMENTS: Final = 3
"""A streamed job of at most this many segments (a short answer: its first clause, the rest of its
sentence, maybe one more) is made whole by its entry task, segment after segment, and assembled
there: a worker's batcher makes one call at a time on CPU anyway, and the segment tasks' hops and
the assembly's were time the answer waited."""


def _speak(
    ctx: JobContext, record: JobRecord, utterances: list[PlannedUtterance], tag: str, last: bool
) -> SegmentAudio:
    """Synthesise one segment's utterances through the batcher (those of one rate share calls) and
    join them with their pauses; a segment that is not the job's last ends with the pause after its
    last utterance, so parts are simply concatenated."""
    config = synthesis_config(record, ctx.settings)
    results: dict[int, BatchResult] = {}
    for rate, indexes in _by_rate(utterances).items():
        rated = replace(config, speed=min(max(config.speed * rate, SPEED_RANGE[0]), SPEED_RANGE[1]))
        ids = [utterances[i].ids for i in indexes]
        results.update(zip(indexes, ctx.engine.synthesize(record.voice, rated, ids, tag, record.priority), strict=True))
    ordered = [results[i] for i in range(len(utterances))]
    after = [config.sentence_pause_s if u.pause_after_s is None else u.pause_after_s for u in utterances]
    if last and utterances[-1].pause_after_s is None:
        after[-1] = 0.0
    sample_rate = ctx.engine.sample_rate(record.voice)
    before = [u.pause_before_s for u in utterances]
    job_gain = gain_of(record.options.volume_db or 0.0)
    gains = [min(u.gain * job_gain, MAX_GAIN) for u in utterances]  # the job's and SSML's add up to +12 dB
    pcm = timed_pcm([r.audio for r in ordered], before, after, sample_rate, gains)
    timing = None
    if record.options.marks:
        word_ids = ctx.engine.word_ids(record.voice)
        phonemes = wants_phonemes(record.options.marks)
        timing = segment_timing(utterances, ordered, before, after, sample_rate, word_ids, phonemes)
    pcm, level = _level_segment(ctx, record, pcm, sample_rate)
    return SegmentAudio(pcm, sum(r.share_ms for r in ordered), pcm.size / sample_rate, timing, level)


def _level_segment(
    ctx: JobContext, record: JobRecord, pcm: PCM16, sample_rate: int
) -> tuple[PCM16, LevelSummary | None]:
    """A job with a loudness target: a streamed one's segment leveled now with the voice's calibrated
    gain (its first bytes leave before the rest exists); any other's measured, to be leveled whole."""
    if record.options.loudness is None:
        return pcm, None
    if not record.stream:
        return pcm, measure(pcm, sample_rate)
    leveling = ctx.engine.stream_leveling(record.voice, record.options.loudness.target())
    limiter = PeakLimiter(leveling.gain_db, leveling.true_peak_db, sample_rate)
    return np.concatenate((limiter.push(pcm), limiter.finish())), None


def _by_rate(utterances: list[PlannedUtterance]) -> dict[float, list[int]]:
    groups: dict[float, list[int]] = {}
    for index, utterance in enumerate(utterances):
        groups.setdefault(utterance.rate, []).append(index)
    return groups


def start_job(job_id: str, ctx: JobContext, run: StepRun) -> None:
    """Plan the job, then claim it with its plan in one record write (running, its segment count,
    the plan's audio charged); finish it here if it has one segment, else send its segment tasks (a
    streamed job's first segment is synthesised here first, and announced as soon as it is stored;
    a short streamed job is made and assembled here whole, see :data:`STREAM_INLINE_SEGMENTS`).

    A job that is no longer startable (finished, failed or canceled already) is left alone.
    """
    taken_at = utcnow()
    record = ctx.stores.jobs.get(job_id)
    if record.status not in _STARTABLE:
        # Its webhook event was queued by its terminal write; a batch's finishing task by the terminal
        # write of the batch's last item (a lost one is sent again by the sweeper, ttsq.batch_sweep).
        log.info("job %s is no longer runnable; skipping", job_id)
        return
    try:
        segments = _plan(record, ctx)
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
        audio = _speak(ctx, record, segments[0], f"{job_id}/0", last=True)
        if record.stream:  # the API sends this part while the object is encoded and stored
            _store_part(ctx, run, PartRef(job_id, 0, run.attempt), audio)
        _finish_single(job_id, record, segments[0], audio, ctx, run)
        return
    run.ensure_current()
    ctx.stores.segments.save_plan(job_id, segments)
    log.info("job %s planned: %d segments", job_id, len(segments))
    if record.stream and len(segments) <= STREAM_INLINE_SEGMENTS:
        for index in range(len(segments)):  # each part is announced the moment it is stored
            run_segment(job_id, index, ctx, run, assemble_here=True)
        return
    first = 0
    if record.stream:  # its first part, a short clause, is made here: no queue between it and the API
        run_segment(job_id, 0, ctx, run)
        first = 1
    run.ensure_current()
    model = ctx.engine.model_key(record.voice) if ctx.settings.model_affinity else None
    for start in range(first, len(segments), FAN_OUT_CHUNK):
        ctx.engine.make_way(record.priority)
        ctx.send.segments(job_id, range(start, min(start + FAN_OUT_CHUNK, len(segments))), record.priority, model)


def _plan(record: JobRecord, ctx: JobContext) -> list[list[PlannedUtterance]]:
    settings = ctx.settings
    return ctx.engine.plan_segments(
        record.voice,
        ctx.stores.jobs.text(record.id),
        settings.segment_max_ids,
        record.text_type,
        record.options.paragraph_pause_s,
        synthesis_config(record, settings).sentence_pause_s,
        max_segments=settings.max_job_segments,  # stops planning there
        pronunciation=_pronunciation(record, ctx),
        stream=_streams_clauses(record),
        defer=record.priority is Priority.BULK,
    )


def _streams_clauses(record: JobRecord) -> bool:
    """A streamed job starts with a short clause, unless its format is FLAC: a streamed FLAC has no
    length in its header (decoders that need one refuse it), so a one-sentence FLAC answer stays one
    whole file, as before."""
    return record.stream and record.output.format is not AudioFormat.FLAC


def _pronunciation(record: JobRecord, ctx: JobContext) -> Pronunciation:
    voice = ctx.engine.catalog.get(record.voice)
    return job_pronunciation(record, voice, ctx.stores.lexicons, ctx.settings.voice_lexicons)


def _store_part(ctx: JobContext, run: StepRun, part: PartRef, audio: SegmentAudio) -> tuple[bool, int]:
    """Store this run's part and count its segment done with it; a part that lost the count to
    another attempt is deleted again. Returns (this run counted it, segments done)."""
    run.ensure_current()
    ctx.stores.parts.put(part, audio.pcm.tobytes())
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
    limits = _tenant_limits(record.tenant, ctx)
    delta = planned_ms - record.reserved_audio_ms
    if not ctx.stores.quotas.replan(record.tenant, usage_day(record.created_at), delta, limits):
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

    claimed = ctx.stores.jobs.transition_by(record.id, _STARTABLE, JobStatus.RUNNING, claim)
    if claimed is None or not replaced[0]:  # ended meanwhile, or replanned by another run: give it back
        ctx.stores.quotas.replan(record.tenant, usage_day(record.created_at), -delta, limits)
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
        leveling = leveling_for(record.options.loudness.target(), audio.level, lambda: [audio.pcm], sample_rate)
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


class OwnedObjects:
    """The objects one run of a job's final step stores, each under the run's attempt prefix."""

    def __init__(self, ctx: JobContext, record: JobRecord, run: StepRun) -> None:
        self._ctx = ctx
        self._record = record
        self.run = run
        self.keys: list[str] = []

    def claim(self, *keys: str) -> None:
        """Call before storing ``keys``: the run checks it still holds its step, and the cleanup task
        will delete them when the job expires, whatever becomes of this run."""
        self.run.ensure_current()
        self._ctx.stores.jobs.schedule_objects(self._record, keys)
        self.keys.extend(keys)

    def commit(self) -> None:
        """The job's success write names these objects: they are the job's now. What runs that started
        and never ended stored under the same names (a worker killed between storing and committing)
        is deleted: none of them can commit any more, and nothing else would delete it before the job
        expires. Runs of every step that stores a job's objects count, not only this run's step: a
        streamed job's entry that died while storing its object, and whose assembly the sweeper then
        queued (soak seed 11774874), left its copy beside the assembly's. A run only paused still
        deletes its own when it loses."""
        jobs = self._ctx.stores.jobs
        dead = set().union(*(jobs.step_attempts(self.run.job_id, step) for step in OBJECT_STEPS)) - {self.run.attempt}
        mine = f"/{self.run.attempt}/"
        leftovers = [key.replace(mine, f"/{attempt}/") for attempt in sorted(dead) for key in self.keys]
        self.keys.clear()
        if not leftovers:
            return
        log.info("job %s: deleting what %d dead runs stored", self._record.id, len(dead))
        try:
            self._ctx.stores.objects.delete_many(leftovers)
            self._ctx.stores.jobs.forget_object(*leftovers)
        except (TransientError, redis.RedisError) as e:  # the cleanup task deletes them when the job expires
            log.warning("job %s: leftovers of dead runs kept until the job expires: %s", self._record.id, e)

    def discard(self) -> None:
        """Delete this run's own objects (never another run's: their keys differ)."""
        if self.keys:
            log.info(
                "job %s: %s did not commit; deleting its own %d objects", self._record.id, self.run.step, len(self.keys)
            )
            self._ctx.stores.objects.delete_many(self.keys)
            self._ctx.stores.jobs.forget_object(*self.keys)
            self.keys.clear()


@contextlib.contextmanager
def owned_objects(ctx: JobContext, record: JobRecord, run: StepRun) -> Iterator[OwnedObjects]:
    """Objects the block stores; unless it commits them (its success write named them), they are
    deleted on the way out, so a loser, a job canceled meanwhile or a failed step leaves nothing of
    its own behind, and touches nothing of the winner's."""
    owned = OwnedObjects(ctx, record, run)
    try:
        yield owned
    finally:
        owned.discard()


def _succeed(
    job_id: str, record: JobRecord, result: JobResult | None, synthesis_ms: int, audio_s: float, ctx: JobContext
) -> bool:
    total = record.progress.segments_total or 1
    progress = record.progress.with_sums(total, synthesis_ms, audio_s)

    def changes(current: JobRecord) -> dict[str, Any]:
        return {**finish_changes(current, JobStatus.SUCCEEDED), "result": result, "progress": progress}

    done = ctx.stores.jobs.transition_by(job_id, (JobStatus.RUNNING,), JobStatus.SUCCEEDED, changes)
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
        audio = _speak(ctx, record, utterances, f"{job_id}/{index}", last=index == total - 1)
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

    return leveling_for(record.options.loudness.target(), summary, sample, rate)


def _store_marks(
    ctx: JobContext,
    record: JobRecord,
    timed: Iterable[tuple[PlannedUtterance, UtteranceTiming]],
    sample_rate: int,
    result: JobResult,
    owned: OwnedObjects,
) -> JobResult:
    weigh = ctx.engine.word_weight(record.voice, _pronunciation(record, ctx))
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
