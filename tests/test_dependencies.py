"""Packaging guards: the GPU runtime is not shadowed, and tts_core stays a pure library."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest


def installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="onnxruntime-gpu is the Linux distribution")
def test_cpu_onnxruntime_does_not_shadow_the_gpu_build() -> None:
    assert installed("onnxruntime-gpu"), "onnxruntime-gpu must be installed on Linux"
    assert not installed("onnxruntime"), (
        "both 'onnxruntime' and 'onnxruntime-gpu' are installed: they overwrite the same package and the CUDA "
        "provider disappears; find what pulled 'onnxruntime' in (pip show) and remove it"
    )


def test_onnxruntime_offers_the_cpu_provider() -> None:
    import onnxruntime

    assert "CPUExecutionProvider" in onnxruntime.get_available_providers()


def test_tts_core_imports_no_service_frameworks() -> None:
    probe = "import sys, tts_core; print(sorted(m for m in ('celery', 'fastapi', 'boto3') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
