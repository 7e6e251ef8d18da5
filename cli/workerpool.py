"""Which worker processes a host runs: one per GPU (its own CUDA_VISIBLE_DEVICES, model and node
name ``gpu<N>@<host>``), or one for the CPU with threads sized to the cores.

The device of each worker is decided here, once: it sizes the worker's task threads, and the worker
gets it as ``TTSQ_WORKER__DEVICE`` (``cpu`` or ``cuda``, never ``auto``), sizes its batches by it and
loads its voices on it, never falling back to another. Each worker also gets every other setting.
``run_workers`` starts again a worker that dies (``cli.supervisor``).
"""

from __future__ import annotations

import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from cli.commands import worker_argv
from cli.processes import ManagedProcess, free_port, wait_until
from cli.supervisor import Supervisor
from tts_core.base.device import Device
from tts_core.base.stop_signal import stop_on
from ttsq.broker import make_producer
from ttsq.settings import Settings, settings_env
from workers.tuning import batch_plan


class GpuSelectionError(ValueError):
    """``--gpus`` names no GPU this host has."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker process: its Celery node name, command line and extra environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def parse_gpus(spec: str, visible: int) -> list[int]:
    """``all`` or a comma list of indexes (``0,2``), checked against the ``visible`` GPU count."""
    if visible < 1:
        raise GpuSelectionError("no GPU is visible to this host (NVIDIA driver missing?); use --cpu")
    if spec.strip().lower() == "all":
        return list(range(visible))
    try:
        chosen = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise GpuSelectionError(f"--gpus takes 'all' or indexes like 0,2; got {spec!r}") from None
    if not chosen:
        raise GpuSelectionError("--gpus names no GPU")
    wrong = [n for n in chosen if not 0 <= n < visible]
    if wrong:
        raise GpuSelectionError(f"GPU {wrong[0]} does not exist; this host has {visible} (0-{visible - 1})")
    return list(dict.fromkeys(chosen))


def cpu_cores() -> int:
    """Cores this process may run on (respects affinity and container CPU sets)."""
    return len(os.sched_getaffinity(0)) or os.cpu_count() or 1


def _spec(
    settings: Settings,
    name: str,
    device: Device,
    loglevel: str,
    extra_env: dict[str, str] | None = None,
    port_offset: int = 0,
) -> WorkerSpec:
    """A worker process on ``device``, with task threads matching that device's batching plan; the
    ``port_offset``-th worker of a host serves its metrics that many ports above the configured one."""
    port = settings.worker.metrics_port
    worker = settings.worker.model_copy(
        update={"device": device, "metrics_port": None if port is None else port + port_offset}
    )
    plan = batch_plan(worker, device)
    env = {**settings_env(settings.model_copy(update={"worker": worker})), **(extra_env or {})}
    return WorkerSpec(name, worker_argv(plan.concurrency, settings.queue, name, loglevel), env)


def gpu_workers(settings: Settings, gpus: list[int], loglevel: str, host: str | None = None) -> list[WorkerSpec]:
    host = host or socket.gethostname()
    return [
        _spec(settings, f"gpu{n}@{host}", Device.CUDA, loglevel, {"CUDA_VISIBLE_DEVICES": str(n)}, offset)
        for offset, n in enumerate(gpus)
    ]


def cpu_worker(settings: Settings, loglevel: str, host: str | None = None) -> WorkerSpec:
    threads = settings.worker.intra_op_threads or cpu_cores()
    worker = settings.worker.model_copy(update={"intra_op_threads": threads})
    return _spec(
        settings.model_copy(update={"worker": worker}), f"cpu@{host or socket.gethostname()}", Device.CPU, loglevel
    )


def default_worker(settings: Settings, name: str, loglevel: str) -> WorkerSpec:
    """One worker on the configured device, ``auto`` resolved here (this loads ONNX Runtime to ask it)."""
    from tts_core.voices.runtime import resolve_device

    return _spec(settings, name, resolve_device(settings.worker.device), loglevel)


def run_workers(specs: list[WorkerSpec]) -> int:
    """Run several worker processes until SIGINT or SIGTERM, starting again each one that dies
    (``cli.supervisor``); then stop them all. Returns the exit code of the command."""
    supervisor = Supervisor("ttsq worker")
    with stop_on(signal.SIGINT, signal.SIGTERM) as stopping:
        try:
            for spec in specs:
                supervisor.add(ManagedProcess(spec.name, spec.argv, None, {**os.environ, **spec.env}))
            supervisor.run(stopping)
        finally:
            supervisor.stop(together=True)
    return 0


def start_local_worker(
    settings: Settings,
    name: str,
    log_path: Path,
    loglevel: str = "INFO",
    extra_env: dict[str, str] | None = None,
    timeout_s: float = 180.0,
) -> ManagedProcess:
    """One worker beside others on this machine (tests, bench): node ``<name>@<host>``, its metrics
    and probes on a free port (in its ``env``); returns once it answers a ping, its model loaded."""
    process = spawn_local_worker(settings, name, log_path, loglevel, extra_env)
    wait_for_node(settings, name, process, timeout_s)
    return process


def spawn_local_worker(
    settings: Settings, name: str, log_path: Path, loglevel: str = "INFO", extra_env: dict[str, str] | None = None
) -> ManagedProcess:
    """:func:`start_local_worker` without the wait: the process is started, its model not yet loaded
    (start several, then :func:`wait_for_node` for each, and their start-ups overlap). Call it from
    the main thread: the child is told to die with the thread that started it (``PR_SET_PDEATHSIG``)."""
    own_port = settings.worker.model_copy(update={"metrics_port": free_port()})
    spec = default_worker(settings.model_copy(update={"worker": own_port}), f"{name}@%h", loglevel)
    return ManagedProcess(name, spec.argv, log_path, {**os.environ, **spec.env, **(extra_env or {})}).start()


def wait_for_node(settings: Settings, name: str, process: ManagedProcess, timeout_s: float) -> None:
    """Until a Celery node whose name contains ``name`` answers a ping; stops ``process`` if it never does."""
    producer = make_producer(settings)
    try:
        wait_until(
            lambda: any(name in node for reply in producer.control.ping(timeout=0.5) or [] for node in reply),
            timeout_s,
            f"worker {name}",
            process,
        )
    except BaseException:
        process.stop()
        raise
    finally:
        producer.close()
