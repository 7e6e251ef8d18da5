"""A job's timing marks and subtitles, made at the end of the job and stored beside its audio.

Segments record where their utterances and spoken words lie (``segment_timing``, kept in Redis per
segment); the task that stores the audio walks them in order through a ``MarkBuilder`` and writes
``marks.json`` (the kinds the job asked for) to a temporary file as it goes, and WebVTT and SRT
subtitles cut from every sentence's marks (words help place the cuts even if only sentences were
asked for). Phonemes are timed and kept only for a job that asks for phoneme or viseme marks.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Sequence
from typing import BinaryIO, Final

from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import SegmentTiming, UtteranceTiming, Weigh, WordIds, spoken_words, word_runs
from tts_core.marks.mark_builder import MarkBuilder
from tts_core.marks.phoneme_timing import spoken_phonemes
from tts_core.marks.speech_marks import SOUND_MARK_TYPES, Mark, MarkType, marks_to_json
from tts_core.marks.subtitles import Cue, build_cues, to_srt, to_webvtt
from tts_core.voices.batching import BatchResult
from ttsq.constants import job_object_key
from ttsq.job_record import JobRecord, JobResult
from ttsq.storage import ObjectStore

MARKS_NAME: Final = "marks.json"
WEBVTT_NAME: Final = "subtitles.vtt"
SRT_NAME: Final = "subtitles.srt"
MARKS_CONTENT_TYPE: Final = "application/json"
WEBVTT_CONTENT_TYPE: Final = "text/vtt; charset=utf-8"
SRT_CONTENT_TYPE: Final = "application/x-subrip; charset=utf-8"


def segment_timing(
    utterances: Sequence[PlannedUtterance],
    results: Sequence[BatchResult],
    before_s: Sequence[float],
    after_s: Sequence[float],
    sample_rate: int,
    word_ids: WordIds | None,
    phonemes: bool = False,
) -> SegmentTiming:
    """Where each utterance and its spoken words (and, with ``phonemes``, its phonemes) lie in the
    segment's audio, laid out exactly as ``tts_core.base.audio.timed_pcm`` lays out the samples: the
    words its front end read (one run each), else the runs between word breaks."""
    position = 0
    timings: list[UtteranceTiming] = []
    for utterance, result, before, after in zip(utterances, results, before_s, after_s, strict=True):
        start = position + round(before * sample_rate)
        end = start + len(result.audio)
        words = phones = None
        if word_ids is not None and result.id_samples is not None:
            runs = (
                spoken_words(utterance.ids, result.id_samples, word_ids)
                if utterance.words is None
                else word_runs(utterance.ids, result.id_samples, utterance.words, word_ids)
            )
            words = [(start + s, start + e, n) for s, e, n in runs]
            if phonemes:
                voiced = spoken_phonemes(utterance.ids, result.id_samples, word_ids)
                phones = [(start + s, start + e, p) for s, e, p in voiced]
        timings.append(UtteranceTiming(start, end, words, phones))
        position = end + round(after * sample_rate)
    return SegmentTiming(position, timings)


def wants_phonemes(marks: Iterable[MarkType]) -> bool:
    """Whether a job's marks are made from phonemes, so its segments must keep them."""
    return any(kind in SOUND_MARK_TYPES for kind in marks)


def marks_keys(record: JobRecord, attempt: str) -> dict[str, str]:
    """Where one attempt stores the job's marks and subtitles, by file name."""
    return {
        name: job_object_key(record.tenant, record.id, attempt, name) for name in (MARKS_NAME, WEBVTT_NAME, SRT_NAME)
    }


def store_marks(
    objects: ObjectStore,
    record: JobRecord,
    text: str,
    timed: Iterable[tuple[PlannedUtterance, UtteranceTiming]],
    sample_rate: int,
    result: JobResult,
    weigh: Weigh,
    keys: dict[str, str],
) -> JobResult:
    """Write the job's marks and subtitles beside its audio under ``keys`` (:func:`marks_keys`);
    ``result`` with their keys. ``weigh`` guesses each word's phonemes (``VoiceHost.word_weight``)."""
    kinds = set(record.options.marks)
    builder = MarkBuilder(text, sample_rate, weigh)
    cues: list[Cue] = []
    with tempfile.TemporaryFile(prefix="ttsq-marks-") as sink:
        writer = _JsonArrayWriter(sink)
        for utterance, timing in timed:
            _take(builder.add(utterance, timing), kinds, writer, cues)
        _take(builder.finish(), kinds, writer, cues)
        writer.close()
        sink.seek(0)
        objects.upload(keys[MARKS_NAME], sink, MARKS_CONTENT_TYPE)
    objects.put(keys[WEBVTT_NAME], to_webvtt(cues).encode(), WEBVTT_CONTENT_TYPE)
    objects.put(keys[SRT_NAME], to_srt(cues).encode(), SRT_CONTENT_TYPE)
    return result.model_copy(
        update={"marks_key": keys[MARKS_NAME], "subtitles_key": keys[WEBVTT_NAME], "srt_key": keys[SRT_NAME]}
    )


def _take(marks: list[Mark], kinds: set[MarkType], writer: _JsonArrayWriter, cues: list[Cue]) -> None:
    """One sentence's marks: its cues, and the marks of the asked-for kinds into the file."""
    if marks:
        cues.extend(build_cues(marks))
        writer.write(marks_to_json(m for m in marks if m.type in kinds))


class _JsonArrayWriter:
    """Writes a JSON array item by item, so a book's marks never sit in memory as one document."""

    def __init__(self, sink: BinaryIO) -> None:
        self._sink = sink
        self._count = 0
        sink.write(b"[")

    def write(self, items: Iterable[object]) -> None:
        for item in items:
            self._sink.write(b",\n" if self._count else b"\n")
            self._sink.write(json.dumps(item, ensure_ascii=False).encode())
            self._count += 1

    def close(self) -> None:
        self._sink.write(b"\n]\n" if self._count else b"]\n")
