"""Machinery of the fault suite (``tests/test_faults.py``): a whole ttsq stack of real processes
whose parts can be killed and restarted, clients that submit bursts as a user's code would, what the
stack holds afterwards, and the figures each scenario records in ``bench/results/faults-latest.json``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, cast

import httpx
import redis

from bench.corpus import narration, paragraphs, short_messages
from bench.machine import describe
from cli.commands import api_argv, beat_argv, webhook_worker_argv
from cli.embedded import LOOPBACK, RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, free_port, wait_until
from cli.workerpool import start_local_worker, wait_for_node
from ttsq.constants import KEY_PREFIX
from ttsq.jobs import JobRecord, JobStatus, JobStore
from ttsq.maintenance import TMP_PREFIX
from ttsq.settings import Settings, settings_env
from ttsq.storage import ObjectStore
from ttsq.tenants import ANONYMOUS_TENANT

RESULTS_PATH: Final = Path(__file__).resolve().parents[1] / "bench" / "results" / "faults-latest.json"
BUCKET: Final = "ttsq-faults"
JOBS_PREFIX: Final = f"{ANONYMOUS_TENANT}/jobs/"
"""Where the anonymous tenant's audio lands: ``anonymous/jobs/<id>/audio.<ext>``."""
MAX_CLIENT_WAIT_S: Final = 5.0
"""Longest pause a client makes on a 503 (it honours ``Retry-After`` up to this)."""

RETRY_LINE: Final = re.compile(r"Task ([\w.]+)\[([0-9a-f-]+)\] retry: Retry in")
_JOB_KEY = re.compile(rf"^{KEY_PREFIX}:job:([0-9a-f-]{{36}})$")


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
    redis_client: redis.Redis
    """The test's own connection, to read what the stack stored (it reconnects after a restart)."""
    processes: dict[str, ManagedProcess] = field(default_factory=dict)

    def start_worker(self, name: str, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        """A synthesis worker (node ``<name>@<host>``); returns once it answers a ping, model loaded."""
        worker = start_local_worker(self.settings, name, self.root / f"{name}.log", extra_env=extra_env)
        self.processes[name] = worker
        return worker

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
        return ObjectStore(self.settings.s3)


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
        client = redis.Redis.from_url(redis_service.url, socket_timeout=10, socket_connect_timeout=2)
        stop.callback(client.close)
        stack = FaultStack(root, settings, redis_service, s3, f"http://{LOOPBACK}:{port}", client)
        stop.callback(_stop_all, stack.processes)
        api = stack.processes["api"] = ManagedProcess("api", api_argv(LOOPBACK, port), root / "api.log", env).start()
        wait_until(lambda: httpx.get(f"{stack.api_url}/healthz").status_code == 200, 60, "API", api)
        service_argv = webhook_worker_argv(4, "service@%h")
        service = stack.processes["service"] = ManagedProcess("service", service_argv, root / "service.log", env)
        wait_for_node(settings, "service@", service.start(), 60)
        beat_args = beat_argv(root / "beat-schedule")
        stack.processes["beat"] = ManagedProcess("beat", beat_args, root / "beat.log", env).start()
        stack.start_worker("worker")
        yield stack


def _stop_all(processes: dict[str, ManagedProcess]) -> None:
    """Newest first: workers before the API, everything before Redis and S3."""
    for process in reversed(processes.values()):
        process.stop()


@dataclass
class Burst:
    """Clients submitting texts from threads, as a user's code would: a 503 is retried after its
    ``Retry-After``, under the text's own ``Idempotency-Key`` (the safe path docs/API.md gives for a
    503 that names a job it may have stored), as is ``409 idempotency_in_flight``; a 202, or a 200
    replaying the job of an earlier try, is an accepted job. A transport error (no answer) is retried
    too, and counted, since its request may or may not have been taken."""

    api_url: str
    texts: Sequence[str]
    threads: int
    deadline_s: float = 600.0
    pace_s: float = 0.0
    """Pause of each client after each accepted job (a stream of submissions rather than a burst)."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Request fields besides the text (``priority``...)."""
    accepted: dict[str, float] = field(default_factory=dict)
    """Job id → when the API answered 202 (monotonic)."""
    refusals: Counter[str] = field(default_factory=Counter)
    """``503 <code>`` → how many; each was retried."""
    transport_errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    """Any other answer: its status and body (the text is not retried)."""
    started_at: float = 0.0
    finished_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pending: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Burst:
        for text in self.texts:
            self._pending.put(text)
        self.started_at = time.monotonic()
        self._workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for thread in self._workers:
            thread.start()
        return self

    def count(self) -> int:
        with self._lock:
            return len(self.accepted)

    def submitting(self) -> bool:
        """Whether some client is still submitting."""
        return any(thread.is_alive() for thread in self._workers)

    def join(self) -> None:
        for thread in self._workers:
            thread.join(max(1.0, self.started_at + self.deadline_s + 60 - time.monotonic()))
        self.finished_at = time.monotonic()
        assert not any(t.is_alive() for t in self._workers), f"submissions unfinished after {self.deadline_s:.0f}s"

    def _run(self) -> None:
        with httpx.Client(base_url=self.api_url, timeout=30) as client:
            while time.monotonic() < self.started_at + self.deadline_s:
                try:
                    text = self._pending.get_nowait()
                except queue.Empty:
                    return
                self._submit(client, text)

    def _submit(self, client: httpx.Client, text: str) -> None:
        key = {"Idempotency-Key": f"burst-{uuid.uuid4()}"}
        while time.monotonic() < self.started_at + self.deadline_s:
            try:
                response = client.post("/v1/jobs", json={"text": text, **self.fields}, headers=key)
            except httpx.TransportError as e:
                with self._lock:
                    self.transport_errors[type(e).__name__] += 1
                time.sleep(1)
                continue
            if response.status_code in (200, 202):  # 200: a retry given the job of an earlier try
                with self._lock:
                    self.accepted[response.json()["id"]] = time.monotonic()
                time.sleep(self.pace_s)
                return
            code = _error_code(response)
            if response.status_code != 503 and code != "idempotency_in_flight":
                with self._lock:
                    self.unexpected.append(f"{response.status_code} {response.text[:300]}")
                return
            with self._lock:
                self.refusals[f"{response.status_code} {code}"] += 1
            time.sleep(min(float(response.headers.get("retry-after", 1)), MAX_CLIENT_WAIT_S))

    def figures(self) -> dict[str, Any]:
        return {
            "submitted_texts": len(self.texts),
            "client_threads": self.threads,
            "accepted_202": len(self.accepted),
            "refused_503": dict(self.refusals),
            "transport_errors": dict(self.transport_errors),
            "unexpected_answers": len(self.unexpected),
            "submission_wall_s": round(self.finished_at - self.started_at, 1),
        }


def _error_code(response: httpx.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


def job_ids_in_redis(client: redis.Redis) -> set[str]:
    """Every job that has a record, whoever created it."""
    found: set[str] = set()
    for key in client.scan_iter(match=f"{KEY_PREFIX}:job:*", count=1000):
        matched = _JOB_KEY.match(key.decode())
        if matched:
            found.add(matched.group(1))
    return found


def records(client: redis.Redis, ids: Sequence[str]) -> dict[str, JobRecord | None]:
    store = JobStore(client, 60)
    found: dict[str, JobRecord | None] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        found.update(zip(chunk, store.many(chunk), strict=True))
    return found


def wait_terminal(client: redis.Redis, ids: Sequence[str], timeout_s: float) -> dict[str, JobRecord | None]:
    """Poll the records until every job is terminal (or has no record) or ``timeout_s`` passes;
    returns the last reading either way, for the test to judge."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = records(client, ids)
        except redis.RedisError:  # Redis restarting: read again, unless time is up
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
            continue
        if all(r is None or r.status.terminal for r in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(1)


@dataclass(frozen=True)
class Outcome:
    """What became of a set of accepted jobs."""

    lost: list[str]
    """Accepted, but no record exists."""
    stuck: dict[str, str]
    """Not terminal: id → status."""
    by_status: dict[str, int]
    failed_codes: dict[str, int]
    requeued: int
    """Jobs the sweeper found without work and queued again."""
    object_counts: dict[str, int]
    """Succeeded job id → objects under its prefix; should be 1 each."""

    @property
    def wrong_objects(self) -> dict[str, int]:
        return {job_id: n for job_id, n in self.object_counts.items() if n != 1}

    def figures(self) -> dict[str, Any]:
        return {
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "by_status": self.by_status,
            "failed_codes": self.failed_codes,
            "requeued_by_sweeper": self.requeued,
            "succeeded_without_exactly_one_object": len(self.wrong_objects),
        }


def objects_per_job(objects: ObjectStore) -> Counter[str]:
    return Counter(key.split("/")[2] for key in objects.list_keys(JOBS_PREFIX))


def outcome(found: dict[str, JobRecord | None], objects: ObjectStore) -> Outcome:
    present = {job_id: r for job_id, r in found.items() if r is not None}
    stored = objects_per_job(objects)
    succeeded = [job_id for job_id, r in present.items() if r.status is JobStatus.SUCCEEDED]
    return Outcome(
        lost=sorted(job_id for job_id, r in found.items() if r is None),
        stuck={job_id: r.status.value for job_id, r in present.items() if not r.status.terminal},
        by_status=dict(Counter(r.status.value for r in present.values())),
        failed_codes=dict(Counter(r.error.code for r in present.values() if r.error is not None)),
        requeued=sum(1 for r in present.values() if r.requeues > 0),
        object_counts={job_id: stored.get(job_id, 0) for job_id in succeeded},
    )


def tmp_parts(objects: ObjectStore) -> list[str]:
    return objects.list_keys(TMP_PREFIX)


def short_texts(count: int) -> list[str]:
    """``count`` one- to two-second messages from the bench corpus, in turn."""
    messages = short_messages()
    return [messages[i % len(messages)] for i in range(count)]


def prose(chars: int) -> str:
    """Continuous prose from the bench corpus (about 46,000 characters), cut at a sentence end at
    most ``chars`` long."""
    cut = "\n\n".join([*paragraphs(), narration()])[:chars]
    return cut[: cut.rfind(".") + 1]


def record_figures(scenario: str, figures: dict[str, Any]) -> None:
    """Print the scenario's figures and merge them into ``bench/results/faults-latest.json``."""
    print(f"\n{scenario}: {json.dumps(figures, indent=2, default=str)}")
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = cast(dict[str, Any], json.loads(RESULTS_PATH.read_text()))
    except (OSError, ValueError):
        result = {}
    result["machine"] = describe()
    result.setdefault("scenarios", {})[scenario] = {"recorded_at": datetime.now(UTC).isoformat(), **figures}
    RESULTS_PATH.write_text(json.dumps(result, indent=2, default=str) + "\n")
