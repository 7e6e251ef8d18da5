"""Command lines of ttsq's own long-running processes: a worker, the webhook worker, the API, the
Wyoming server, Flower."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from ttsq.constants import MAINTENANCE_QUEUE, WYOMING_PORT, consumed_queues

DEFAULT_WYOMING_URI = f"tcp://0.0.0.0:{WYOMING_PORT}"
"""``ttsq wyoming``'s address: every interface, as wyoming-piper's; compose and Kubernetes keep it
inside their networks."""


def worker_argv(concurrency: int, queue: str, node_name: str, loglevel: str = "INFO") -> list[str]:
    """A Celery worker on the threads pool: one model per process, shared by its threads, taking
    from the interactive, job and segment queues in that order."""
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "worker",
        "--pool", "threads", "--concurrency", str(concurrency),
        "--queues", ",".join(consumed_queues(queue)), "--hostname", node_name, "--loglevel", loglevel,
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip


SERVICE_WORKER_THREADS = 4
"""Celery threads of the service worker: the sweeper, the cleanup and batches' finishing tasks (webhook
deliveries run on the dispatcher's event loop, not on these)."""


def webhook_worker_argv(concurrency: int, node_name: str, loglevel: str = "INFO") -> list[str]:
    """The service worker: the periodic maintenance tasks on ``concurrency`` threads, and the webhook
    dispatcher beside them (``workers.service``); its own app, no model."""
    return [
        sys.executable, "-m", "celery", "-A", "workers.service", "worker",
        "--pool", "threads", "--concurrency", str(concurrency),
        "--queues", MAINTENANCE_QUEUE, "--hostname", node_name, "--loglevel", loglevel,
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip


def beat_argv(schedule_file: Path, loglevel: str = "INFO") -> list[str]:
    """Celery beat, sending the sweeper and the cleanup on their schedule (one per deployment;
    a second one only repeats runs, which take a lock)."""
    return [
        sys.executable, "-m", "celery", "-A", "workers.service", "beat",
        "--schedule", str(schedule_file), "--loglevel", loglevel,
    ]  # fmt: skip


VOICEVOX_PORT: Final = 50021
"""VOICEVOX ENGINE's own port: where ``ttsq dev`` serves the VOICEVOX-compatible API, so clients
configured for a local engine find it unchanged."""


def api_argv(host: str, port: int, voicevox_port: int | None = None) -> list[str]:
    """The API; with ``voicevox_port``, ``ttsq api``'s second server for the VOICEVOX facade."""
    if voicevox_port is not None:
        return [
            sys.executable, "-m", "cli.main", "api", "--host", host, "--port", str(port),
            "--voicevox-port", str(voicevox_port), "--no-access-log",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "uvicorn", "api.main:create_app", "--factory",
        "--host", host, "--port", str(port), "--no-access-log",
    ]  # fmt: skip


def wyoming_argv(uri: str) -> list[str]:
    """The Wyoming server (``ttsq wyoming``), through this checkout's ``cli.main``."""
    return [sys.executable, "-m", "cli.main", "wyoming", "--uri", uri]


def flower_argv(host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "workers.app", "flower", f"--address={host}", f"--port={port}"]
