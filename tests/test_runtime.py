"""Device choice: CUDA only when really usable, and quietly; an explicit ``cuda`` never falls back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tts_core.base.device import CPU_PROVIDER, CUDA_PROVIDER, Device
from tts_core.base.errors import DeviceUnavailable
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.piper_engine import piper_source
from tts_core.voices.runtime import cuda_available, resolve_device
from tts_core.voices.voice import Voice


def voice_paths() -> tuple[str, str]:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    return str(piper_source(info).model_path), str(piper_source(info).config_path)


def test_auto_picks_a_provider_without_printing_errors() -> None:
    model, config = voice_paths()
    probe = (
        "from pathlib import Path; from tts_core.voices.voice import Voice; from tts_core.base.device import Device; "
        f"print(Voice.load(Path({model!r}), Path({config!r}), Device.AUTO, 1).providers[0])"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == (CUDA_PROVIDER if cuda_available() else CPU_PROVIDER)
    assert "error" not in run.stderr.lower()
    assert "libcu" not in run.stderr


def test_explicit_cuda_never_falls_back_to_cpu() -> None:
    model, config = voice_paths()
    if cuda_available():
        assert Voice.load(Path(model), Path(config), Device.CUDA).providers[0] == CUDA_PROVIDER
    else:
        with pytest.raises(DeviceUnavailable, match="no usable CUDA GPU"):
            Voice.load(Path(model), Path(config), Device.CUDA)


def test_the_device_is_resolved_once_to_cpu_or_cuda() -> None:
    expected = Device.CUDA if cuda_available() else Device.CPU
    assert resolve_device(Device.AUTO) is expected
    assert resolve_device(Device.CPU) is Device.CPU
    if cuda_available():
        assert resolve_device(Device.CUDA) is Device.CUDA
    else:
        with pytest.raises(DeviceUnavailable, match="no usable CUDA GPU"):
            resolve_device(Device.CUDA)
