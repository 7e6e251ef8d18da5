"""A sick worker takes no work (issue 35): a synthesis worker whose object store settings are
unusable (wrong or no credentials, a bucket that does not exist) takes no message while it cannot do
the work, reports not ready and logs why; beside a healthy worker every job succeeds on the healthy
one, and alone it leaves jobs queued, not failed, until its check passes."""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from mypy_boto3_s3 import S3Client
from pydantic import SecretStr

from api.main import create_app
from cli.embedded import SeaweedService
from cli.processes import ManagedProcess
from tests.conftest import holds_throughout, serve, start_workers, stop_all, wait_for, wait_for_job
from tests.s3_proxy import S3Proxy
from ttsq.liveness import WorkerLiveness
from ttsq.settings import Settings
from workers.fitness import UNABLE_RECHECK_S

pytestmark = pytest.mark.recovery

UNABLE = "this worker cannot do the work, so it takes no messages until it can"
NO_AWS_FALLBACK = {
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_CONFIG_FILE": os.devnull,
}
"""A worker with no credentials in its settings finds none elsewhere either (nor waits on a metadata
service for them)."""

SHORT_TEXTS = [f"Message number {n} for you." for n in range(6)]
LONG_TEXT = "The first sentence is here. A second one follows it. And a third one ends the text."
"""Several segments with ``segment_max_ids`` at its least."""


def own_queue(settings: Settings, name: str) -> Settings:
    return settings.model_copy(update={"queue": f"{name}-{uuid.uuid4().hex[:8]}", "segment_max_ids": 32})


def wrong_secret(settings: Settings) -> Settings:
    return settings.model_copy(update={"s3": settings.s3.model_copy(update={"secret_access_key": SecretStr("nope")})})


def no_credentials(settings: Settings) -> Settings:
    s3 = settings.s3.model_copy(update={"access_key_id": None, "secret_access_key": None})
    return settings.model_copy(update={"s3": s3})


def log_of(process: ManagedProcess) -> str:
    assert process.log_path is not None
    return process.log_path.read_text()


def probe(process: ManagedProcess) -> int:
    """The status of the worker's own ``/readyz``."""
    assert process.env is not None
    port = process.env["TTSQ_WORKER__METRICS_PORT"]
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code


@pytest.fixture(scope="module")
def sick_beside_healthy(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A healthy worker, one with a wrong secret and one with no credentials, on one queue."""
    base = own_queue(settings, "sick")
    custom = {"healthy": base, "wrong-secret": wrong_secret(base), "no-credentials": no_credentials(base)}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in NO_AWS_FALLBACK.items():
            patch.setenv(name, value)
        workers = start_workers(tmp_path_factory.mktemp("sick"), custom)
    try:
        yield {"settings": base, "workers": workers}
    finally:
        stop_all(workers.values())


def submit(client: httpx.Client, text: str, priority: str) -> str:
    answer = client.post("/v1/jobs", json={"text": text, "priority": priority})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def statuses(client: httpx.Client, ids: list[str]) -> set[str]:
    return {client.get(f"/v1/jobs/{job_id}").json()["status"] for job_id in ids}


def test_every_job_succeeds_on_the_healthy_worker(
    sick_beside_healthy: dict[str, Any], redis_client: redis.Redis
) -> None:
    settings: Settings = sick_beside_healthy["settings"]
    workers: dict[str, ManagedProcess] = sick_beside_healthy["workers"]
    sick = [workers["wrong-secret"], workers["no-credentials"]]
    for process in sick:
        wait_for(functools.partial(log_of, process), lambda text: UNABLE in text, 30, "the reason logged")
    assert "refused a check of bucket 'ttsq-test': 403" in log_of(workers["wrong-secret"])
    assert "Unable to locate credentials" in log_of(workers["no-credentials"])
    assert "nope" not in log_of(workers["wrong-secret"]), "a secret in the log"
    with serve(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as client:
        started = time.monotonic()
        ids = [submit(client, text, "interactive") for text in SHORT_TEXTS]
        ids += [submit(client, LONG_TEXT, priority) for priority in ("bulk", "interactive")]
        jobs = [wait_for_job(client, job_id, 60) for job_id in ids]
        took_s = time.monotonic() - started
        assert [job["status"] for job in jobs] == ["succeeded"] * len(ids), [job.get("error") for job in jobs]
        assert all(job["progress"]["segments_total"] >= 3 for job in jobs[-2:])
        # Nothing went to a sick worker: no task received, none given back (no bounce between them).
        for process in sick:
            assert "] received" not in log_of(process)
            assert probe(process) == 503
        assert probe(workers["healthy"]) == 200
        assert len(WorkerLiveness(redis_client, settings.queue).alive()) == 1, "only the healthy one beats"
        assert client.get("/readyz").status_code == 200
    assert took_s < 60, f"{len(ids)} short jobs took {took_s:.1f} s"


def test_a_sick_worker_alone_leaves_jobs_queued_until_it_can_work(
    settings: Settings, tmp_path: Path, s3_client: S3Client, redis_client: redis.Redis
) -> None:
    """Its bucket does not exist yet (a refusal, as wrong credentials are): the jobs wait queued and
    ``/readyz`` counts no worker; once the bucket is made, its check passes and it runs them."""
    own = own_queue(settings, "late-bucket")
    late = own.model_copy(update={"s3": own.s3.model_copy(update={"bucket": f"late-{uuid.uuid4().hex[:8]}"})})
    worker = start_workers(tmp_path, {"late": late})["late"]
    try:
        wait_for(lambda: log_of(worker), lambda text: UNABLE in text, 30, "the reason logged")
        assert probe(worker) == 503
        with serve(create_app(late)) as url, httpx.Client(base_url=url, timeout=30) as client:
            ids = [submit(client, SHORT_TEXTS[0], "interactive"), submit(client, LONG_TEXT, "bulk")]
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["checks"]["workers"] == "no synthesis worker alive"
            # Over two rounds of its check: they wait, none is taken or failed.
            holds_throughout(lambda: statuses(client, ids) == {"queued"}, 2 * UNABLE_RECHECK_S, "jobs queued")
            assert "] received" not in log_of(worker)
            s3_client.create_bucket(Bucket=late.s3.bucket)
            jobs = [wait_for_job(client, job_id, 60) for job_id in ids]
            assert [job["status"] for job in jobs] == ["succeeded", "succeeded"]
            assert probe(worker) == 200
            # Counted from its next heartbeat (every HEARTBEAT_INTERVAL_S), which may come after
            # both jobs: they took under a second here.
            wait_for(lambda: client.get("/readyz").json()["checks"]["workers"], lambda v: v == "ok", 10, "counted")
    finally:
        worker.stop()
    assert "this worker can do the work: taking messages" in log_of(worker)


@pytest.fixture(scope="module")
def proxied(settings: Settings, tmp_path_factory: pytest.TempPathFactory, s3_service: SeaweedService) -> Iterator[Any]:
    """An able worker whose store is behind a :class:`S3Proxy` (its check every ten seconds here),
    and a client of an API that reaches the store directly."""
    proxy = S3Proxy(s3_service.ports.s3).start()
    own = own_queue(settings, "refused")
    own = own.model_copy(
        update={
            "s3": own.s3.model_copy(update={"endpoint_url": proxy.endpoint_url}),
            "worker": own.worker.model_copy(update={"check_interval_s": 10.0}),
        }
    )
    worker = start_workers(tmp_path_factory.mktemp("refused"), {"refused": own})["refused"]
    api = own.model_copy(update={"s3": settings.s3})
    try:
        with serve(create_app(api)) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield proxy, worker, client
    finally:
        worker.stop()
        proxy.stop()


def test_a_worker_refused_midway_gives_its_messages_back(proxied: Any) -> None:
    """The store starts refusing an able worker's keys just after one of its checks, so its tasks
    meet the refusal first: none fails its job; the worker checks at once, stops taking messages and
    gives back the ones it holds; once the store accepts it again, it runs them."""
    proxy, worker, client = proxied
    try:
        assert wait_for_job(client, submit(client, SHORT_TEXTS[0], "interactive"))["status"] == "succeeded"
        checks = proxy.checks
        wait_for(lambda: proxy.checks, lambda seen: seen > checks, 30, "a round of the worker's check")
        proxy.refuse()
        ids = [submit(client, SHORT_TEXTS[1], "interactive"), submit(client, LONG_TEXT, "bulk")]
        wait_for(lambda: log_of(worker), lambda text: "given back" in text, 30, "a message given back")
        assert UNABLE in log_of(worker)
        assert "403: Forbidden" in log_of(worker)
        assert probe(worker) == 503
        assert "failed" not in statuses(client, ids)
    finally:
        proxy.restore()
    jobs = [wait_for_job(client, job_id, 60) for job_id in ids]
    assert [job["status"] for job in jobs] == ["succeeded", "succeeded"], [job.get("error") for job in jobs]
    wait_for(lambda: probe(worker), lambda code: code == 200, 30, "the worker ready again")


def test_a_write_refused_once_then_accepted_is_tried_again(proxied: Any) -> None:
    """The store refuses one upload and accepts the worker's check straight after (it changed its
    mind, or the refusal ended as the worker looked): the step runs again and the job succeeds; an
    upload refused again while the check passes fails the job, naming the refusal."""
    proxy, worker, client = proxied
    wait_for(lambda: probe(worker), lambda code: code == 200, 30, "the worker ready")
    proxy.refuse_writes(1)
    job = wait_for_job(client, submit(client, SHORT_TEXTS[2], "interactive"), 60)
    assert job["status"] == "succeeded", job.get("error")
    assert "refused by the store, which accepts this worker now: tried again" in log_of(worker)
    proxy.refuse_writes(1000)
    try:
        job = wait_for_job(client, submit(client, SHORT_TEXTS[3], "interactive"), 60)
    finally:
        proxy.restore()
    assert job["status"] == "failed"
    assert job["error"]["code"] == "storage_refused", job["error"]


def test_keys_that_may_read_but_not_write_take_no_work(proxied: Any) -> None:
    """The store answers the worker's bucket checks but refuses all its writes (read-only keys):
    its check's test write fails, so it stops taking messages and the job waits queued, not failed;
    once the store takes its writes again, the job runs."""
    proxy, worker, client = proxied
    wait_for(lambda: probe(worker), lambda code: code == 200, 30, "the worker ready")
    proxy.refuse_writes(10**9, spare_checks=False)
    try:
        wait_for(lambda: probe(worker), lambda code: code == 503, 30, "the worker unable")
        assert "a test write of" in log_of(worker)
        job_id = submit(client, SHORT_TEXTS[4], "interactive")
        holds_throughout(lambda: statuses(client, [job_id]) == {"queued"}, 4, "the job queued")
    finally:
        proxy.restore()
    job = wait_for_job(client, job_id, 60)
    assert job["status"] == "succeeded", job.get("error")
