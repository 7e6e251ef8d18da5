"""A whole ttsq stack of real processes whose parts can be killed and restarted: Redis with its
append-only file, SeaweedFS S3, the API, a synthesis worker, the service worker and beat, each on
free ports under one folder. The fault suite (``tests/test_faults.py``) and the chaos soak
(``bench/soak``) run on it."""

from __future__ import annotations

import os
import re
import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import redis

from cli.commands import api_argv, beat_argv, webhook_worker_argv
from cli.embedded import LOOPBACK, RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, free_port, wait_until
from cli.workerpool import start_local_worker, wait_for_node
from ttsq.job_store import JobStore
from ttsq.settings import Settings, settings_env
from ttsq.storage import ObjectStore
from ttsq.stores import Stores

BUCKET: Final = "ttsq-faults"

SERVICE_WORKER_CONCURRENCY: Final = 4
"""Threads of each service worker: webhooks and sweeps on a small stack."""

RETRY_LINE: Final = re.compile(r"Task ([\w.]+)\[([0-9a-f-]+)\] retry: Retry in")


class AofRedis(RedisService):
    """redis-server persisting every write to its append-only file, flushed to disk every second,
    as a production Redis is configured (``deploy/redis.conf``)."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        super().__init__(data_dir, port, appendonly=True)
        self.process.argv += ["--appendfsync", "everysec"]

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save; what survives is what the append-only file holds."""
        self.process.kill(signal.SIGKILL)
        self.process.stop()  # reaps it and closes its log


@dataclass
class FaultStack:
    """Redis, SeaweedFS, the API, one synthesis worker, the service worker and beat, each a process."""

    root: Path
    settings: Settings
    redis_server: AofRedis
    s3: SeaweedService
    api_url: str
    stores: Stores
    """The caller's own stores, to read what the stack stored (they reconnect after a restart)."""
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    @property
    def redis_client(self) -> redis.Redis:
        return self.stores.redis

    @property
    def jobs(self) -> JobStore:
        return self.stores.jobs

    def start_worker(self, name: str, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        """A synthesis worker (node ``<name>@<host>``); returns once it answers a ping, model loaded."""
        worker = start_local_worker(self.settings, name, self.root / f"{name}.log", extra_env=extra_env)
        self.processes[name] = worker
        return worker

    def start_service_worker(self, name: str) -> ManagedProcess:
        """A service worker (webhooks, sweeps; node ``<name>@<host>``); returns once it answers a ping."""
        env = {**os.environ, **settings_env(self.settings)}
        argv = webhook_worker_argv(SERVICE_WORKER_CONCURRENCY, f"{name}@%h")
        process = self.processes[name] = ManagedProcess(name, argv, self.log_path(name), env)
        wait_for_node(self.settings, f"{name}@", process.start(), 60)
        return process

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def alive(self) -> dict[str, bool]:
        return {name: process.alive for name, process in self.processes.items()}

    def retries(self, worker: str = "worker") -> dict[str, Any]:
        """Celery's retries of steps hit by an outage, from the worker's log: how many tasks of each
        kind were retried, and the most retries one task took (its job fails past ``task_max_retries``)."""
        retried = RETRY_LINE.findall(self.log_path(worker).read_text())
        per_task = Counter(task_id for _, task_id in retried)
        return {
            "tasks_retried": dict(Counter(name for name, _ in set(retried))),
            "most_retries_of_one_task": max(per_task.values(), default=0),
            "task_max_retries": self.settings.task_max_retries,
        }

    def objects(self) -> ObjectStore:
        return self.stores.objects


@contextmanager
def fault_stack(root: Path, **overrides: Any) -> Iterator[FaultStack]:
    """Start the whole stack under ``root`` with the given settings; stop every process afterwards."""
    with ExitStack() as stop:
        redis_service = AofRedis(root / "redis")
        redis_service.start()
        stop.callback(redis_service.stop)
        s3 = SeaweedService(root / "s3", BUCKET).start()
        stop.callback(s3.stop)
        settings = stack_settings(redis_service.url, s3, **overrides)
        env = {**os.environ, **settings_env(settings)}
        port = free_port()
        stores = Stores.connect(settings, socket_timeout_s=10, connect_timeout_s=2)
        stop.callback(stores.close)
        stack = FaultStack(root, settings, redis_service, s3, f"http://{LOOPBACK}:{port}", stores)
        stop.callback(_stop_all, stack.processes)
        api = stack.processes["api"] = ManagedProcess("api", api_argv(LOOPBACK, port), root / "api.log", env).start()
        wait_until(lambda: httpx.get(f"{stack.api_url}/healthz").status_code == 200, 60, "API", api)
        stack.start_service_worker("service")
        beat_args = beat_argv(root / "beat-schedule")
        stack.processes["beat"] = ManagedProcess("beat", beat_args, root / "beat.log", env).start()
        stack.start_worker("worker")
        yield stack


def _stop_all(processes: dict[str, ManagedProcess]) -> None:
    """Newest first: workers before the API, everything before Redis and S3."""
    for process in reversed(processes.values()):
        process.stop()
