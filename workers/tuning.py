"""Batching defaults per device, from measurement (docs/PERFORMANCE.md); settings override them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tts_core.base.device import Device
from ttsq.settings import WorkerSettings

CPU_MAX_BATCH: Final = 1
"""On CPU a padded batch costs more than its items one by one (8 sentences: 3.3x slower)."""
CPU_MAX_WAIT_MS: Final = 0.0
CUDA_MAX_BATCH: Final = 8
"""On a GPU batching is the gain (published: a VITS-class model on an A10, 4.4x at batch 8)."""
CUDA_MAX_WAIT_MS: Final = 10.0
CPU_PARALLEL_CALLS: Final = 2
"""On 2 CPU cores two one-thread calls at once did 16 % more than one two-thread call at a time."""


@dataclass(frozen=True)
class BatchPlan:
    """How one worker process batches: items per call, wait for company, task threads."""

    max_batch: int
    max_wait_ms: float
    concurrency: int
    parallel_calls: int = 1
    """Calls a batcher runs at once (one unless ``max_batch`` is 1)."""


def batch_plan(worker: WorkerSettings, device: Device) -> BatchPlan:
    """Settings where given, else the measured defaults of the (resolved, never ``auto``) device."""
    on_gpu = device is Device.CUDA
    max_batch = worker.max_batch or (CUDA_MAX_BATCH if on_gpu else CPU_MAX_BATCH)
    default_wait = CUDA_MAX_WAIT_MS if on_gpu else CPU_MAX_WAIT_MS
    max_wait_ms = default_wait if worker.max_wait_ms is None else worker.max_wait_ms
    # One thread more than a batch holds, so the next item is queued while results are stored.
    concurrency = worker.concurrency or max_batch + 1
    parallel = worker.parallel_calls or (1 if on_gpu else CPU_PARALLEL_CALLS)
    return BatchPlan(max_batch, max_wait_ms, concurrency, parallel if max_batch == 1 else 1)
