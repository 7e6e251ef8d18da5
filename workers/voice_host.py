"""The model side of a worker process: voices loaded once, and one batcher in front of them.

Task threads never call a session themselves: they hand phoneme ids to a batcher and wait. Each
process has two: bulk work goes through one, interactive work through the other, on its own thread,
so an interactive utterance never waits for a bulk inference call in progress (ONNX Runtime sessions
may be run from two threads at once). The bulk batcher starts no new call while interactive work is
queued or running, and (``TTSQ_WORKER__PREEMPT_BULK``) stops the bulk call running when interactive
work arrives, to run it again after, so interactive calls have the cores to themselves at once.
This is the module that loads the
inference runtime (ONNX Runtime, espeak-ng); the task module imports it only when a worker starts.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from tts_core.base.audio import FloatAudio
from tts_core.base.config import SynthesisConfig
from tts_core.base.device import CPU_PROVIDER, Device, Spinning
from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import TimedAudio, Weigh, WordIds
from tts_core.frontend.segments import iter_plain, iter_segments, iter_ssml, iter_stream_segments
from tts_core.lexicon.pronunciation import Pronunciation, spoken_weight
from tts_core.mastering.leveling import Leveling
from tts_core.mastering.loudness import LoudnessTarget
from tts_core.text.speech_markup import parse_ssml
from tts_core.voices.batching import MAX_DEFER_S, BatchResult, CallRecord, CallStop, DynamicBatcher
from tts_core.voices.calibration import calibrated_leveling
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.engines import SpeechModel, engine_of
from tts_core.voices.runtime import stoppable_run
from ttsq import broker_transport
from ttsq.constants import model_queue
from ttsq.cpu_priority import BULK_NICENESS, lower_thread_for_good, normal_thread
from ttsq.errors import PlanTooLong
from ttsq.job_record import Priority, TextType
from ttsq.settings import Settings
from workers import metrics
from workers.models import LoadedModels, ModelEvents
from workers.tuning import batch_plan
from workers.twin_sessions import TwinSessions

log = logging.getLogger(__name__)

_WARM_UP_LENGTHS = (64, 400)
"""Input lengths run at start for every batch size, so first real calls meet prepared kernels."""

BatchKey = tuple[str, SynthesisConfig]
"""Items share an inference call only with the same voice and options."""

BATCH_PRIORITY: Final = {Priority.INTERACTIVE: 0, Priority.BULK: 1}
"""Batcher order of each job class (lower first)."""

CallObserver = Callable[[BatchKey, CallRecord], None]

SegmentPlan = list[list[PlannedUtterance]]
"""A job's segments, each a list of planned utterances (ids, rate, pauses)."""


class VoiceHost:
    """Loaded voices of this process, keyed by voice id, and the batchers that run them (not an
    engine: engines are the kinds of voice, ``tts_core.voices.engines.SpeechEngine``)."""

    def __init__(self, settings: Settings, device: Device) -> None:
        """``device`` is the resolved one (CPU or CUDA): it sizes the batches and loads every voice."""
        self._settings = settings
        self.device = device
        self.catalog = VoiceCatalog.discover(settings.voices_dir)
        self.models: LoadedModels[SpeechModel] = LoadedModels(
            self._load,
            self._share,
            self.model_key,
            settings.worker.max_loaded_models,
            ModelEvents(self._loaded, self._evicted, self._count),
        )
        self.models.pin([settings.default_voice, *settings.worker.preload_voices])
        self._levelings: dict[tuple[str, LoudnessTarget], Leveling] = {}
        self._lowered_bulk_threads: set[threading.Thread] = set()
        plan = batch_plan(settings.worker, device)
        self.twins = TwinSessions(self._load_twin, self._share) if plan.parallel_calls > 1 else None
        self.interactive: DynamicBatcher[BatchKey] = DynamicBatcher(
            self._run,
            plan.max_batch,
            plan.max_wait_ms,
            name="ttsq-batcher-interactive",
            observe=self._observer(Priority.INTERACTIVE),
            parallel_calls=plan.parallel_calls,
        )
        self.batcher: DynamicBatcher[BatchKey] = DynamicBatcher(
            self._run_bulk,
            plan.max_batch,
            plan.max_wait_ms,
            defer_to=self.interactive,
            observe=self._observer(Priority.BULK),
            preemptible=settings.worker.preempt_bulk,
            parallel_calls=plan.parallel_calls,
        )
        metrics.WORKER_INFO.labels(device.value, str(plan.max_batch)).set(1)
        log.info(
            "engine on %s: max_batch=%d max_wait_ms=%g parallel_calls=%d",
            device.value,
            plan.max_batch,
            plan.max_wait_ms,
            plan.parallel_calls,
        )

    def _observer(self, lane: Priority) -> CallObserver:
        def observe(key: BatchKey, record: CallRecord) -> None:
            voice_id = key[0]
            metrics.observe_call(self.device.value, lane.value, self.sample_rate(voice_id), record, voice_id)

        return observe

    @property
    def healthy(self) -> bool:
        """Both batcher threads run: without them every task would wait forever."""
        return self.batcher.alive and self.interactive.alive

    def voice(self, voice_id: str) -> SpeechModel:
        """The loaded voice, loading its model on first use (see :mod:`workers.models`)."""
        return self.models.get(voice_id)

    def model_key(self, voice_id: str) -> str:
        """The model the voice runs on (voices that are styles of one model share it)."""
        return self.catalog.model_key(voice_id)

    def _share(self, model: SpeechModel, voice_id: str) -> SpeechModel:
        info = self.catalog.get(voice_id)
        return engine_of(info).with_voice(model, info)

    def _loaded(self, key: str) -> None:
        metrics.MODEL_LOADS.labels(self.device.value, key).inc()

    def _evicted(self, key: str) -> None:
        metrics.MODEL_EVICTIONS.labels(self.device.value, key).inc()
        if self.twins is not None:
            self.twins.drop(key)

    def _count(self, models: int) -> None:
        metrics.MODELS_LOADED.labels(self.device.value).set(models)
        queue = self._settings.queue
        held = self.models.loaded()
        broker_transport.prefer(model_queue(queue, key, interactive) for key in held for interactive in (True, False))

    def _spinning(self) -> Spinning:
        """The spinning setting of a model's sessions: ``AUTO`` spins within calls where models have
        twins here, to take the calls that meet another."""
        return self._settings.worker.spinning.for_model(self.twins is not None)

    def _load(self, voice_id: str) -> SpeechModel:
        info = self.catalog.get(voice_id)
        engine = engine_of(info)
        started = time.perf_counter()
        worker = self._settings.worker
        with normal_thread():  # its inference threads start here, and keep this thread's nice
            voice = engine.load(info, self.device, worker.intra_op_threads, self._spinning())
        metrics.MODEL_LOAD_SECONDS.labels(self.device.value, voice_id).set(time.perf_counter() - started)
        log.info(
            "loaded voice %s on %s in %.1fs (pid %d)",
            voice_id,
            voice.providers[0],
            time.perf_counter() - started,
            os.getpid(),
        )
        return voice

    def sample_rate(self, voice_id: str) -> int:
        """From the catalog: knowing it loads no model."""
        return self.catalog.get(voice_id).sample_rate

    def plan_segments(
        self,
        voice_id: str,
        text: str,
        max_ids: int,
        text_type: TextType = TextType.TEXT,
        paragraph_pause_s: float | None = None,
        sentence_pause_s: float | None = None,
        max_segments: int | None = None,
        pronunciation: Pronunciation | None = None,
        stream: bool = False,
        defer: bool = False,
        speed: float = 1.0,
    ) -> SegmentPlan:
        """Utterances of ``text`` (none over ``max_ids`` or the engine's own limit), with their rates and
        pauses (``paragraph_pause_s`` after a paragraph: a blank line of plain text, an SSML ``<p>``;
        the settings' by default), packed into segments of at most ``max_ids`` (pauses weigh too,
        ``sentence_pause_s`` where the sentence pause falls); needs the voice's front end, not its
        model. Past ``max_segments`` it stops at once and raises :class:`PlanTooLong`, having planned
        no further than the limit. ``pronunciation`` (lexicons, normalisation) changes what is said,
        never the spans utterances keep in ``text``. ``stream``: plain text's first sentence is cut
        after its first clause, each piece a segment of its own, so the first audio is short (the
        pieces paced for speech at ``speed``, ``tts_core.text.first_part``). ``defer`` (a bulk
        job): before each segment, wait (up to ``MAX_DEFER_S``) while interactive work is on its
        way or running here, as bulk inference calls do, so a long job's planning (phonemisation, on
        a task thread) leaves interactive tasks the cores and the interpreter's lock (issue 34:
        another tenant's 150,000-character jobs)."""
        paragraph = self._settings.paragraph_pause_s if paragraph_pause_s is None else paragraph_pause_s
        sentence = self._settings.sentence_pause_s if sentence_pause_s is None else sentence_pause_s
        info = self.catalog.get(voice_id)
        engine = engine_of(info)
        if pronunciation is not None and pronunciation.changes_anything:
            front_end = engine.spoken_front_end(info, pronunciation)
        else:
            front_end = engine.front_end(info)
        budget = min(max_ids, front_end.max_ids or max_ids)  # the engine's own context limit
        if text_type is TextType.SSML:
            utterances = iter_ssml(parse_ssml(text, default_lang=info.language), front_end, budget, paragraph)
        else:
            utterances = iter_plain(text, front_end, budget, paragraph, first_clause=stream, speed=speed)
        grouped = iter_stream_segments if stream else iter_segments
        segments: SegmentPlan = []
        for segment in grouped(utterances, max_ids, sentence):
            if defer:
                self.make_way(Priority.BULK)
            segments.append(segment)
            if max_segments is not None and len(segments) > max_segments:
                raise PlanTooLong(len(segments), max_segments, "stopped")
        return segments

    def make_way(self, priority: Priority) -> None:
        """Between the stages of a bulk step (planning each segment, speaking, storing, encoding
        each part), wait (up to ``MAX_DEFER_S``) while interactive work is on its way or running
        here, as bulk inference calls do: a waiting task thread holds neither a core nor the
        interpreter's lock, which another tenant's short job needs at each of its own steps
        (issue 34: another tenant's amplified bulk jobs took a short job's run from 0.11 to 0.32 s)."""
        if priority is Priority.BULK:
            self.interactive.wait_idle(MAX_DEFER_S)

    def _run_bulk(self, key: BatchKey, batch: list[Sequence[int]], stop: CallStop) -> Sequence[FloatAudio | TimedAudio]:
        """The bulk batcher's calls, each of its threads stepped back for good at its first (they
        run nothing else): a bulk call an interactive one does not stop takes only what the cores
        have left."""
        if threading.current_thread() not in self._lowered_bulk_threads:
            lower_thread_for_good(BULK_NICENESS)
            self._lowered_bulk_threads.add(threading.current_thread())
        return self._run(key, batch, stop)

    def _run(self, key: BatchKey, batch: list[Sequence[int]], stop: CallStop) -> Sequence[FloatAudio | TimedAudio]:
        """A call on the voice's session; one that begins while the batcher is under load (beside
        another call, or moments after two ran at once: ``CallStop.lately_beside``) on the model's
        one-thread twin once it is loaded (asked for here, the first time). So under load calls run
        two by two on a thread each, the most 2 cores do, and the model's own session, whose threads
        spin within a call (``Spinning.AUTO``), runs only calls that have the cores to themselves.
        Measured for both engines (docs/PERFORMANCE.md): two Piper calls at once on one thread each
        make about 1.16x the audio of calls one at a time on the two-thread session, two Kokoro calls
        at once on the twin 1.11x that of two at once on the two-thread session, and a lone Kokoro
        call that spins within the call takes 0.97x the time of one whose threads sleep."""
        voice_id, config = key
        model = self.voice(voice_id)
        if stop.lately_beside and self.twins is not None:
            model = self.twins.get(self.model_key(voice_id), voice_id) or model
        return model.synthesize_batch(batch, config, stoppable_run(stop))

    def _load_twin(self, voice_id: str) -> SpeechModel:
        """The voice's model again, on one ONNX Runtime thread (``TwinSessions``)."""
        info = self.catalog.get(voice_id)
        with normal_thread():
            return engine_of(info).load(info, self.device, 1, self._spinning())

    def word_weight(self, voice_id: str, pronunciation: Pronunciation | None = None) -> Weigh:
        """How many phonemes a word of this voice's text becomes (its engine's guess, of what the
        word is said as), to match written words with voiced ones."""
        info = self.catalog.get(voice_id)
        weigh = engine_of(info).word_weight(info)
        if pronunciation is None or not pronunciation.changes_anything:
            return weigh
        return spoken_weight(weigh, pronunciation)

    def stream_leveling(self, voice_id: str, target: LoudnessTarget) -> Leveling:
        """The voice's calibrated leveling for ``target``, for streamed jobs (which cannot be measured
        whole first): measured on the first streamed job that asks, then kept."""
        key = (voice_id, target)
        if (known := self._levelings.get(key)) is not None:
            return known
        with self.models.using(voice_id) as model:
            leveling = calibrated_leveling(model, self.catalog.get(voice_id).language, target)
        log.info("voice %s calibrated for %s: gain %+.1f dB", voice_id, target, leveling.gain_db)
        self._levelings[key] = leveling
        return leveling

    def word_ids(self, voice_id: str) -> WordIds | None:
        """The voice's word-break and silent ids, if its model times its input ids."""
        return self.voice(voice_id).word_ids

    def synthesize(
        self,
        voice_id: str,
        config: SynthesisConfig,
        utterances: Sequence[Sequence[int]],
        tag: str,
        priority: Priority = Priority.BULK,
    ) -> list[BatchResult]:
        """Synthesise utterances through the batcher of their class (they may share calls with other
        tasks' utterances of the same class)."""
        lane = self.interactive if priority is Priority.INTERACTIVE else self.batcher
        in_flight = metrics.SEGMENTS_IN_FLIGHT.labels(self.device.value)
        # Loaded in the caller's thread, not in the batcher's, and kept loaded until the calls end.
        with self.models.using(voice_id), in_flight.track_inprogress():
            return lane.run_all((voice_id, config), utterances, tag, BATCH_PRIORITY[priority])

    def records(self) -> list[CallRecord]:
        """Recent inference calls of both batchers, oldest first."""
        return sorted([*self.batcher.records(), *self.interactive.records()], key=lambda r: r.started_at)

    def warm_up(self) -> None:
        """Load the default voice and any configured to preload, each speaking its warm-up text, then,
        on an accelerator, run each batch shape once.

        On ONNX Runtime's CPU provider a shape's first call costs what its next does (400 ids: 1.11
        then 1.04 CPU s on 2 cores): nothing to prepare, and running the shapes there only delayed
        the worker's readiness by about 1.3 CPU s.

        Only these are warmed: a voice loaded on demand goes straight to the job that asked for it.
        Its first call is about 0.2 s slower than the next (Kokoro on 2 cores), while a warm-up
        sentence would cost 0.6-0.8 s of both cores, taken from every other job on the worker."""
        for voice_id in dict.fromkeys([self._settings.default_voice, *self._settings.worker.preload_voices]):
            engine = engine_of(self.catalog.get(voice_id))
            self.voice(voice_id).speak(engine.warm_up_text, SynthesisConfig())
        info = self.catalog.get(self._settings.default_voice)
        engine = engine_of(info)
        if not engine.batches:  # one utterance a call: loading spoke its warm-up text, nothing more to prepare
            return
        voice = self.voice(info.id)
        if voice.providers[0] == CPU_PROVIDER:
            return
        sample = engine.front_end(info).phoneme_ids(engine.warm_up_text)[0]  # the shape matters, not the sound
        size = 1
        while size <= self.batcher.max_batch:
            for length in _WARM_UP_LENGTHS:
                ids = list(itertools.islice(itertools.cycle(sample), length))
                voice.synthesize_batch([ids] * size, SynthesisConfig())
            size *= 2

    def close(self) -> None:
        self.interactive.close()
        self.batcher.close()
