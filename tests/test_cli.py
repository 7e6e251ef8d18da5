"""The ``ttsq`` command: ``say`` against the running API, ``dev`` starting and stopping the stack."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
from contextlib import suppress
from pathlib import Path

import psutil
import pytest
import redis
import soundfile

from cli.embedded import RedisService
from cli.processes import free_ports, port_in_use
from tests.conftest import idempotency_claim, wait_for
from ttsq.settings import Settings, settings_env

TTSQ = str(Path(sys.executable).parent / "ttsq")
READY_LINE = "ttsq is ready."


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TTSQ_", "AWS_"))}
    return {**env, **extra}


def test_say_downloads_playable_audio(api_url: str, redis_client: redis.Redis, tmp_path: Path) -> None:
    output = tmp_path / "hello.mp3"
    run = subprocess.run(
        [TTSQ, "say", "Hello from the command line.", "-o", str(output), "--api-url", api_url],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"{output}: " in run.stdout
    assert "of mp3" in run.stdout
    info = soundfile.info(str(output))
    assert info.samplerate == 22050
    assert 0.8 < info.duration < 5
    job_id = run.stdout.rsplit("(job ", 1)[1].split(")", 1)[0]
    assert idempotency_claim(redis_client, job_id) is not None  # its submit sent an Idempotency-Key


def test_say_reports_the_api_error(api_url: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [TTSQ, "say", "hi", "-o", str(tmp_path / "x.wav"), "--voice", "nope", "--api-url", api_url],
        capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    assert run.returncode == 1
    assert "HTTP 422" in run.stderr
    assert "voice_not_found: unknown voice 'nope'" in run.stderr
    assert not (tmp_path / "x.wav").exists()


def test_dev_refuses_a_taken_port_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        run = subprocess.run(
            [TTSQ, "dev", "--data-dir", str(tmp_path), "--api-port", str(taken)],
            capture_output=True, text=True, timeout=60, env=clean_env(),
        )  # fmt: skip
    assert run.returncode == 1
    assert f"port {taken} (API) is already in use on 127.0.0.1" in run.stderr
    assert "Traceback" not in run.stderr


class DevProcess:
    """``ttsq dev`` as a user runs it, with its output collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        self.process = subprocess.Popen(
            [TTSQ, "dev", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_ready(self, timeout_s: float = 180) -> None:
        output = wait_for(
            self.output, lambda out: READY_LINE in out or self.process.poll() is not None, timeout_s, "ttsq dev ready"
        )
        assert READY_LINE in output, "".join(self.lines[-50:])

    def output(self) -> str:
        """Everything it printed so far."""
        return "".join(self.lines)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(60)
        self._reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


DEV_PORTS = ("api", "flower", "redis", "s3", "worker-metrics", "wyoming", "voicevox")
"""Every port ``ttsq dev`` listens on (its ``--<name>-port`` options): each test's stack gets free
ones, so the stacks of the test processes never reach for the same default."""


def free_dev_ports() -> dict[str, int]:
    return dict(zip(DEV_PORTS, free_ports(len(DEV_PORTS)), strict=True))


def test_ports_picked_together_are_all_different_and_free() -> None:
    ports = free_ports(len(DEV_PORTS) * 4)
    assert len(set(ports)) == len(ports)
    assert not any(port_in_use(port) for port in ports)


@pytest.fixture
def dev_ports() -> dict[str, int]:
    return free_dev_ports()


def dev_args(data_dir: Path, ports: dict[str, int]) -> list[str]:
    return [
        "--data-dir",
        str(data_dir),
        *(arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))),
    ]


def wildcard_listeners(processes: list[psutil.Process]) -> list[str]:
    """Every socket of ``processes`` that listens beyond loopback (the worker's metrics port included):
    a dev stack is reachable from this machine only."""
    found = []
    for process in processes:
        with suppress(psutil.Error):
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN and not ipaddress.ip_address(conn.laddr.ip).is_loopback:
                    found.append(
                        f"{process.name()} ({' '.join(process.cmdline()[:4])}) on {conn.laddr.ip}:{conn.laddr.port}"
                    )
    return found


def all_gone(processes: list[psutil.Process]) -> bool:
    return all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in processes)


def test_dev_uses_services_named_in_its_env_file(
    tmp_path: Path, dev_ports: dict[str, int], s3_service: object, settings: Settings
) -> None:
    """Settings in ``.env`` count as much as environment variables: the Redis and S3 named there are
    used. Read off the stack's children as soon as its front ends are started (the choice of
    services is made before any child): none is a Redis or SeaweedFS of its own, and each is told the
    named ones. The stop follows at once, without waiting for the worker's model: a stop while the
    stack starts ends it cleanly too."""
    own_redis = RedisService(tmp_path / "redis").start()  # its own Redis: its worker must not take suite jobs
    try:
        named = settings_env(settings.model_copy(update={"redis_url": own_redis.url}))
        (tmp_path / ".env").write_text("".join(f"{name}={value}\n" for name, value in named.items()))
        dev = DevProcess(dev_args(tmp_path / ".ttsq", dev_ports), clean_env(), cwd=tmp_path)
        try:
            flower = wait_for(lambda: flower_child(dev), lambda found: found is not None, 60, "the stack's Flower")
            assert flower is not None
            names = {p.name() for p in dev.descendants()}
            assert "redis-server" not in names
            assert "weed" not in names
            told = flower.environ()
            assert told["TTSQ_REDIS_URL"] == own_redis.url
            assert told["TTSQ_S3__ENDPOINT_URL"] == named["TTSQ_S3__ENDPOINT_URL"]
        finally:
            assert dev.terminate() == 0
    finally:
        own_redis.stop()


def flower_child(dev: DevProcess) -> psutil.Process | None:
    """The stack's Flower, the last child ``ttsq dev`` starts, once it runs."""
    for child in dev.descendants():
        with suppress(psutil.Error):
            if "flower" in child.cmdline():
                return child
    return None
