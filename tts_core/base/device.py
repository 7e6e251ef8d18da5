"""Where inference runs, as plain names: importing this module loads no inference runtime.

Settings, the API and the worker launcher need the device names and the GPU count; only a process
that builds a session imports ONNX Runtime (``tts_core.voices.runtime``).
"""

from __future__ import annotations

import ctypes
from enum import StrEnum
from typing import Final

CUDA_PROVIDER: Final = "CUDAExecutionProvider"
CPU_PROVIDER: Final = "CPUExecutionProvider"


class Device(StrEnum):
    """Where inference should run."""

    AUTO = "auto"
    """CUDA when it is really usable, otherwise CPU; decided once per worker by ``resolve_device``."""
    CPU = "cpu"
    CUDA = "cuda"
    """CUDA or fail: refuses to fall back silently."""


class Spinning(StrEnum):
    """When a session's idle intra-op threads spin (busy-wait for work) rather than sleep.

    Spinning within a call keeps a call's threads awake between its parallel steps: a lone call on
    2 cores is about 5 % faster than with sleeping threads, but a call that meets other work (another
    call, the S3 store, the API) takes the cores that work needs. Spinning between calls too (ONNX
    Runtime's default) burns a core for a while after every call. By default (``AUTO``) a model's
    session spins within its calls only where the worker runs every call that meets another on the
    model's one-thread twin (docs/PERFORMANCE.md, "Short messages: CPU, hops and round trips")."""

    AUTO = "auto"
    """``IN_CALL`` for a model whose calls under load run on one-thread twins (every voice on CPU
    where calls run two at a time: ``workers.twin_sessions``), so that its own session's spinning
    threads only run a call that has the cores to itself; ``OFF`` for the others."""
    OFF = "off"
    """Idle threads always sleep."""
    IN_CALL = "in_call"
    """Threads spin while a call runs and sleep as soon as it ends (``session.force_spinning_stop``)."""
    ALWAYS = "always"
    """ONNX Runtime's default: threads spin after a call too, until they give up waiting."""

    def for_model(self, has_twins: bool) -> Spinning:
        """What a model's session is built with: ``AUTO`` resolved, any other value as it is."""
        if self is not Spinning.AUTO:
            return self
        return Spinning.IN_CALL if has_twins else Spinning.OFF


def cuda_device_count() -> int:
    """Number of GPUs the NVIDIA driver reports; 0 when there is no driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value
