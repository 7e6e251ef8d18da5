"""Session fixtures: real redis-server, SeaweedFS S3, a Celery worker process and the API over HTTP.

Every fixture stops what it started. Ports are free ones, so the suite runs beside ``make dev``.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import boto3
import httpx
import pytest
import redis
import uvicorn
from fastapi import FastAPI
from mypy_boto3_s3 import S3Client
from pydantic import SecretStr

from api.main import create_app
from cli.commands import webhook_worker_argv
from cli.embedded import RedisService, SeaweedService, stack_settings
from cli.processes import ManagedProcess, ServiceExited, free_port, wait_until
from cli.workerpool import spawn_local_worker, start_local_worker, wait_for_node
from tests.voices import write_broken_voice, write_multi_speaker_voice
from tts_core.voices.catalog import DEFAULT_VOICE_ID, bundled_voices
from ttsq.broker import make_producer
from ttsq.constants import SYNTHESIZE_TASK, consumed_queues, idempotency_key, interactive_queue
from ttsq.job_record import JobRecord, JobStatus, new_job_id, utcnow
from ttsq.job_store import JobStore
from ttsq.settings import Settings, settings_env
from ttsq.tenants import ANONYMOUS_TENANT, Limits

T = TypeVar("T")

TEST_BUCKET = "ttsq-test"
FOLDER_VOICE_ID = "en_US-folder-medium"
JOB_TIMEOUT_S = 90.0


LONGEST_MODULES_FIRST: Final = (
    "test_schemathesis.py",
    "test_japanese_long_text.py",
    "test_lexicons.py",
    "test_narrate.py",
    "test_model_pool.py",
    "test_sweeper.py",
    "test_interactive_slot.py",
    "test_dev_stack.py",
    "test_stop_signal.py",
    "test_voicevox.py",
    "test_wyoming.py",
    "test_japanese.py",
    "test_jobs_api.py",
    "test_webhook_fairness.py",
    "test_metrics_cardinality.py",
)
"""The modules that took longest (20-60 s each, on 2 cores), handed out first: ``make test`` has
pytest-xdist give modules to its processes in collection order (``--dist loadfile
--no-loadscope-reorder``), and one of these last would leave the other processes idle for most of its
length. The rest keep their order."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort


@pytest.fixture(scope="session", autouse=True)
def _clean_environment() -> Iterator[None]:
    """Drop TTSQ_*, AWS_*, OTEL_* (a shell's tracing would make every test's processes export) and
    proxy variables of the developer's shell; restore them afterwards."""
    names = [n for n in os.environ if n.startswith(("TTSQ_", "AWS_", "OTEL_")) or n.lower().endswith("_proxy")]
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
    """A voices folder with the bundled model under a second id, as an operator would add a voice, and
    two voices made from it (tests/voices.py): one with two speakers, one that fails on "θ"."""
    folder = tmp_path_factory.mktemp("voices")
    model, config = bundled_voices()[DEFAULT_VOICE_ID]
    (folder / f"{FOLDER_VOICE_ID}.onnx").symlink_to(model)
    shutil.copy(config, folder / f"{FOLDER_VOICE_ID}.onnx.json")
    write_multi_speaker_voice(folder)
    write_broken_voice(folder)
    return folder


TEST_WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"ttsq test webhook secret, 32 bytes").decode()
TEST_WEBHOOK_RETRIES = [0.3, 0.3, 0.3]
"""Four attempts, a fraction of a second apart (production: about a day)."""

SUITE_SWEEP_GRACE_S: Final = 3600.0
"""No test's job gets this old: the suite's service workers leave its unqueued records alone."""


def database_url(redis_url: str, database: int) -> str:
    """``redis_url`` on another database of the same server: a module's own, which the suite's service
    workers (sweeping only the suite's database) never touch."""
    return redis_url.rsplit("/", 1)[0] + f"/{database}"


def production_sweep(settings: Settings) -> Settings:
    """``settings`` with the sweeper's production interval and grace (the suite's grace is an hour)."""
    names = ("sweep_interval_s", "sweep_grace_s")
    return settings.model_copy(update={name: Settings.model_fields[name].default for name in names})


@pytest.fixture(scope="session")
def settings(redis_service: RedisService, s3_service: SeaweedService, voices_dir: Path) -> Settings:
    """The suite's settings; webhooks may go to receivers on loopback, with a fast retry schedule.
    The service workers sweep only jobs an hour old: tests store records that no message names on
    purpose (or send them to queues no worker reads), and the sweeper would run them within seconds
    (``tests/test_sweeper.py`` sweeps a database of its own)."""
    base = stack_settings(redis_service.url, s3_service, voices_dir=voices_dir)
    return base.model_copy(
        update={
            "webhook_secret": SecretStr(TEST_WEBHOOK_SECRET),
            "webhook_allow_private": True,
            "webhook_retry_schedule_s": TEST_WEBHOOK_RETRIES,
            "webhook_timeout_s": 2.0,
            "webhook_connect_timeout_s": 1.0,
            "sweep_grace_s": SUITE_SWEEP_GRACE_S,
            # The suite builds dozens of short-lived APIs, most never sent a long text: their helper
            # processes start with the first one (tests/test_heavy_requests.py shows both ways).
            "heavy_processes_at_start": False,
            # No pacing by default: the tests of one process share its Redis, so one test's keys
            # would make the service contended for the next, whose anonymous submissions were then
            # spaced by what earlier tests' long bodies cost (a 429 seen in CI). Pacing is tested
            # with limits of its own (tests/test_pacing.py).
            "default_limits": Limits(),
            # Workers a test starts of its own run one inference call at a time: each that met two
            # calls at once would load its model's one-thread twin (about 2 CPU s). The session
            # worker keeps the default, two on CPU (``session_workers``).
            "worker": base.worker.model_copy(update={"parallel_calls": 1}),
        }
    )


def start_worker(
    settings: Settings, log_path: Path, name: str, extra_env: dict[str, str] | None = None
) -> ManagedProcess:
    """A real Celery worker process; returns once it answers a ping (model loaded). Its metrics and
    probes listen on a free port (``TTSQ_WORKER__METRICS_PORT`` in its ``env``)."""
    return start_local_worker(settings, name, log_path, extra_env=extra_env, timeout_s=120)


def start_workers(folder: Path, settings_by_name: dict[str, Settings]) -> dict[str, ManagedProcess]:
    """Several workers, each with its own settings and ``<folder>/<name>.log``, started at once: most
    of a start is one core's work (imports, the model), so on two cores three take the time of about
    one and a half. Returns once all answer a ping; if one never does, stops them all."""
    started: dict[str, ManagedProcess] = {}
    try:
        for name, custom in settings_by_name.items():
            started[name] = spawn_local_worker(custom, name, folder / f"{name}.log")
        for name, process in started.items():
            wait_for_node(settings_by_name[name], name, process, 120)
    except BaseException:
        stop_all(started.values())
        raise
    return started


def _answers(url: str) -> bool:
    return httpx.get(url).status_code == 200


def start_on_a_free_port(
    name: str, argv_for: Callable[[int], list[str]], log_path: Path, env: dict[str, str], health_path: str
) -> tuple[ManagedProcess, str]:
    """A server process on a port picked free, once it answers ``health_path`` with 200; returns it and
    its base URL. A port is only free when picked: another process may bind it before this one does
    (the server then exits, "address already in use"), so it is started again on a new port, 3 tries."""
    for attempt in range(3):
        port = free_port()
        process = ManagedProcess(name, argv_for(port), log_path, env).start()
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(functools.partial(_answers, f"{url}{health_path}"), 60, name, process)
        except ServiceExited:
            process.stop()
            if attempt == 2:
                raise
            continue
        return process, url
    raise AssertionError("unreachable")


def stop_all(processes: Iterable[ManagedProcess]) -> None:
    """Stop several processes, their warm shutdowns at once: SIGTERM to each, then wait for each."""
    processes = list(processes)
    for process in processes:
        process.kill(signal.SIGTERM)
    for process in processes:
        process.stop()


@contextmanager
def paused(process: ManagedProcess) -> Iterator[None]:
    """The process (its whole group) stopped by SIGSTOP for the block and continued after it: it
    answers nothing and takes no work meanwhile, and then goes on with whatever it held."""
    process.kill(signal.SIGSTOP)
    try:
        yield
    finally:
        process.kill(signal.SIGCONT)


@pytest.fixture(scope="session")
def session_workers(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ManagedProcess]]:
    """The suite's synthesis worker and its service worker (webhooks, maintenance, batches), as
    ``ttsq dev`` runs them, started together so that their start-ups overlap (``worker`` and
    ``webhook_worker`` each wait for their own)."""
    as_deployed = settings.model_copy(update={"worker": settings.worker.model_copy(update={"parallel_calls": None})})
    main = spawn_local_worker(as_deployed, "main-worker", tmp_path_factory.mktemp("worker") / "worker.log")
    service_log = tmp_path_factory.mktemp("webhooks") / "webhooks.log"
    env = {**os.environ, **settings_env(settings)}
    service = ManagedProcess("webhook-worker", webhook_worker_argv(4, "webhook-worker@%h"), service_log, env).start()
    yield {"main-worker": main, "webhook-worker": service}
    stop_all([main, service])


@pytest.fixture(scope="session")
def worker(settings: Settings, session_workers: dict[str, ManagedProcess]) -> ManagedProcess:
    """The synthesis worker on the suite's settings; once it answers a ping (its model loaded)."""
    wait_for_node(settings, "main-worker", session_workers["main-worker"], 120)
    return session_workers["main-worker"]


@pytest.fixture(scope="session")
def webhook_worker(settings: Settings, session_workers: dict[str, ManagedProcess]) -> ManagedProcess:
    """The service worker, with the webhook dispatcher; once it answers a ping."""
    wait_for_node(settings, "webhook-worker", session_workers["webhook-worker"], 60)
    return session_workers["webhook-worker"]


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


@dataclass(frozen=True)
class IdleQueueApi:
    """An API sending to queues no worker reads: its jobs stay queued and their messages can be read."""

    client: httpx.Client
    queue: str
    """Where its short (interactive) jobs' messages wait."""


@pytest.fixture(scope="session")
def idle_queue_server(settings: Settings) -> Iterator[tuple[str, str]]:
    """The URL and base queue name of an API whose queues no worker reads, one for the session:
    starting one for each of a hundred tests took a third of a second each. It sends without voice
    affinity, so every job's entry waits in the fixed queue of its class (``tests/test_model_pool.py``
    checks the model queues)."""
    base = f"idle-{uuid.uuid4()}"
    with serve(create_app(settings.model_copy(update={"queue": base, "model_affinity": False}))) as url:
        yield url, base


@pytest.fixture
def idle_queue_api(idle_queue_server: tuple[str, str], redis_client: redis.Redis) -> Iterator[IdleQueueApi]:
    """The idle API, its queues empty when the test starts and emptied when it ends."""
    url, base = idle_queue_server
    redis_client.delete(*consumed_queues(base))
    with httpx.Client(base_url=url, timeout=30) as api:  # a 1 MB body on a busy 2-core machine takes seconds
        yield IdleQueueApi(api, interactive_queue(base))
    redis_client.delete(*consumed_queues(base))


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


LONG_POLL_S: Final = 5.0
"""The longest ``?wait=`` of :func:`wait_for_job`'s requests: a change the API's event hub missed
(a Redis failover mid-wait) costs this at most, not the hub's 30 s resync."""


def wait_for_job(client: httpx.Client, job_id: str, timeout_s: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    """Wait until the job is finished, with the API's long poll (``GET /v1/jobs/{id}?wait=``) as a
    client would, not a request every tenth of a second (each of which cost the test process 3 ms of
    CPU, client and in-process server together); returns its last JSON."""

    def read() -> httpx.Response:
        remaining = max(0.0, deadline - time.monotonic())
        return client.get(f"/v1/jobs/{job_id}", params={"wait": round(min(remaining, LONG_POLL_S), 3)})

    deadline = time.monotonic() + timeout_s
    finished = wait_for(
        read, lambda answer: JobStatus(answer.json()["status"]).terminal, timeout_s, f"job {job_id} finished"
    )
    job: dict[str, Any] = finished.json()
    return job


def wait_for(read: Callable[[], T], done: Callable[[T], bool], timeout_s: float, what: str) -> T:
    """``read()`` again until ``done`` says yes to what it read, with the suite's one poll loop
    (``cli.processes.wait_until``); returns that reading. Past ``timeout_s`` the assertion names the
    last reading (a response: its status and body)."""
    readings: list[T] = []

    def check() -> bool:
        readings.append(read())
        del readings[:-1]
        return done(readings[-1])

    try:
        wait_until(check, timeout_s, what)
    except TimeoutError:
        last = readings[-1] if readings else "nothing read"
        if isinstance(last, httpx.Response):
            last = f"{last.status_code} {last.text[:2000]}"
        raise AssertionError(f"{what}: not after {timeout_s:g}s; last read: {last}") from None
    return readings[-1]


def holds_throughout(check: Callable[[], bool], duration_s: float, what: str) -> None:
    """``check()`` read again and again for ``duration_s``: true at every reading (what must not
    happen for a while, such as a job taken by a worker that cannot run it)."""
    until = time.monotonic() + duration_s
    while time.monotonic() < until:
        assert check(), f"{what}: not so {duration_s - (until - time.monotonic()):.1f} s in"
        time.sleep(0.2)


def enqueue(settings: Settings, job_id: str) -> str:
    """Send one more entry task for the job; returns its task id."""
    producer = make_producer(settings)
    try:
        return str(producer.send_task(SYNTHESIZE_TASK, args=[job_id], queue=settings.queue).id)
    finally:
        producer.close()


def wait_for_tasks(worker: ManagedProcess, task_ids: list[str], outcome: str = "succeeded") -> None:
    """Until the worker has logged each task's outcome: evidence that it ran, not a guess by sleep."""
    log_path = worker.log_path
    assert log_path is not None
    lines = [f"Task {SYNTHESIZE_TASK}[{task_id}] {outcome}" for task_id in task_ids]
    wait_until(lambda: all(line in log_path.read_text() for line in lines), 60, f"tasks {outcome}")


def idempotency_claim(client: redis.Redis, made_id: str, tenant: str = ANONYMOUS_TENANT) -> dict[str, Any] | None:
    """The ``Idempotency-Key`` claim naming the job or batch ``made_id``: None if its submit sent no key."""
    for entry in client.scan_iter(match=idempotency_key(tenant, "*"), count=1000):
        raw = client.get(entry)
        if raw is not None and json.loads(raw)["job_id"] == made_id:
            claim: dict[str, Any] = json.loads(raw)
            return claim
    return None


def create_record(store: JobStore, text: str = "Hello again.", **fields: object) -> JobRecord:
    """A job record written straight to Redis, as the API would (with fields the API would refuse)."""
    record = JobRecord.model_validate(
        {
            "id": new_job_id(),
            "voice": DEFAULT_VOICE_ID,
            "format": "wav",
            "characters": len(text),
            "created_at": utcnow(),
            **fields,
        }
    )
    store.create(record, text)
    return record


@pytest.fixture
def store(redis_client: redis.Redis, settings: Settings) -> JobStore:
    return JobStore(redis_client, settings.job_ttl_s)
