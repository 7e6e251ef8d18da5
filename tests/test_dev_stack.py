"""One ``ttsq dev`` for the module, as a user runs it: a real Prometheus (Debian's ``prometheus``
package) scrapes it and, after a few jobs, every query of the Grafana dashboard returns data; it
prints and serves every part; then it stops with nothing left running or listening.

Its tests run in the file's order, the stop last (each also runs alone: the stack starts for it).
One start for them all: a start of the stack is most of their time (a worker loads its model)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from cli.processes import ManagedProcess, free_port, port_in_use, wait_until
from tests.conftest import create_record, enqueue, wait_for_job
from tests.test_cli import DevProcess, all_gone, clean_env, dev_args, free_dev_ports, wildcard_listeners
from ttsq.job_store import JobStore
from ttsq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ttsq.json"
RATE_INTERVAL = "1m"
"""What Grafana's ``$__rate_interval`` becomes here (four one-second scrapes are plenty)."""

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", RATE_INTERVAL))
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dev-stack")


@dataclass(frozen=True)
class DevStack:
    process: DevProcess
    ports: dict[str, int]
    data_dir: Path


@pytest.fixture(scope="module")
def dev(folder: Path) -> Iterator[DevStack]:
    """The module's ``ttsq dev``, on ports picked free; stopped here unless a test stopped it."""
    ports = free_dev_ports()
    process = DevProcess(dev_args(folder / ".ttsq", ports), clean_env())
    try:
        process.wait_ready()
        yield DevStack(process, ports, folder / ".ttsq")
    finally:
        if process.process.poll() is None:
            assert process.terminate() == 0


@pytest.fixture(scope="module")
def dev_stack(dev: DevStack) -> dict[str, int]:
    return dev.ports


@pytest.fixture(scope="module")
def prometheus(folder: Path, dev_stack: dict[str, int]) -> Iterator[str]:
    assert Path(PROMETHEUS).exists(), "install Debian's prometheus package (apt-get install prometheus)"
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "ttsq-api", "static_configs": [{"targets": [f"127.0.0.1:{dev_stack['api']}"]}]},
            {
                "job_name": "ttsq-workers",
                "static_configs": [{"targets": [f"127.0.0.1:{dev_stack['worker-metrics']}"]}],
            },
        ],
    }
    config_path = folder / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [
        PROMETHEUS,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    process = ManagedProcess("prometheus", argv, folder / "prometheus.log").start()
    url = f"http://127.0.0.1:{port}"
    try:

        def both_targets_up() -> bool:
            targets = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            return len(targets) == 2 and all(t["health"] == "up" for t in targets)

        wait_until(both_targets_up, 60, "Prometheus scraping the API and the worker", process)
        yield url
    finally:
        process.stop()


def query(prometheus_url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def has_data(series: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(s["value"][1])) for s in series)


def test_every_dashboard_query_returns_data_after_a_few_jobs(prometheus: str, dev_stack: dict[str, int]) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 10
    api = f"http://127.0.0.1:{dev_stack['api']}"
    with httpx.Client(base_url=api, timeout=30) as client:
        jobs = [client.post("/v1/jobs", json={"text": f"Scrape me, number {n}."}).json() for n in range(3)]
        long_text = " ".join(f"Sentence {word} of a job split into several segments." for word in range(12))
        jobs.append(client.post("/v1/jobs", json={"text": long_text, "priority": "bulk"}).json())
        # a job the worker fails (a voice the API would refuse), for the error panels
        dev_redis = redis.Redis.from_url(f"redis://127.0.0.1:{dev_stack['redis']}/0")
        broken = create_record(JobStore(dev_redis, 3600), voice="xx_XX-nobody-low")
        enqueue(Settings(_env_file=None, redis_url=f"redis://127.0.0.1:{dev_stack['redis']}/0"), broken.id)
        statuses = [wait_for_job(client, job["id"])["status"] for job in jobs]
        assert statuses == ["succeeded"] * 4
        assert wait_for_job(client, broken.id)["status"] == "failed"
        dev_redis.close()

    def all_answer() -> bool:
        return all(has_data(query(prometheus, expr)) for _, expr in queries)

    try:
        wait_until(all_answer, 30, "dashboard queries with data")
    except TimeoutError:
        empty = [title for title, expr in queries if not has_data(query(prometheus, expr))]
        raise AssertionError(f"panels without data: {empty}") from None

    # and the figures say what happened, once a scrape after the last job has come in (panels may
    # have had data from an earlier scrape)
    def succeeded() -> float:
        finished = query(prometheus, 'max by (status) (ttsq_jobs_finished_total{status="succeeded"})')
        return float(finished[0]["value"][1]) if finished else 0.0

    wait_until(lambda: succeeded() >= 4, 15, "a scrape counting every finished job")
    assert succeeded() == 4
    audio = query(prometheus, "sum(ttsq_audio_seconds_total)")
    assert float(audio[0]["value"][1]) > 5


def test_a_query_naming_no_real_metric_has_no_data(prometheus: str) -> None:
    """The check above can fail: a misspelt metric gives an empty answer."""
    assert not has_data(query(prometheus, f"sum(rate(ttsq_audio_second_total[{RATE_INTERVAL}]))"))


def test_prometheus_binary_is_the_debian_one() -> None:
    version = subprocess.run([PROMETHEUS, "--version"], capture_output=True, text=True, check=True)
    assert "prometheus, version 2." in version.stdout + version.stderr


def test_dev_prints_and_serves_every_part(dev: DevStack) -> None:
    output, ports = dev.process.output(), dev.ports
    api = f"http://127.0.0.1:{ports['api']}"
    assert f"API        {api}" in output
    assert f"Flower     http://127.0.0.1:{ports['flower']}" in output
    worker_metrics = f"http://127.0.0.1:{ports['worker-metrics']}"
    assert f"{worker_metrics}/metrics (worker)" in output
    assert f"curl -s -X POST {api}/v1/jobs" in output
    assert f"Wyoming    tcp://127.0.0.1:{ports['wyoming']}" in output
    voicevox = f"http://127.0.0.1:{ports['voicevox']}"
    assert f"VOICEVOX   {voicevox}" in output
    assert httpx.get(f"{voicevox}/version").status_code == 200
    names = {p.name() for p in dev.process.descendants()}
    assert {"redis-server", "weed"} <= names

    with httpx.Client(base_url=api, timeout=30) as client:
        job = client.post("/v1/jobs", json={"text": "Hello from the dev stack."}).json()
        assert wait_for_job(client, job["id"])["status"] == "succeeded"
        assert client.get(f"/v1/jobs/{job['id']}/audio", follow_redirects=True).content[:4] == b"RIFF"
    assert httpx.get(f"http://127.0.0.1:{ports['flower']}/").status_code == 200
    assert httpx.get(f"{worker_metrics}/readyz").status_code == 200
    assert "ttsq_inference_seconds_count" in httpx.get(f"{worker_metrics}/metrics").text
    assert (dev.data_dir / "redis").is_dir()
    assert not wildcard_listeners(dev.process.descendants())


def test_dev_stops_every_part_and_frees_its_ports(dev: DevStack) -> None:
    """Last in the module: SIGTERM, as Ctrl-C's supervisor passes it on."""
    children = dev.process.descendants()
    code = dev.process.terminate()
    assert code == 0
    assert children
    assert all_gone(children), [p.name() for p in children if p.is_running()]
    assert not any(port_in_use(port) for port in dev.ports.values())
