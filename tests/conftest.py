"""Session fixtures: real redis-server, SeaweedFS S3, a Celery worker process and the API over HTTP.

Every fixture stops what it started. Ports are free ones, so the suite runs beside ``make dev``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import redis
import uvicorn
from fastapi import FastAPI
from mypy_boto3_s3 import S3Client

from api.main import create_app
from api.state import make_producer
from tts_core import DEFAULT_VOICE_ID
from tts_core.catalog import bundled_voices
from ttsq.processes import ManagedProcess, free_port, wait_until
from ttsq.services import RedisService, SeaweedService, stack_settings
from ttsq.settings import Settings, settings_env
from ttsq.workerpool import default_worker

TEST_BUCKET = "ttsq-test"
FOLDER_VOICE_ID = "en_US-folder-medium"
JOB_TIMEOUT_S = 90.0


@pytest.fixture(scope="session", autouse=True)
def _clean_environment() -> Iterator[None]:
    """Drop TTSQ_*, AWS_* and proxy variables of the developer's shell; restore them afterwards."""
    names = [n for n in os.environ if n.startswith(("TTSQ_", "AWS_")) or n.lower().endswith("_proxy")]
    with pytest.MonkeyPatch.context() as patch:
        for name in names:
            patch.delenv(name)
        yield


@pytest.fixture(scope="session")
def redis_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisService]:
    service = RedisService(tmp_path_factory.mktemp("redis")).start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def s3_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedService]:
    service = SeaweedService(tmp_path_factory.mktemp("seaweedfs"), TEST_BUCKET).start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A voices folder with the bundled model under a second id, as an operator would add a voice."""
    folder = tmp_path_factory.mktemp("voices")
    model, config = bundled_voices()[DEFAULT_VOICE_ID]
    (folder / f"{FOLDER_VOICE_ID}.onnx").symlink_to(model)
    shutil.copy(config, folder / f"{FOLDER_VOICE_ID}.onnx.json")
    return folder


@pytest.fixture(scope="session")
def settings(redis_service: RedisService, s3_service: SeaweedService, voices_dir: Path) -> Settings:
    return stack_settings(redis_service.url, s3_service, voices_dir=voices_dir)


def start_worker(
    settings: Settings, log_path: Path, name: str, extra_env: dict[str, str] | None = None
) -> ManagedProcess:
    """A real Celery worker process; returns once it answers a ping (model loaded)."""
    env = {**os.environ, **settings_env(settings), **(extra_env or {})}
    argv = default_worker(settings, f"{name}@%h", "INFO").argv
    worker = ManagedProcess(name, argv, log_path, env).start()
    producer = make_producer(settings)
    try:
        wait_until(
            lambda: any(name in reply for r in producer.control.ping(timeout=0.5) or [] for reply in r),
            120,
            f"worker {name}",
            worker,
        )
    except BaseException:
        worker.stop()
        raise
    finally:
        producer.close()
    return worker


@pytest.fixture(scope="session")
def worker(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    process = start_worker(settings, tmp_path_factory.mktemp("worker") / "worker.log", "main-worker")
    yield process
    process.stop()


class ThreadedServer(uvicorn.Server):
    """uvicorn in a background thread, as httpx's own test suite does."""

    def install_signal_handlers(self) -> None:  # the main thread belongs to pytest
        pass


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` on a real uvicorn server in a thread; yields its base URL."""
    port = free_port()
    server = ThreadedServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "API server")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="session")
def api_url(settings: Settings, worker: ManagedProcess) -> Iterator[str]:
    with serve(create_app(settings)) as url:
        yield url


@pytest.fixture
def client(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=30) as http:
        yield http


@pytest.fixture(scope="session")
def s3_client(s3_service: SeaweedService) -> S3Client:
    return boto3.client(
        "s3",
        endpoint_url=s3_service.endpoint_url,
        aws_access_key_id=s3_service.access_key,
        aws_secret_access_key=s3_service.secret_key,
        region_name="us-east-1",
    )


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis_url)
    yield client
    client.close()


def wait_for_job(client: httpx.Client, job_id: str, timeout_s: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    """Poll the API until the job is finished; returns its last JSON."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in {"succeeded", "failed", "canceled"}:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not finished after {timeout_s}s: {job}")
