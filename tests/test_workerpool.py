"""Worker processes per host: one per GPU with its own device and node name, or one for the CPU."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest
from click.testing import CliRunner

from ttsq.cli import main
from ttsq.settings import Settings, WorkerSettings
from ttsq.tuning import batch_plan
from ttsq.workerpool import GpuSelectionError, cpu_cores, cpu_worker, gpu_workers, parse_gpus


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
    specs = gpu_workers(Settings(_env_file=None), [0, 2], "INFO", host="box")
    assert [s.name for s in specs] == ["gpu0@box", "gpu2@box"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["0", "2"]
    assert {s.env["TTSQ_WORKER__DEVICE"] for s in specs} == {"cuda"}
    for spec in specs:
        assert option(spec.argv, "--hostname") == spec.name
        assert option(spec.argv, "--pool") == "threads"
        assert option(spec.argv, "--queues") == "tts,tts.segments"
        assert option(spec.argv, "--concurrency") == "9"  # CUDA default max_batch 8, plus one


def test_cpu_worker_sizes_threads_to_the_cores() -> None:
    spec = cpu_worker(Settings(_env_file=None), "INFO", host="box")
    assert spec.name == "cpu@box"
    assert spec.env == {"TTSQ_WORKER__DEVICE": "cpu", "TTSQ_WORKER__INTRA_OP_THREADS": str(cpu_cores())}
    assert option(spec.argv, "--concurrency") == "2"  # CPU default max_batch 1, plus one


def test_batch_plan_defaults_and_overrides() -> None:
    assert batch_plan(WorkerSettings(), on_gpu=False) == batch_plan(WorkerSettings(max_batch=1), on_gpu=False)
    plan = batch_plan(WorkerSettings(max_batch=16, max_wait_ms=3, concurrency=20), on_gpu=False)
    assert (plan.max_batch, plan.max_wait_ms, plan.concurrency) == (16, 3, 20)
    assert batch_plan(WorkerSettings(), on_gpu=True).max_batch == 8


def test_cli_refuses_gpus_on_a_host_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ttsq.cli.cuda_device_count", lambda: 0)
    result = CliRunner().invoke(main, ["worker", "--gpus", "all"])
    assert result.exit_code == 2
    assert "no GPU is visible" in result.output


def test_cli_refuses_gpus_and_cpu_together() -> None:
    result = CliRunner().invoke(main, ["worker", "--gpus", "0", "--cpu"])
    assert result.exit_code == 2
    assert "not both" in result.output


SUPERVISE = """
import sys
from ttsq.workerpool import WorkerSpec, run_workers
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
quitter = [sys.executable, "-c", "import time; time.sleep(1); raise SystemExit(3)"]
sys.exit(run_workers([WorkerSpec("a", sleeper), WorkerSpec("b", quitter), WorkerSpec("c", sleeper)]))
"""


def test_supervisor_stops_every_worker_when_one_dies() -> None:
    process = subprocess.Popen([sys.executable, "-c", SUPERVISE], start_new_session=True)
    assert process.wait(30) == 1
    children = [p for p in psutil.process_iter(["cmdline"]) if "time.sleep(60)" in " ".join(p.info["cmdline"] or [])]
    assert children == []


def test_supervisor_stops_every_worker_on_sigterm() -> None:
    script = SUPERVISE.replace("time.sleep(1); raise SystemExit(3)", "time.sleep(60)")
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    children = [p for p in psutil.process_iter(["cmdline"]) if "time.sleep(60)" in " ".join(p.info["cmdline"] or [])]
    assert children == []
