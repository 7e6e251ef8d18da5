"""What a speech engine offers, and the one registry that says which engine a voice has.

An engine is a model family (Piper, Kokoro…): it lists its voices, loads one on a device, brings
the text front end its model reads, and states what callers must know without asking which engine
they hold: whether its model times every input id (word marks), whether one call takes several
utterances (batch shapes worth preparing), about how much audio a planned id makes, and how to
weigh a written word. Everything above ``tts_core`` asks the engine of a voice
(:func:`engine_of`), never its class.

This module and the engines' own modules are light: the API imports them through the catalog, so
they load no inference runtime; an engine imports its model and front end inside :meth:`load`,
:meth:`front_end` and :meth:`word_weight`, which only workers call. A new engine is one module that
subclasses :class:`SpeechEngine` and calls :func:`register`; ttsq's own are listed in
:data:`BUILT_IN_ENGINES`.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Protocol, TypeVar

from tts_core.base.audio import PCM16, FloatAudio
from tts_core.base.config import SynthesisConfig
from tts_core.base.device import Device, Spinning
from tts_core.base.errors import VoiceLoadError
from tts_core.base.timing import TimedAudio, Weigh, WordIds, letter_weight
from tts_core.voices.voice_info import VoiceInfo

if TYPE_CHECKING:
    import onnxruntime as ort

    from tts_core.frontend.segments import FrontEnd
    from tts_core.lexicon.pronunciation import Pronunciation


class SpeechModel(Protocol):
    """A loaded voice of any engine, with its own inference session: what the worker runs."""

    @property
    def sample_rate(self) -> int: ...

    @property
    def providers(self) -> list[str]:
        """ONNX Runtime's execution providers of its session, the one in use first."""

    @property
    def word_ids(self) -> WordIds | None:
        """Which input ids break words or make no sound of one; None if the model times no ids."""

    def synthesize_ids(self, batch: Sequence[Sequence[int]], config: SynthesisConfig) -> list[FloatAudio]:
        """The audio of each utterance's id list, in one inference call where the model takes several."""

    def synthesize_batch(
        self, batch: Sequence[Sequence[int]], config: SynthesisConfig, run_options: ort.RunOptions | None = None
    ) -> Sequence[FloatAudio | TimedAudio]:
        """As :meth:`synthesize_ids`, with the samples each id lasts where the model says
        (:class:`TimedAudio`): what the worker's batcher runs; ``run_options`` may stop it early."""

    def speak(self, text: str, config: SynthesisConfig) -> PCM16:
        """The whole text as one PCM array (the warm-up at load)."""


class SpeechEngine(ABC):
    """A model family: its voices, how to load and feed them, and what callers must know of it."""

    name: ClassVar[str]
    """The engine as users see it (``GET /v1/voices``'s ``engine``) and the registry knows it."""
    times_words: ClassVar[bool]
    """Its model says how long each input id lasts, so word marks can be made."""
    times_phonemes: ClassVar[bool] = False
    """Its model says how long each input id lasts and its ids are phoneme symbols (its model's
    ``word_ids`` has ``symbols``), so phoneme and viseme marks can be made."""
    batches: ClassVar[bool]
    """One inference call takes several utterances, so each batch shape is worth preparing at start."""
    seconds_per_id: ClassVar[float]
    """Audio a planned model id makes at speed 1, about (what a job's plan reserves of its tenant's day)."""
    warm_up_text: ClassVar[str]
    """Spoken once by each voice a worker preloads, in the engine's language, so the first real calls
    meet prepared kernels (a voice loaded on demand skips it: its job is waiting)."""

    @abstractmethod
    def voices(self, voices_dir: Path | None) -> list[VoiceInfo]:
        """The voices of this engine this process can use (``voices_dir``: the configured folder of
        voice files, an existing one, or None); reads no model."""

    @abstractmethod
    def load(self, info: VoiceInfo, device: Device, intra_op_threads: int, spinning: Spinning) -> SpeechModel:
        """The voice loaded on ``device`` (a resolved one, never ``auto``) with its own session."""

    def model_key(self, info: VoiceInfo) -> str:
        """What the voice's loaded weights are known by: voices of one key share one loaded model (a
        worker loads, counts and evicts models, not voices). By default each voice is its own model
        (a multi-speaker voice is already one model: its speakers are an input)."""
        return info.id

    def with_voice(self, model: SpeechModel, info: VoiceInfo) -> SpeechModel:
        """Voice ``info`` on ``model``, a loaded model of the same :meth:`model_key` (loaded for
        another of its voices), without loading the weights again; by default the model itself."""
        return model

    @abstractmethod
    def front_end(self, info: VoiceInfo) -> FrontEnd:
        """The voice's text front end: its sentences, its model's ids and their limit per utterance."""

    def spoken_front_end(self, info: VoiceInfo, pronunciation: Pronunciation) -> FrontEnd:
        """The voice's front end reading text as ``pronunciation`` says (lexicons, normalisation)."""
        from tts_core.frontend.spoken_front_end import SpokenFrontEnd

        return SpokenFrontEnd(self.front_end(info), pronunciation)

    def unspeakable_phonemes(self, info: VoiceInfo, ipa: str) -> str | None:
        """Why the voice cannot say a lexicon entry's IPA (the symbols it lacks), or None if it can;
        by default an engine says no IPA from a lexicon."""
        return f"{self.name} voices do not take IPA lexicon entries"

    def word_weight(self, info: VoiceInfo) -> Weigh:
        """How many phonemes a written word of the voice's text becomes, to match written words with
        voiced ones; about one a letter unless the engine knows better."""
        return letter_weight

    def least_segments(self, text: str, segment_max_ids: int) -> int:
        """A lower bound of the segments of at most ``segment_max_ids`` ids a plan of ``text`` makes,
        known without the front end, so the API can refuse a text that certainly plans too long;
        none better than zero unless the engine knows one."""
        return 0


E = TypeVar("E", bound=SpeechEngine)

BUILT_IN_ENGINES: Final = ("tts_core.voices.kokoro_engine", "tts_core.voices.piper_engine")
"""Modules of the engines ttsq ships, each registering itself, imported on the registry's first use.
Kokoro's comes first: where two engines list a voice of the same id, the later one's wins, so a
Piper folder voice keeps overriding any other, as it overrides a bundled one."""

_engines: dict[str, SpeechEngine] = {}
_built_in_loaded = False
_lock = threading.Lock()


def register(engine: E) -> E:
    """Make ``engine`` known by its name (an engine module calls this once, at import); returns it."""
    known = _engines.get(engine.name)
    if known is not None and known is not engine:
        raise ValueError(f"a speech engine named {engine.name!r} is already registered")
    _engines[engine.name] = engine
    return engine


def unregister(name: str) -> None:
    """Forget the engine of that name (a test's engine, once the test is done)."""
    _engines.pop(name, None)


def registered() -> list[SpeechEngine]:
    """Every known engine: the built-in ones in :data:`BUILT_IN_ENGINES`' order (whichever module a
    process happened to import first), then the others in the order they registered."""
    with _lock:
        global _built_in_loaded
        if not _built_in_loaded:
            for module in BUILT_IN_ENGINES:
                importlib.import_module(module)
            _built_in_loaded = True
    engines = list(_engines.values())
    rank = {module: n for n, module in enumerate(BUILT_IN_ENGINES)}
    return sorted(engines, key=lambda e: rank.get(type(e).__module__, len(rank)))


def engine_named(name: str) -> SpeechEngine:
    """The engine of that name, or :class:`VoiceLoadError` naming the known ones."""
    for engine in registered():
        if engine.name == name:
            return engine
    known = ", ".join(e.name for e in registered())
    raise VoiceLoadError(f"no speech engine named {name!r}; known engines: {known}")


def engine_of(info: VoiceInfo) -> SpeechEngine:
    """The engine of a voice of the catalog."""
    return engine_named(info.engine)
