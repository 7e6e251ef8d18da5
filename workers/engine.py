"""The model side of a worker process: voices loaded once, and one batcher in front of them.

Task threads never call a session themselves: they hand phoneme ids to a batcher and wait. Each
process has two: bulk work goes through one, interactive work through the other, on its own thread,
so an interactive utterance never waits for a bulk inference call in progress (calls cannot be
interrupted; ONNX Runtime sessions may be run from two threads at once). The bulk batcher starts no
new call while interactive work is queued or running, so interactive calls soon have the cores to
themselves. This is the module that loads the
inference runtime (ONNX Runtime, espeak-ng); the task module imports it only when a worker starts.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Final

from tts_core.audio import FloatAudio
from tts_core.batching import BatchRecord, BatchResult, DynamicBatcher
from tts_core.catalog import EngineName, KokoroSource, PiperSource, VoiceCatalog, VoiceInfo
from tts_core.config import SynthesisConfig
from tts_core.device import Device
from tts_core.kokoro import KokoroVoice
from tts_core.kokoro import front_end as kokoro_front_end
from tts_core.phonemes import phonemize
from tts_core.plan import PlannedUtterance
from tts_core.runtime import resolve_device
from tts_core.segments import FrontEnd, PiperFrontEnd, iter_plain, iter_segments, iter_ssml
from tts_core.speech_markup import parse_ssml
from tts_core.timing import MODIFIER_SYMBOLS, SILENT_SYMBOLS, TimedAudio, Weigh, WordIds, letter_weight
from tts_core.voice import Voice
from ttsq.errors import PlanTooLong
from ttsq.jobs import Priority, TextType
from ttsq.settings import Settings, get_settings
from workers import metrics
from workers.tuning import batch_plan

log = logging.getLogger(__name__)

_WARM_UP_TEXTS: Final = {EngineName.PIPER: "Warming up.", EngineName.KOKORO: "準備しています。"}
_WARM_UP_LENGTHS = (64, 400)
"""Input lengths run at start for every batch size, so first real calls meet prepared kernels."""

BatchKey = tuple[str, SynthesisConfig]
"""Items share an inference call only with the same voice and options."""

BATCH_PRIORITY: Final = {Priority.INTERACTIVE: 0, Priority.BULK: 1}
"""Batcher order of each job class (lower first)."""

CallObserver = Callable[[BatchKey, BatchRecord], None]

SpeechModel = Voice | KokoroVoice
"""A loaded voice of any engine: both plan utterances, synthesise id batches and speak text."""

SegmentPlan = list[list[PlannedUtterance]]
"""A job's segments, each a list of planned utterances (ids, rate, pauses)."""


class Engine:
    """Loaded voices of this process, keyed by voice id, and the batcher that runs them."""

    def __init__(self, settings: Settings, device: Device) -> None:
        """``device`` is the resolved one (CPU or CUDA): it sizes the batches and loads every voice."""
        self._settings = settings
        self.device = device
        self.catalog = VoiceCatalog.discover(settings.voices_dir)
        self._voices: dict[str, SpeechModel] = {}
        self._weights: dict[str, Weigh] = {}
        self._lock = threading.Lock()
        plan = batch_plan(settings.worker, device)
        self.interactive: DynamicBatcher[BatchKey] = DynamicBatcher(
            self._run,
            plan.max_batch,
            plan.max_wait_ms,
            name="ttsq-batcher-interactive",
            observe=self._observer(Priority.INTERACTIVE),
        )
        self.batcher: DynamicBatcher[BatchKey] = DynamicBatcher(
            self._run,
            plan.max_batch,
            plan.max_wait_ms,
            defer_to=self.interactive,
            observe=self._observer(Priority.BULK),
        )
        metrics.WORKER_INFO.labels(device.value, str(plan.max_batch)).set(1)
        log.info("engine on %s: max_batch=%d max_wait_ms=%g", device.value, plan.max_batch, plan.max_wait_ms)

    def _observer(self, lane: Priority) -> CallObserver:
        def observe(key: BatchKey, record: BatchRecord) -> None:
            voice_id = key[0]
            metrics.observe_call(self.device.value, lane.value, self.sample_rate(voice_id), record, voice_id)

        return observe

    @property
    def healthy(self) -> bool:
        """Both batcher threads run: without them every task would wait forever."""
        return self.batcher.alive and self.interactive.alive

    def voice(self, voice_id: str) -> SpeechModel:
        """The loaded voice, loading it on first use."""
        with self._lock:
            loaded = self._voices.get(voice_id)
            if loaded is None:
                loaded = self._load(voice_id)
                self._voices[voice_id] = loaded
            return loaded

    def _load(self, voice_id: str) -> SpeechModel:
        info = self.catalog.get(voice_id)
        started = time.perf_counter()
        worker = self._settings.worker
        voice = load_voice(info, self.device, worker.intra_op_threads, worker.spin_wait)
        voice.speak(_WARM_UP_TEXTS[info.engine], SynthesisConfig())
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
    ) -> SegmentPlan:
        """Utterances of ``text`` (none over ``max_ids`` or the engine's own limit), with their rates and
        pauses (``paragraph_pause_s`` after a paragraph: a blank line of plain text, an SSML ``<p>``;
        the settings' by default), packed into segments of at most ``max_ids`` (pauses weigh too,
        ``sentence_pause_s`` where the sentence pause falls); needs the voice's front end, not its
        model. Past ``max_segments`` it stops at once and raises :class:`PlanTooLong`, having planned
        no further than the limit."""
        paragraph = self._settings.paragraph_pause_s if paragraph_pause_s is None else paragraph_pause_s
        sentence = self._settings.sentence_pause_s if sentence_pause_s is None else sentence_pause_s
        info = self.catalog.get(voice_id)
        front_end = front_end_of(info)
        budget = min(max_ids, front_end.max_ids or max_ids)  # the engine's own context limit
        if text_type is TextType.SSML:
            utterances = iter_ssml(parse_ssml(text, default_lang=info.language), front_end, budget, paragraph)
        else:
            utterances = iter_plain(text, front_end, budget, paragraph)
        segments: SegmentPlan = []
        for segment in iter_segments(utterances, max_ids, sentence):
            segments.append(segment)
            if max_segments is not None and len(segments) > max_segments:
                raise PlanTooLong(len(segments), max_segments, "stopped")
        return segments

    def _run(self, key: BatchKey, batch: list[Sequence[int]]) -> list[FloatAudio] | list[TimedAudio]:
        voice_id, config = key
        voice = self.voice(voice_id)
        if isinstance(voice, Voice):  # its durations time the words
            return voice.synthesize_timed(batch, config)
        return voice.synthesize_ids(batch, config)

    def word_weight(self, voice_id: str) -> Weigh:
        """How many phonemes a word of this voice's text becomes (espeak-ng for Piper voices), to
        match written words with voiced ones."""
        info = self.catalog.get(voice_id)
        if isinstance(info.source, PiperSource):
            return self._weights.setdefault(
                info.source.config.espeak_voice, espeak_weight(info.source.config.espeak_voice)
            )
        return letter_weight

    def word_ids(self, voice_id: str) -> WordIds | None:
        """The voice's word-break and silent ids, if its model times its input ids (Piper)."""
        voice = self.voice(voice_id)
        return voice.word_ids if isinstance(voice, Voice) else None

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
        self.voice(voice_id)  # load in the caller's thread, not in the batcher's
        lane = self.interactive if priority is Priority.INTERACTIVE else self.batcher
        in_flight = metrics.SEGMENTS_IN_FLIGHT.labels(self.device.value)
        with in_flight.track_inprogress():
            return lane.run_all((voice_id, config), utterances, tag, BATCH_PRIORITY[priority])

    def records(self) -> list[BatchRecord]:
        """Recent inference calls of both batchers, oldest first."""
        return sorted([*self.batcher.records(), *self.interactive.records()], key=lambda r: r.started_at)

    def warm_up(self) -> None:
        """Load the default voice and any configured to preload, then run each batch shape once."""
        for voice_id in dict.fromkeys([self._settings.default_voice, *self._settings.worker.preload_voices]):
            self.voice(voice_id)
        voice = self.voice(self._settings.default_voice)
        if not isinstance(voice, Voice):  # only Piper graphs take batches: nothing more to prepare
            return
        size = 1
        while size <= self.batcher.max_batch:
            for length in _WARM_UP_LENGTHS:
                voice.synthesize_ids([[1] + [0, 8] * ((length - 2) // 2) + [2]] * size, SynthesisConfig())
            size *= 2

    def close(self) -> None:
        self.interactive.close()
        self.batcher.close()


def espeak_weight(espeak_voice: str) -> Weigh:
    """Phonemes espeak-ng makes of a word alone (cached: a book repeats its words)."""

    @lru_cache(maxsize=65536)
    def weigh(word: str) -> int:
        symbols = (p for sentence in phonemize(word, espeak_voice) for p in sentence)
        return sum(p not in SILENT_SYMBOLS and p not in MODIFIER_SYMBOLS for p in symbols) or 1

    return weigh


def load_voice(info: VoiceInfo, device: Device, intra_op_threads: int, spin_wait: bool) -> SpeechModel:
    """A voice loaded with its engine's own code, on ``device``."""
    if isinstance(info.source, KokoroSource):
        return KokoroVoice.load(info.source.name, device, intra_op_threads, spin_wait)
    files = info.source
    return Voice.load(files.model_path, files.config_path, device, intra_op_threads, spin_wait)


def front_end_of(info: VoiceInfo) -> FrontEnd:
    """The text front end of a voice's engine."""
    if isinstance(info.source, PiperSource):
        return PiperFrontEnd(info.source.config)
    return kokoro_front_end(info.source.folder)


_engine: Engine | None = None
_engine_pid: int | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """This process's engine; a forked child never reuses its parent's sessions."""
    global _engine, _engine_pid
    with _engine_lock:
        if _engine is None or _engine_pid != os.getpid():
            settings = get_settings()
            _engine = Engine(settings, resolve_device(settings.worker.device))
            _engine_pid = os.getpid()
        return _engine
