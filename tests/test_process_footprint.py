"""The API (its helper processes included), Flower and ``ttsq say`` never load the inference runtime
(ONNX Runtime, onnx, espeak-ng): only workers do. Checked on real processes, by the shared libraries
mapped into them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from cli.commands import api_argv, flower_argv
from cli.embedded import LOOPBACK
from cli.processes import ManagedProcess
from tests.conftest import start_on_a_free_port
from ttsq.settings import Settings, settings_env

INFERENCE_LIBRARIES = ("onnxruntime", "onnx_cpp2py_export", "piper_phonemize", "espeak")
"""File-name fragments of the shared libraries behind ``onnxruntime``, ``onnx`` and espeak-ng."""
INFERENCE_MODULES = ("onnxruntime", "onnx", "piper_phonemize")


def inference_libraries(pid: int) -> list[str]:
    """The inference runtime's shared libraries mapped into the process."""
    maps = {m.path for m in psutil.Process(pid).memory_maps()}
    return sorted(p for p in maps if any(part in Path(p).name for part in INFERENCE_LIBRARIES))


@pytest.fixture
def service(settings: Settings, tmp_path: Path) -> Iterator[dict[str, ManagedProcess | str]]:
    """``ttsq api`` and Flower as separate processes, configured like the rest of the suite."""
    env = {**os.environ, **settings_env(settings)}
    api, api_url = start_on_a_free_port(
        "api", lambda port: api_argv(LOOPBACK, port), tmp_path / "api.log", env, "/healthz"
    )
    try:
        flower, flower_url = start_on_a_free_port(
            "flower", lambda port: flower_argv(LOOPBACK, port), tmp_path / "flower.log", env, "/healthcheck"
        )
        try:
            yield {"api": api, "flower": flower, "api_url": api_url, "flower_url": flower_url}
        finally:
            flower.stop()
    finally:
        api.stop()


@pytest.mark.usefixtures("worker")
def test_api_and_flower_load_no_inference_runtime(service: dict[str, ManagedProcess | str]) -> None:
    api, flower = service["api"], service["flower"]
    assert isinstance(api, ManagedProcess)
    assert isinstance(flower, ManagedProcess)
    with httpx.Client(base_url=str(service["api_url"]), timeout=30) as client:  # exercise the request paths
        job = client.post("/v1/jobs", json={"text": "Checking what the API loads."})
        assert job.status_code == 202
        long = client.post("/v1/jobs", json={"text": "Checking what its helpers load. " * 1000, "priority": "bulk"})
        assert long.status_code == 202  # read in the API's helper processes (api.heavy_work)
        client.delete(f"/v1/jobs/{long.json()['id']}")
        assert client.get("/v1/voices").status_code == 200
        assert client.get(f"/v1/jobs/{job.json()['id']}").status_code == 200
    assert httpx.get(f"{service['flower_url']}/workers").status_code == 200
    helpers = psutil.Process(api.pid).children()
    assert helpers, "the API started no helper processes"
    for pid in [api.pid, *(helper.pid for helper in helpers), flower.pid]:
        assert inference_libraries(pid) == []


def test_the_check_sees_the_runtime_in_a_worker(worker: ManagedProcess) -> None:
    """The same check on a worker process finds the libraries: it can fail."""
    found = " ".join(inference_libraries(worker.pid))
    assert "onnxruntime" in found
    assert "piper_phonemize" in found or "espeak" in found


SAY = """
import json, sys
from cli.main import main
try:
    main(["say", "A small check.", "-o", sys.argv[1], "--api-url", sys.argv[2]])
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "loaded": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[3:]))}))
"""


def test_say_loads_no_inference_runtime(api_url: str, tmp_path: Path) -> None:
    output = tmp_path / "check.wav"
    argv = [sys.executable, "-c", SAY, str(output), api_url, *INFERENCE_MODULES]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": []}
    assert output.stat().st_size > 1000
