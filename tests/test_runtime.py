"""Device choice: CUDA only when really usable, and quietly; an explicit ``cuda`` never falls back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tts_core import DEFAULT_VOICE_ID, Device, DeviceUnavailable, Voice, VoiceCatalog
from tts_core.runtime import CPU, CUDA, cuda_available


def voice_paths() -> tuple[str, str]:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    return str(info.model_path), str(info.config_path)


def test_auto_picks_a_provider_without_printing_errors() -> None:
    model, config = voice_paths()
    probe = (
        "from pathlib import Path; from tts_core import Voice, Device; "
        f"print(Voice.load(Path({model!r}), Path({config!r}), Device.AUTO, 1).providers[0])"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == (CUDA if cuda_available() else CPU)
    assert "error" not in run.stderr.lower()
    assert "libcu" not in run.stderr


def test_explicit_cuda_never_falls_back_to_cpu() -> None:
    model, config = voice_paths()
    if cuda_available():
        assert Voice.load(Path(model), Path(config), Device.CUDA).providers[0] == CUDA
    else:
        with pytest.raises(DeviceUnavailable, match="no usable CUDA GPU"):
            Voice.load(Path(model), Path(config), Device.CUDA)
