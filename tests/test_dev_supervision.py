"""``ttsq dev`` heals itself: each of its children SIGKILLed in turn (the worker, the service worker,
beat, the API, the Wyoming server, Flower, Redis, SeaweedFS) is started again, and the stack is whole again within 10 s;
a job submitted before each kill (followed by a client long-polling through it) and one submitted
after it both succeed. Also: children killed while the stack is still starting, and Ctrl-C while a
child waits out its restart backoff, leave nothing behind.

Minutes, so behind the ``faults`` marker (``make faults``). The figures go to
``bench/results/faults-latest.json`` and docs/RELIABILITY.md.

A job held by a SIGKILLed worker comes back once its visibility timeout runs out (8 s by default),
and these stacks run the sweeper every 5 s, so the jobs that a kill interrupts finish within the
test's wait.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import psutil
import pytest

from cli.processes import port_in_use, wait_until
from narration.client import ClientError, TTSQClient
from tests.faults_support import record_figures
from tests.test_cli import DevProcess, all_gone, clean_env, dev_args, free_dev_ports
from ttsq.broker import make_producer
from ttsq.settings import Settings

pytestmark = pytest.mark.faults

CHILDREN: Final = {
    "worker": "-A workers.app worker",
    "webhooks": "-A workers.service worker",
    "beat": "-A workers.service beat",
    "api": "cli.main api",
    "wyoming": "cli.main wyoming",
    "flower": "-A workers.app flower",
    "redis": "redis-server",
    "seaweedfs": "weed",
}
"""Each child of ``ttsq dev`` by its name in the restart line, and what its command line contains."""

WHOLE_WITHIN_S: Final = 10.0
JOB_WAIT_S: Final = 180.0
FAST_RECOVERY: Final = {
    "TTSQ_SWEEP_INTERVAL_S": "5",
    "TTSQ_SWEEP_GRACE_S": "15",
}
TEXT: Final = " ".join(
    [
        "The supervisor watched over every process of the stack.",
        "When one of them died, it waited a moment, then started it again with the same command line,",
        "on the same port and with the same data.",
        "Nobody had to do anything at all, and the jobs that were running went on as if nothing had happened.",
    ]
    * 4
)
"""Long enough (about 40 s of audio) to be still running when the kill comes."""


@dataclass
class Stack:
    """A running ``ttsq dev`` and how to look at it from outside."""

    dev: DevProcess
    ports: dict[str, int]
    settings: Settings = field(init=False)

    def __post_init__(self) -> None:
        self.settings = Settings(_env_file=None, redis_url=f"redis://127.0.0.1:{self.ports['redis']}/0")

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    def children(self) -> dict[str, int]:
        """The running children by name (a child waiting to be started again is missing)."""
        found: dict[str, int] = {}
        for process in psutil.Process(self.dev.process.pid).children():
            with suppress(psutil.Error):
                command = " ".join(process.cmdline())
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                found.update({name: process.pid for name, marker in CHILDREN.items() if marker in command})
        return found

    def missing(self) -> str | None:
        """What keeps the stack from being whole, or ``None``: every child running, the API ready,
        the worker's model loaded, Flower answering, both Celery nodes answering a ping."""
        absent = set(CHILDREN) - set(self.children())
        if absent:
            return f"not running: {sorted(absent)}"
        try:
            checks = {
                "API /readyz": f"{self.api_url}/readyz",
                "worker /readyz": f"http://127.0.0.1:{self.ports['worker-metrics']}/readyz",
                "Flower": f"http://127.0.0.1:{self.ports['flower']}/",
            }
            for what, url in checks.items():
                if httpx.get(url, timeout=2).status_code != 200:
                    return f"{what} not 200"
            nodes = pinged(self.settings)
        except Exception as e:  # connection refused while a child starts
            return repr(e)
        if not {"worker1", "webhooks"} <= nodes:
            return f"Celery nodes answering: {sorted(nodes)}"
        return None

    def wait_whole(self, timeout_s: float) -> float:
        """Seconds until the stack is whole; fails past ``timeout_s``, saying what was missing."""
        started = time.monotonic()
        last: str | None = "never checked"
        while time.monotonic() - started < timeout_s:
            last = self.missing()
            if last is None:
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"stack not whole {timeout_s:.0f}s after the kill: {last}\n{self.dev.output()[-3000:]}")


def pinged(settings: Settings) -> set[str]:
    producer = make_producer(settings)
    try:
        return {node.split("@")[0] for reply in producer.control.ping(timeout=1) or [] for node in reply}
    finally:
        producer.close()


@contextmanager
def dev_stack(tmp_path: Path) -> Iterator[Stack]:
    """``ttsq dev`` on free ports with its data under ``tmp_path``; afterwards, SIGTERM and proof
    that no process of it and no port is left."""
    ports = free_dev_ports()
    dev = DevProcess(dev_args(tmp_path / ".ttsq", ports), clean_env(**FAST_RECOVERY))
    stack = Stack(dev, ports)
    seen: set[psutil.Process] = set()
    try:
        yield stack
    finally:
        with suppress(psutil.Error):
            seen.update(dev.descendants())
        code = dev.terminate()
    assert code == 0, dev.output()[-3000:]
    assert all_gone(list(seen)), [p.pid for p in seen if p.is_running()]
    assert not any(port_in_use(port) for port in ports.values())


class Follower(threading.Thread):
    """A client long-polling a job (``ttsq say``'s wait) through whatever is killed meanwhile."""

    def __init__(self, api_url: str, job_id: str) -> None:
        super().__init__(daemon=True)
        self.api_url = api_url
        self.job_id = job_id
        self.job: dict[str, Any] | None = None
        self.error: ClientError | None = None
        self.finished_at = 0.0
        self.polling = threading.Event()
        """Set once its first answer came: from then on its client takes a failure for a restart."""

    def run(self) -> None:
        try:
            with TTSQClient(self.api_url) as client:
                client.get(self.job_id)
                self.polling.set()
                self.job = client.wait(self.job_id, JOB_WAIT_S)
        except ClientError as e:
            self.error = e
        self.finished_at = time.monotonic()


def submit(client: httpx.Client, text: str) -> str:
    response = client.post("/v1/jobs", json={"text": text})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def succeeded(client: httpx.Client, job_id: str, timeout_s: float = JOB_WAIT_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with suppress(httpx.TransportError):
            response = client.get(f"/v1/jobs/{job_id}", params={"wait": 10})
            if response.status_code == 200 and response.json()["status"] in {"succeeded", "failed", "canceled"}:
                job: dict[str, Any] = response.json()
                assert job["status"] == "succeeded", job
                return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not finished after {timeout_s:.0f}s")


def wait_printed(stack: Stack, text: str) -> None:
    wait_until(lambda: text in stack.dev.output(), 30, repr(text))


def wait_started(client: httpx.Client, job_id: str) -> None:
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] != "queued", 60, "the job started")


def audio_bytes(client: httpx.Client, job_id: str) -> bytes:
    response = client.get(f"/v1/jobs/{job_id}/audio", follow_redirects=True)
    assert response.status_code == 200, response.text
    return response.content


@pytest.mark.timeout(1500)
def test_each_child_sigkilled_is_started_again_and_jobs_before_and_after_succeed(tmp_path: Path) -> None:
    with dev_stack(tmp_path) as stack, httpx.Client(base_url=stack.api_url, timeout=30) as client:
        stack.dev.wait_ready()
        stack.wait_whole(120)  # the worker's model loaded, both nodes answering
        first = submit(client, "Hello before any kill.")
        kept_audio = audio_bytes(client, succeeded(client, first)["id"])
        figures: dict[str, Any] = {}
        for kills, name in enumerate(CHILDREN, start=1):
            before = submit(client, TEXT)
            wait_started(client, before)
            follower = Follower(stack.api_url, before)
            follower.start()
            assert follower.polling.wait(30)
            time.sleep(0.5)  # its long poll (?wait=) under way: no assertion rests on this pause
            pid = stack.children()[name]
            lines = stack.dev.output().count(f"ttsq dev: {name} killed by SIGKILL")
            status_at_kill = client.get(f"/v1/jobs/{before}").json()["status"]
            killed_at = time.monotonic()
            psutil.Process(pid).send_signal(signal.SIGKILL)
            whole_s = stack.wait_whole(WHOLE_WITHIN_S)
            assert stack.children()[name] != pid
            assert stack.dev.output().count(f"ttsq dev: {name} killed by SIGKILL") == lines + 1
            after = submit(client, f"Hello after the {name} came back.")
            after_job = succeeded(client, after)
            follower.join(JOB_WAIT_S + 30)
            assert follower.error is None, f"{name}: {follower.error}"
            assert follower.job is not None
            assert follower.job["status"] == "succeeded"
            assert audio_bytes(client, first) == kept_audio  # Redis and S3 kept what they had
            assert stack.dev.output().count("; starting it again in") == kills  # no other child died
            figures[name] = {
                "whole_again_s": round(whole_s, 1),
                "job_before_status_at_kill": status_at_kill,
                "job_before_done_s_after_kill": round(max(0.0, follower.finished_at - killed_at), 1),
                "job_after_duration_s": after_job["result"]["duration_s"],
            }
        record_figures("dev_stack_child_sigkill", {"settings": FAST_RECOVERY, "children": figures})


@pytest.mark.timeout(900)
def test_children_killed_while_the_stack_starts_are_started_again(tmp_path: Path) -> None:
    """Redis and the worker SIGKILLed once the API process exists, before the stack is ready."""
    with dev_stack(tmp_path) as stack:
        wait_until(lambda: {"api", "worker", "redis"} <= set(stack.children()), 120, "the API started")
        assert "ttsq is ready." not in stack.dev.output()
        for name in ("redis", "worker"):
            psutil.Process(stack.children()[name]).send_signal(signal.SIGKILL)
        stack.dev.wait_ready()
        stack.wait_whole(60)
        output = stack.dev.output()
        assert "ttsq dev: redis killed by SIGKILL" in output
        assert "ttsq dev: worker killed by SIGKILL" in output
        with httpx.Client(base_url=stack.api_url, timeout=30) as client:
            succeeded(client, submit(client, "Hello after a rough start."))


@pytest.mark.timeout(900)
def test_ctrl_c_while_a_child_waits_to_be_started_again_leaves_nothing(tmp_path: Path) -> None:
    """The API killed three times in a row waits 2 s, then 4 s, before its next start: Ctrl-C then
    stops everything, the API is not started again, and no process of the stack is left."""
    with dev_stack(tmp_path) as stack:
        stack.dev.wait_ready()
        for delay in ("0.5", "1.0", "2.0", "4.0"):
            wait_until(lambda: "api" in stack.children(), 60, "the API running")
            psutil.Process(stack.children()["api"]).send_signal(signal.SIGKILL)
            wait_printed(stack, f"; starting it again in {delay} s")
        assert "api" not in stack.children()
        children = stack.dev.descendants()
        stack.dev.process.send_signal(signal.SIGINT)
        assert stack.dev.process.wait(60) == 0
        assert all_gone(children), [p.pid for p in children if p.is_running()]
        after_stop = stack.dev.output().split("ttsq dev: stopping")[1]
        assert "Started server process" not in after_stop  # uvicorn's first line: the API stayed down


@pytest.mark.timeout(600)
def test_ctrl_c_while_the_stack_starts_stops_it_and_leaves_nothing(tmp_path: Path) -> None:
    with dev_stack(tmp_path) as stack:
        wait_until(lambda: {"redis", "seaweedfs", "worker"} <= set(stack.children()), 120, "the worker started")
        children = stack.dev.descendants()
        stack.dev.process.send_signal(signal.SIGINT)
        assert stack.dev.process.wait(60) == 0
        assert "ttsq is ready." not in stack.dev.output()
        assert all_gone(children), [p.pid for p in children if p.is_running()]
