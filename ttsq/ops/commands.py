"""Command lines of ttsq's own long-running processes: a worker, the API, Flower."""

from __future__ import annotations

import sys

from ttsq.constants import segment_queue


def worker_argv(concurrency: int, queue: str, node_name: str, loglevel: str = "INFO") -> list[str]:
    """A Celery worker on the threads pool: one model per process, shared by its threads, taking
    from the job queue and its segment queue in turn."""
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "worker",
        "--pool", "threads", "--concurrency", str(concurrency),
        "--queues", f"{queue},{segment_queue(queue)}", "--hostname", node_name, "--loglevel", loglevel,
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip


def api_argv(host: str, port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", "api.main:create_app", "--factory",
        "--host", host, "--port", str(port), "--no-access-log",
    ]  # fmt: skip


def flower_argv(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--address={host}", f"--port={port}"]
