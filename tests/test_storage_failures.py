"""Storage failures through a real worker: a refusal of the worker's settings keeps that worker from
taking jobs (they wait, none fails: ``tests/test_sick_workers.py`` shows a healthy worker beside it
running them); an outage is retried by Celery (with backoff) and fails the job only when the retries
run out."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from pydantic import SecretStr

from cli.processes import ManagedProcess, free_port, wait_until
from tests.conftest import create_record, enqueue, holds_throughout, start_workers, stop_all
from ttsq.constants import SYNTHESIZE_TASK, consumed_queues
from ttsq.errors import StorageRefused, StorageUnavailable
from ttsq.job_record import JobRecord
from ttsq.job_store import JobStore
from ttsq.settings import Settings
from ttsq.storage import storage_error
from workers.fitness import UNABLE_RECHECK_S

StorageChange = Callable[[Settings], Settings]


def unknown_key(settings: Settings) -> Settings:
    return settings.model_copy(update={"s3": settings.s3.model_copy(update={"access_key_id": "nobody"})})


def wrong_secret(settings: Settings) -> Settings:
    s3 = settings.s3.model_copy(update={"secret_access_key": SecretStr("not-the-secret")})
    return settings.model_copy(update={"s3": s3})


def unreachable_store(settings: Settings) -> Settings:
    """Nothing listens on the endpoint; one quick retry so the test does not wait for five."""
    s3 = settings.s3.model_copy(update={"endpoint_url": f"http://127.0.0.1:{free_port()}"})
    return settings.model_copy(update={"s3": s3, "task_max_retries": 1, "task_retry_backoff_max_s": 1})


@dataclass(frozen=True)
class BrokenWorker:
    process: ManagedProcess
    settings: Settings

    def log(self) -> str:
        assert self.process.log_path is not None
        return self.process.log_path.read_text()


CHANGES: list[StorageChange] = [unknown_key, wrong_secret, unreachable_store]


@pytest.fixture(scope="module")
def broken_workers(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, BrokenWorker]]:
    """A worker for each way of breaking the object store, each on its own queue, started at once."""
    custom = {
        f"storage-{change.__name__}": change(settings.model_copy(update={"queue": f"storage-{change.__name__}"}))
        for change in CHANGES
    }
    processes = start_workers(tmp_path_factory.mktemp("storage"), custom)
    yield {name.removeprefix("storage-"): BrokenWorker(processes[name], custom[name]) for name in custom}
    stop_all(processes.values())


@pytest.fixture
def broken_worker(request: pytest.FixtureRequest, broken_workers: dict[str, BrokenWorker]) -> BrokenWorker:
    """The worker whose object store settings are broken as the test asks."""
    change: StorageChange = request.param
    return broken_workers[change.__name__]


def finished(store: JobStore, record: JobRecord) -> JobRecord:
    wait_until(lambda: store.get(record.id).status.terminal, 60, f"job {record.id}")
    return store.get(record.id)


@pytest.mark.recovery
@pytest.mark.parametrize("broken_worker", [unknown_key, wrong_secret], indirect=True)
def test_a_refusing_store_keeps_its_worker_from_taking_jobs(
    broken_worker: BrokenWorker, store: JobStore, redis_client: redis.Redis
) -> None:
    """The worker's check is refused (403 to a HEAD of the bucket): it says why and takes nothing;
    the job waits in its queue for a worker that can run it, neither failed nor retried."""
    wait_until(lambda: "cannot do the work" in broken_worker.log(), 30, "the reason logged")
    assert f"refused a check of bucket {broken_worker.settings.s3.bucket!r}: 403" in broken_worker.log()
    record = create_record(store)
    task_id = enqueue(broken_worker.settings, record.id)
    queues = consumed_queues(broken_worker.settings.queue)
    try:
        checks_s = 2 * UNABLE_RECHECK_S  # two rounds of the unable worker's check
        holds_throughout(lambda: store.get(record.id).status == "queued", checks_s, "job queued")
        assert sum(redis_client.llen(queue) for queue in queues) == 1, "the message waits in its queue"
        assert task_id not in broken_worker.log()
    finally:
        redis_client.delete(*queues)


@pytest.mark.recovery
@pytest.mark.parametrize("broken_worker", [unreachable_store], indirect=True)
def test_an_unreachable_store_is_retried_then_fails_the_job(broken_worker: BrokenWorker, store: JobStore) -> None:
    record = create_record(store)
    task_id = enqueue(broken_worker.settings, record.id)
    failed = finished(store, record)
    assert failed.error is not None
    assert failed.error.code == "storage_unavailable"
    assert "unreachable" in failed.error.message
    assert failed.attempts == 2, "one try and one retry (task_max_retries=1)"
    assert f"{SYNTHESIZE_TASK}[{task_id}] retry: Retry in" in broken_worker.log()


def client_error(status: int, code: str) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "..."}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "PutObject")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (client_error(404, "NoSuchBucket"), StorageRefused),
        (client_error(403, "AccessDenied"), StorageRefused),
        (client_error(400, "InvalidBucketName"), StorageRefused),
        (client_error(503, "SlowDown"), StorageUnavailable),
        (client_error(500, "InternalError"), StorageUnavailable),
        (client_error(429, "TooManyRequests"), StorageUnavailable),
        (client_error(400, "RequestTimeout"), StorageUnavailable),
        (EndpointConnectionError(endpoint_url="http://s3"), StorageUnavailable),
        (ReadTimeoutError(endpoint_url="http://s3"), StorageUnavailable),
        (NoCredentialsError(), StorageRefused),
        (PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), StorageRefused),
    ],
)
def test_storage_errors_are_told_apart(error: BotoCoreError | ClientError, kind: type[Exception]) -> None:
    """S3's answers as botocore raises them (plain data): which are outages and which refusals
    (credentials missing from the settings are a refusal: no request was even sent)."""
    translated = storage_error("the upload of jobs/x/audio.wav", error)
    assert type(translated) is kind
    assert "jobs/x/audio.wav" in str(translated)
