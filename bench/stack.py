"""A whole ttsq stack for benchmarking: Redis, SeaweedFS S3 and the API stay up; workers are
restarted with each section's settings. Jobs go in over HTTP; completion is read from Redis."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.submit_keys import bench_client
from cli.commands import api_argv
from cli.embedded import LOOPBACK, RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, free_port, wait_until
from cli.workerpool import default_worker
from ttsq.broker import make_producer
from ttsq.constants import consumed_queues
from ttsq.job_record import JobRecord, JobStatus
from ttsq.settings import Settings, WorkerSettings, settings_env
from ttsq.stores import Stores

BUCKET = "ttsq-bench"
WORKER_START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Submitted:
    job_id: str
    submitted_at: float
    """Client wall clock just before the POST (same host as the servers)."""


class BenchStack:
    def __init__(self, root: Path, env: dict[str, str] | None = None, **overrides: Any) -> None:
        """``overrides``: settings of the whole stack (API and workers), e.g. ``voices_dir``; ``env``:
        more environment of its API and workers (the OpenTelemetry variables of the tracing section)."""
        self.root = root
        self.env = {**os.environ, **(env or {})}
        self.redis = RedisService(root / "redis").start()
        self.s3 = SeaweedService(root / "s3", BUCKET).start()
        self.base = stack_settings(self.redis.url, self.s3, **overrides)
        self.workers: list[ManagedProcess] = []
        self.metrics_ports: list[int] = []
        """Each running worker's metrics port, in ``workers``' order."""
        port = free_port()
        env = {**self.env, **settings_env(self.base)}
        self.api = ManagedProcess("api", api_argv(LOOPBACK, port), root / "api.log", env).start()
        self.url = f"http://{LOOPBACK}:{port}"
        wait_until(lambda: httpx.get(f"{self.url}/healthz").status_code == 200, 60, "bench API", self.api)
        self.http = bench_client(base_url=self.url, timeout=60)
        self.stores = Stores.connect(self.base, socket_timeout_s=None)
        self.jobs = self.stores.jobs
        self.batch_store = self.stores.batches
        self.objects = self.stores.objects
        self._started = 0

    def settings(self, **worker: Any) -> Settings:
        overrides = {k: v for k, v in worker.items() if k in Settings.model_fields}
        worker_fields = {k: v for k, v in worker.items() if k not in overrides}
        return self.base.model_copy(update={**overrides, "worker": WorkerSettings(**worker_fields)})

    def start_workers(self, count: int = 1, **worker: Any) -> Settings:
        """Replace the running workers with ``count`` new ones; returns once all answer a ping."""
        self.stop_workers()
        settings = self.settings(**worker)
        for _ in range(count):
            self._started += 1
            name = f"bench{self._started}"
            own_port = settings.worker.model_copy(update={"metrics_port": free_port()})
            self.metrics_ports.append(own_port.metrics_port or 0)
            spec = default_worker(settings.model_copy(update={"worker": own_port}), f"{name}@%h", "WARNING")
            env = {**self.env, **spec.env}
            self.workers.append(ManagedProcess(name, spec.argv, self.root / f"{name}.log", env).start())
        producer = make_producer(settings)
        try:
            wait_until(
                lambda: len({n for r in producer.control.ping(timeout=0.5) or [] for n in r}) >= count,
                WORKER_START_TIMEOUT_S,
                "bench workers",
            )
        finally:
            producer.close()
        return settings

    def stop_workers(self) -> None:
        for process in self.workers:
            process.stop()
        self.workers = []
        self.metrics_ports = []

    def purge_queues(self) -> None:
        """Empty the synthesis queues (what a canceled job left there)."""
        producer = make_producer(self.base)
        try:
            with producer.connection_for_write() as connection:
                channel: Any = connection.default_channel
                for name in consumed_queues(self.base.queue):
                    channel.queue_purge(name)
        finally:
            producer.close()

    def worker_rss_bytes(self) -> int:
        """Resident memory of the worker processes, children included."""
        total = 0
        for process in self.workers:
            root = psutil.Process(process.pid)
            total += sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        return total

    def submit(self, text: str, **options: Any) -> Submitted:
        started = time.time()
        response = self.http.post("/v1/jobs", json={"text": text, **options})
        response.raise_for_status()
        return Submitted(response.json()["id"], started)

    def wait_all(self, jobs: list[Submitted], timeout_s: float = 3600.0) -> list[JobRecord]:
        """Poll Redis until every job has finished; fail loudly on any job that did not succeed."""
        pending = {j.job_id for j in jobs}
        records: dict[str, JobRecord] = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} jobs unfinished after {timeout_s:.0f}s")
            for job_id in list(pending):
                record = self.jobs.get(job_id)
                if not record.status.terminal:
                    continue
                if record.status is not JobStatus.SUCCEEDED or record.result is None:
                    raise RuntimeError(f"job {job_id} ended {record.status.value}: {record.error}")
                records[job_id] = record
                pending.discard(job_id)
            time.sleep(0.5)  # finish times come from the records, so polling slowly costs no accuracy
        for record in records.values():  # the audio really is in S3
            assert record.result is not None
            if self.objects.get(record.result.key) is None:
                raise RuntimeError(f"job {record.id} succeeded but {record.result.key} is missing")
        return [records[j.job_id] for j in jobs]

    def segments_done(self, job_id: str) -> int:
        """Counted segments of a running multi-segment job."""
        return self.stores.segments.progress(job_id).done

    def batches(self, limit: int = 1000) -> list[dict[str, Any]]:
        """Each running worker's ``batches`` inspect reply."""
        producer = make_producer(self.base)
        try:
            replies = producer.control.broadcast(
                "batches", reply=True, arguments={"limit": limit}, limit=len(self.workers), timeout=5
            )
        finally:
            producer.close()
        return [stats for reply in replies or [] for stats in reply.values()]

    def close(self) -> None:
        self.stop_workers()
        self.http.close()
        self.stores.close()
        self.api.stop()
        self.s3.stop()
        self.redis.stop()
