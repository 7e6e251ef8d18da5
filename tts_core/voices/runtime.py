"""ONNX Runtime session creation with a quiet, honest choice between CUDA and CPU.

A bare ``providers=["CUDAExecutionProvider", ...]`` on a host without a usable GPU prints a wall of
library-loading errors before falling back. We first check that the NVIDIA driver answers with at
least one device, and only then try CUDA, with ORT's logger silenced for that attempt.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import partial
from typing import Final

import onnxruntime as ort

from tts_core.base.device import CPU_PROVIDER, CUDA_PROVIDER, Device, Spinning, cuda_device_count
from tts_core.base.errors import DeviceUnavailable
from tts_core.voices.batching import CallStop
from tts_core.voices.conv_layout import convert as two_dimensional
from tts_core.voices.graph_edits import GraphEdit, edited

log = logging.getLogger(__name__)

_ORT_ERROR_ONLY = 3
MIN_2D_CHANNELS_BY_THREADS: Final = {1: 16, 2: 128}
"""Output channels from which a 1-D convolution runs faster in two dimensions (``conv_layout``), by
the session's intra-op threads, as measured per convolution on Piper's graph with ONNX Runtime's
profiler (docs/PERFORMANCE.md, "Convolutions in two dimensions"). On one thread every convolution
gained but the last (64 → 1 channel, 1.7x slower: the blocked layout packs channels by 16 on
AVX-512, so a lone channel is mostly padding). On two threads those of 128 channels or more gained
(the text encoder, the flow, most of the duration predictor, the decoder's first stage) and the
decoder's later stages, of 64 and 32 channels, lost 1.2 to 1.5x. Other thread counts were not
measured: their graph stays as it is."""
_CUDA_REQUIRED = "CUDA was required (device=cuda) but no usable CUDA GPU was found"


def cuda_available() -> bool:
    """Whether this onnxruntime build has the CUDA provider and the driver sees a GPU."""
    return CUDA_PROVIDER in ort.get_available_providers() and cuda_device_count() > 0


def resolve_device(device: Device) -> Device:
    """The device a worker uses, decided once: ``auto`` becomes CUDA or CPU, and ``cuda`` on a host
    where CUDA is not usable raises :class:`DeviceUnavailable`. What sizes the worker (task threads,
    batches) and what loads its voices both take this one answer."""
    if device is Device.AUTO:
        return Device.CUDA if cuda_available() else Device.CPU
    if device is Device.CUDA and not cuda_available():
        raise DeviceUnavailable(_CUDA_REQUIRED)
    return device


def session_options(intra_op_threads: int, spinning: Spinning = Spinning.OFF) -> ort.SessionOptions:
    """Options shared by every session: fixed thread count (0 lets ORT pick), full graph optimisation,
    and when its threads spin (:class:`Spinning`)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    spinning = spinning.for_model(has_twins=False)  # a session built outside a worker's pool
    options.add_session_config_entry("session.intra_op.allow_spinning", "0" if spinning is Spinning.OFF else "1")
    if spinning is Spinning.IN_CALL:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def create_session(
    model: bytes,
    device: Device,
    intra_op_threads: int,
    spinning: Spinning = Spinning.OFF,
    edits: Sequence[GraphEdit] = (),
) -> ort.InferenceSession:
    """Create an inference session of ``model`` with ``edits`` made on the device the policy allows:
    ``auto`` may fall back to CPU, ``cuda`` never does."""
    if device is not Device.CPU and cuda_available():
        session = _try_cuda(edited(model, edits), intra_op_threads, spinning)
        if session is not None:
            return session
    if device is Device.CUDA:
        raise DeviceUnavailable(_CUDA_REQUIRED)
    return ort.InferenceSession(
        cpu_graph(model, intra_op_threads, edits),
        session_options(intra_op_threads, spinning),
        providers=[CPU_PROVIDER],
    )


def cpu_graph(model: bytes, intra_op_threads: int, edits: Sequence[GraphEdit] = ()) -> bytes:
    """The graph a CPU session runs: ``edits`` made, then, on one or two threads, the 1-D
    convolutions that run faster so done in two dimensions (:data:`MIN_2D_CHANNELS_BY_THREADS`), all
    on one parse. ``0`` threads (ONNX Runtime's choice) counts as the cores this process may run on."""
    min_channels = MIN_2D_CHANNELS_BY_THREADS.get(cpu_threads(intra_op_threads))
    layout = [] if min_channels is None else [partial(two_dimensional, min_out_channels=min_channels)]
    return edited(model, [*edits, *layout])


def cpu_threads(intra_op_threads: int) -> int:
    """The threads a CPU session of ``intra_op_threads`` runs a call on: ``0`` (ONNX Runtime's
    choice) is the cores this process may run on."""
    return intra_op_threads or len(os.sched_getaffinity(0))


CUDA_OPTIONS: dict[str, str] = {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0"}
"""Options of the CUDA execution provider, measured on an H100 (docs/PERFORMANCE.md, "GPU"):
``HEURISTIC`` because ORT's default (``EXHAUSTIVE``) searched convolution algorithms on call after
call of Piper's variable-length inputs (1.4 s of audio a second against 10 at batch 1, as Piper's
own CUDA code chooses too); TF32 off because with it an utterance synthesised in a batch differed
from the same one alone by up to 0.32 in samples and a frame in length (1e-4 and none without, as
on the CPU). Module-level so the GPU bench (``bench/gpu.py``) can compare others."""


def _try_cuda(model: bytes, intra_op_threads: int, spinning: Spinning) -> ort.InferenceSession | None:
    options = session_options(intra_op_threads, spinning)
    options.log_severity_level = _ORT_ERROR_ONLY
    if hasattr(ort, "preload_dlls"):
        # Loads CUDA/cuDNN from the nvidia-* wheels of the `cuda` extra when they are installed.
        ort.preload_dlls()
    try:
        providers = [(CUDA_PROVIDER, CUDA_OPTIONS), CPU_PROVIDER]
        session = ort.InferenceSession(model, options, providers=providers)
    except Exception as e:  # ORT raises plain RuntimeError/Fail types for provider problems
        log.warning("CUDA session failed: %s", e)
        return None
    if session.get_providers()[0] != CUDA_PROVIDER:
        log.warning("CUDA provider did not initialise")
        return None
    return session


def stoppable_run(stop: CallStop) -> ort.RunOptions:
    """Options of one ``session.run`` that ``stop`` ends early: ONNX Runtime checks ``terminate``
    between graph nodes, so the call raises within about one node's time of the request."""
    options = ort.RunOptions()
    stop.when_requested(lambda: setattr(options, "terminate", True))
    return options
