"""What machine a benchmark ran on, recorded with every result."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import onnxruntime as ort

from tts_core.base.device import cuda_device_count


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[str]:
    if cuda_device_count() == 0:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return [f"{cuda_device_count()} CUDA device(s)"]
    return [line.strip() for line in out.splitlines() if line.strip()]


def describe() -> dict[str, Any]:
    return {
        "cpu_model": _cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": _memory_gib(),
        "gpus": _gpus(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "host": platform.node(),
    }
