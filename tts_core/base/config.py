"""Voice configuration (from a Piper ``.onnx.json``) kept apart from per-request synthesis options."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tts_core.base.errors import InvalidOption, VoiceLoadError

BOS: Final = "^"
EOS: Final = "$"
PAD: Final = "_"
"""Piper's framing symbols: an utterance's ids start with BOS, end with EOS, and PAD follows each phoneme."""

DEFAULT_NOISE_SCALE: Final = 0.667
"""Generator noise; Piper's training default."""

DEFAULT_NOISE_W: Final = 0.8
"""Phoneme-duration noise; Piper's training default."""

DEFAULT_SPEED: Final = 1.0
"""Speaking rate multiplier; ``length_scale = 1 / speed``."""

DEFAULT_SENTENCE_PAUSE_S: Final = 0.25
DEFAULT_PARAGRAPH_PAUSE_S: Final = 0.6
"""Silence at the end of an SSML paragraph (``<p>``)."""
"""Silence inserted between sentences."""

DEFAULT_SEGMENT_IDS: Final = 400
"""Phoneme-id budget of a segment (≈ 200 phonemes ≈ 2-3 s of speech): no single model input is longer."""

SPEED_RANGE: Final = (0.25, 4.0)
NOISE_RANGE: Final = (0.0, 2.0)
PAUSE_RANGE: Final = (0.0, 5.0)

HOP_LENGTH: Final = 256
"""Samples per spectrogram frame in Piper's VITS decoder; turns frame counts into sample counts."""


@dataclass(frozen=True)
class VoiceConfig:
    """What a Piper voice's JSON says about it: audio rate, phonemiser voice, id map, speakers."""

    sample_rate: int
    espeak_voice: str
    phoneme_id_map: dict[str, list[int]]
    num_speakers: int = 1
    speaker_id_map: dict[str, int] = field(default_factory=dict)
    language: str = ""
    quality: str = ""
    noise_scale: float = DEFAULT_NOISE_SCALE
    noise_w: float = DEFAULT_NOISE_W
    length_scale: float = 1.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VoiceConfig:
        """Build from the parsed ``.onnx.json`` of a Piper voice."""
        try:
            inference = data.get("inference", {})
            language = data.get("language", {})
            return cls(
                sample_rate=int(data["audio"]["sample_rate"]),
                espeak_voice=str(data["espeak"]["voice"]),
                phoneme_id_map={str(k): list(v) for k, v in data["phoneme_id_map"].items()},
                num_speakers=int(data.get("num_speakers", 1)),
                speaker_id_map={str(k): int(v) for k, v in data.get("speaker_id_map", {}).items()},
                language=str(language.get("code", "") if isinstance(language, dict) else language),
                quality=str(data["audio"].get("quality", "")),
                noise_scale=float(inference.get("noise_scale", DEFAULT_NOISE_SCALE)),
                noise_w=float(inference.get("noise_w", DEFAULT_NOISE_W)),
                length_scale=float(inference.get("length_scale", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise VoiceLoadError(f"voice config is missing or has a malformed field: {e}") from e

    @classmethod
    def from_file(cls, path: Path) -> VoiceConfig:
        """Read a ``NAME.onnx.json`` file."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise VoiceLoadError(f"cannot read voice config {path}: {e}") from e
        return cls.from_dict(data)


def _check_range(name: str, value: float, bounds: tuple[float, float]) -> None:
    low, high = bounds
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidOption(f"{name} must be between {low} and {high}, got {value}")


@dataclass(frozen=True)
class SynthesisConfig:
    """Per-request options. ``None`` means "use the voice's own default"."""

    speed: float = DEFAULT_SPEED
    """Speaking rate: 2.0 is twice as fast, 0.5 half as fast."""

    noise_scale: float | None = None
    """Generator noise (timbre variation); 0 makes output deterministic."""

    noise_w: float | None = None
    """Duration noise (rhythm variation); 0 makes durations deterministic."""

    sentence_pause_s: float = DEFAULT_SENTENCE_PAUSE_S
    """Silence between sentences, in seconds."""

    speaker_id: int | None = None
    """Speaker index for multi-speaker voices; ignored by single-speaker ones."""

    def __post_init__(self) -> None:
        _check_range("speed", self.speed, SPEED_RANGE)
        _check_range("sentence_pause_s", self.sentence_pause_s, PAUSE_RANGE)
        if self.noise_scale is not None:
            _check_range("noise_scale", self.noise_scale, NOISE_RANGE)
        if self.noise_w is not None:
            _check_range("noise_w", self.noise_w, NOISE_RANGE)

    def scales(self, voice: VoiceConfig) -> tuple[float, float, float]:
        """The model's ``scales`` input: (noise_scale, length_scale, noise_w)."""
        noise_scale = voice.noise_scale if self.noise_scale is None else self.noise_scale
        noise_w = voice.noise_w if self.noise_w is None else self.noise_w
        return noise_scale, voice.length_scale / self.speed, noise_w
