"""Worker processes per host: one per GPU with its own device and node name, or one for the CPU."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from cli.main import main
from cli.processes import wait_until
from cli.workerpool import GpuSelectionError, cpu_cores, cpu_worker, default_worker, gpu_workers, parse_gpus
from tts_core.base.device import Device
from tts_core.voices.runtime import cuda_available
from ttsq.settings import Settings, WorkerSettings
from workers.tuning import batch_plan


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_parse_gpus() -> None:
    assert parse_gpus("all", 4) == [0, 1, 2, 3]
    assert parse_gpus("0,2", 4) == [0, 2]
    assert parse_gpus("2, 2,0", 4) == [2, 0]
    with pytest.raises(GpuSelectionError, match="GPU 4 does not exist"):
        parse_gpus("0,4", 4)
    with pytest.raises(GpuSelectionError, match="'all' or indexes"):
        parse_gpus("first", 4)
    with pytest.raises(GpuSelectionError, match="no GPU is visible"):
        parse_gpus("all", 0)


def test_one_worker_per_gpu_with_its_own_device_and_name() -> None:
    settings = Settings(_env_file=None, sentence_pause_s=0.4, job_ttl_s=3600)
    specs = gpu_workers(settings, [0, 2], "INFO", host="box")
    assert [s.name for s in specs] == ["gpu0@box", "gpu2@box"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0", "2"]
    assert {s.env["TTSQ_WORKER__DEVICE"] for s in specs} == {"cuda"}
    assert {s.env["TTSQ_SENTENCE_PAUSE_S"] for s in specs} == {"0.4"}  # every setting, not a few
    assert {s.env["TTSQ_JOB_TTL_S"] for s in specs} == {"3600"}
    for spec in specs:
        assert option(spec.argv, "--hostname") == spec.name
        assert option(spec.argv, "--pool") == "threads"
        assert option(spec.argv, "--queues") == "tts.interactive,tts,tts.segments"
        assert option(spec.argv, "--concurrency") == "9"  # CUDA default max_batch 8, plus one


def test_workers_of_one_host_get_their_own_metrics_ports() -> None:
    settings = Settings(_env_file=None)
    specs = gpu_workers(settings, [0, 1, 3], "INFO", host="box")
    assert [s.env["TTSQ_WORKER__METRICS_PORT"] for s in specs] == ["9101", "9102", "9103"]
    moved = settings.model_copy(update={"worker": settings.worker.model_copy(update={"metrics_port": 9200})})
    assert [s.env["TTSQ_WORKER__METRICS_PORT"] for s in gpu_workers(moved, [0, 1], "INFO")] == ["9200", "9201"]
    off = settings.model_copy(update={"worker": settings.worker.model_copy(update={"metrics_port": None})})
    assert {s.env["TTSQ_WORKER__METRICS_PORT"] for s in gpu_workers(off, [0, 1], "INFO")} == {"null"}


def test_cpu_worker_sizes_threads_to_the_cores() -> None:
    spec = cpu_worker(Settings(_env_file=None), "INFO", host="box")
    assert spec.name == "cpu@box"
    assert spec.env["TTSQ_WORKER__DEVICE"] == "cpu"
    assert spec.env["TTSQ_WORKER__INTRA_OP_THREADS"] == str(cpu_cores())
    assert option(spec.argv, "--concurrency") == "2"  # CPU default max_batch 1, plus one


def test_batch_plan_defaults_and_overrides() -> None:
    assert batch_plan(WorkerSettings(), Device.CPU) == batch_plan(WorkerSettings(max_batch=1), Device.CPU)
    plan = batch_plan(WorkerSettings(max_batch=16, max_wait_ms=3, concurrency=20), Device.CPU)
    assert (plan.max_batch, plan.max_wait_ms, plan.concurrency) == (16, 3, 20)
    assert batch_plan(WorkerSettings(), Device.CUDA).max_batch == 8
    # Two calls at once on CPU, one where calls are batched (a second thread would split batches).
    assert [batch_plan(WorkerSettings(), device).parallel_calls for device in (Device.CPU, Device.CUDA)] == [2, 1]
    assert batch_plan(WorkerSettings(parallel_calls=3), Device.CPU).parallel_calls == 3
    assert batch_plan(WorkerSettings(parallel_calls=3, max_batch=4), Device.CPU).parallel_calls == 1


def test_the_default_worker_is_sized_for_the_device_it_will_use() -> None:
    """``auto`` is resolved once by the launcher: the task threads and the device the worker is told
    to use come from the same answer (here, with no GPU: CPU, batch 1, two threads)."""
    spec = default_worker(Settings(_env_file=None), "w@box", "INFO")
    device = Device(spec.env["TTSQ_WORKER__DEVICE"])
    assert device is (Device.CUDA if cuda_available() else Device.CPU)
    assert option(spec.argv, "--concurrency") == str(batch_plan(WorkerSettings(), device).concurrency)


def test_cli_refuses_gpus_on_a_host_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cli.main.cuda_device_count", lambda: 0)
    result = CliRunner().invoke(main, ["worker", "--gpus", "all"])
    assert result.exit_code == 2
    assert "no GPU is visible" in result.output


def test_cli_refuses_gpus_and_cpu_together() -> None:
    result = CliRunner().invoke(main, ["worker", "--gpus", "0", "--cpu"])
    assert result.exit_code == 2
    assert "not both" in result.output


# Each sleeper writes its pid into the folder, then sleeps; the quitter waits until both sleepers
# are up, then exits with 3.
SUPERVISE = r"""
import sys
from cli.workerpool import WorkerSpec, run_workers
folder = sys.argv[1]
sleeper = "import os, sys, time; open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close(); time.sleep(60)"
quitter = "import os, sys, time\nwhile len(os.listdir(sys.argv[1])) < 2: time.sleep(0.05)\nraise SystemExit(3)"
specs = [
    WorkerSpec("a", [sys.executable, "-c", sleeper, folder]),
    WorkerSpec("b", [sys.executable, "-c", QUITTER, folder]),
    WorkerSpec("c", [sys.executable, "-c", sleeper, folder]),
]
sys.exit(run_workers(specs))
"""


def started_children(folder: Path, count: int) -> list[int]:
    """Pids the sleepers wrote, once ``count`` of them have started."""
    wait_until(lambda: len(list(folder.iterdir())) >= count, 30, "supervised children")
    return [int(path.name) for path in folder.iterdir()]


def test_supervisor_starts_again_a_worker_that_dies_while_the_others_run(tmp_path: Path) -> None:
    """The quitter dies once both sleepers are up, then at once on every start: it is started again
    (with a line each time, backing off) while the sleepers keep running; SIGTERM stops them all."""
    script = SUPERVISE.replace("QUITTER", "quitter")
    output = tmp_path / "output"
    folder = tmp_path / "pids"
    folder.mkdir()
    with output.open("w") as out:
        process = subprocess.Popen([sys.executable, "-c", script, str(folder)], stdout=out, start_new_session=True)
    try:
        wait_until(lambda: output.read_text().count("ttsq worker: b exited with code 3") >= 2, 60, "two restarts")
        pids = started_children(folder, 2)
        assert all(psutil.pid_exists(pid) for pid in pids)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        process.kill()
    assert "(2 times in a row); starting it again in 1.0 s" in output.read_text()
    assert not any(psutil.pid_exists(pid) for pid in pids)


def test_supervisor_stops_every_worker_on_sigterm(tmp_path: Path) -> None:
    script = SUPERVISE.replace("QUITTER", "sleeper")
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], start_new_session=True)
    pids = started_children(tmp_path, 3)
    assert all(psutil.pid_exists(pid) for pid in pids)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    assert not any(psutil.pid_exists(pid) for pid in pids)
