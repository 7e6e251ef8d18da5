"""A job's text planned into segments and a segment spoken: the batcher's calls, the pauses and gains
between utterances, the timing marks need, and a streamed segment's leveling. No record is written here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

import numpy as np
from opentelemetry.util.types import AttributeValue

from tts_core.base.audio import PCM16, gain_of, timed_pcm
from tts_core.base.config import SPEED_RANGE, SynthesisConfig
from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import SegmentTiming
from tts_core.lexicon.pronunciation import Pronunciation
from tts_core.mastering.formats import AudioFormat
from tts_core.mastering.level_meter import LevelSummary, measure
from tts_core.mastering.limiter import PeakLimiter
from tts_core.text.speech_markup import VOLUME_RANGE_DB
from tts_core.voices.batching import BatchResult
from ttsq import tracing
from ttsq.job_record import JobRecord, Priority
from ttsq.settings import Settings
from workers.job_context import JobContext
from workers.marks_output import segment_timing, wants_phonemes
from workers.pronunciations import job_pronunciation


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


def speak(ctx: JobContext, record: JobRecord, utterances: list[PlannedUtterance], tag: str, last: bool) -> SegmentAudio:
    """Synthesise one segment's utterances through the batcher (those of one rate share calls) and
    join them with their pauses; a segment that is not the job's last ends with the pause after its
    last utterance, so parts are simply concatenated."""
    config = synthesis_config(record, ctx.settings)
    with tracing.span("ttsq.synthesize", attributes={"ttsq.voice": record.voice}) as span:
        results: dict[int, BatchResult] = {}
        for rate, indexes in _by_rate(utterances).items():
            rated = replace(config, speed=min(max(config.speed * rate, SPEED_RANGE[0]), SPEED_RANGE[1]))
            ids = [utterances[i].ids for i in indexes]
            spoken = ctx.engine.synthesize(record.voice, rated, ids, tag, record.priority)
            results.update(zip(indexes, spoken, strict=True))
        ordered = [results[i] for i in range(len(utterances))]
        span.set_attributes(_call_attributes(ordered))
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


def _call_attributes(results: list[BatchResult]) -> dict[str, AttributeValue]:
    """The inference calls that spoke a segment, as its span's attributes: a call that served
    several jobs' segments has the same id in each of their spans (``ttsq.batch.call_ids``)."""
    calls = {r.call_id: r for r in results}  # one utterance's result per call: the call's figures
    return {
        "ttsq.utterances": len(results),
        "ttsq.batch.call_ids": list(calls),
        "ttsq.batch.sizes": [r.batch_size for r in calls.values()],
        "ttsq.batch.call_ms": [round(r.run_ms, 3) for r in calls.values()],
        "ttsq.synthesis_ms": round(sum(r.share_ms for r in results), 3),
    }


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


def plan_segments(record: JobRecord, text: str, ctx: JobContext) -> list[list[PlannedUtterance]]:
    settings = ctx.settings
    return ctx.engine.plan_segments(
        record.voice,
        text,
        settings.segment_max_ids,
        record.text_type,
        record.options.paragraph_pause_s,
        synthesis_config(record, settings).sentence_pause_s,
        max_segments=settings.max_job_segments,  # stops planning there
        pronunciation=pronunciation_of(record, ctx),
        stream=_streams_clauses(record),
        defer=record.priority is Priority.BULK,
        speed=record.options.speed,
    )


def _streams_clauses(record: JobRecord) -> bool:
    """A streamed job starts with a short clause, unless its format is FLAC: a streamed FLAC has no
    length in its header (decoders that need one refuse it), so a one-sentence FLAC answer stays one
    whole file, as before."""
    return record.stream and record.output.format is not AudioFormat.FLAC


def pronunciation_of(record: JobRecord, ctx: JobContext) -> Pronunciation:
    """The job's lexicons and normalisation for its voice, in a span of its own: a large lexicon's
    first compile (an index, or Kokoro's user dictionary) is where a slow planning goes."""
    voice = ctx.engine.catalog.get(record.voice)
    with tracing.span("ttsq.lexicons", attributes={"ttsq.lexicons": len(record.options.lexicons)}):
        return job_pronunciation(record, voice, ctx.stores.lexicons, ctx.settings.voice_lexicons)
