"""A submit whose answer was lost (issue 25): Redis applies the write that stores the job, then the
connection drops before its answer comes back (a real Redis behind :class:`tests.redis_proxy.RedisProxy`).

The API cannot take the job back (Redis is gone), so it answers 503 naming the job: ``Location``
and ``job_id`` (``batch_id`` for a batch). The client learns the truth with a GET (the job exists,
stored but never queued, and the sweeper queues it and it completes), and a repeat under the same
``Idempotency-Key`` answers with that job: one job, never two. A submission refused before any
write names nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

import api.idempotency
from api.idempotency import Claimed, IdempotencyStore
from api.main import create_app
from cli.embedded import RedisService
from cli.processes import ManagedProcess
from narration.client import TTSQClient
from tests.conftest import database_url, idempotency_claim, serve, start_worker, wait_for, wait_for_job
from tests.redis_proxy import RedisProxy
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import job_key
from ttsq.maintenance import Sweeper
from ttsq.settings import Settings
from ttsq.stores import Stores
from ttsq.tenants import ANONYMOUS_TENANT

DATABASE = 5
"""A Redis database of its own on the session's server: the sweeper here sees only these jobs."""

CLAIM_JUDGED_AFTER_S = 1.0
"""``ABANDONED_AFTER_S`` for these tests: the lost answer also cut off the request's last word on its
key, so a repeat waits for the claim to be taken for abandoned (30 s in production)."""


@dataclass(frozen=True)
class LossyStack:
    """An API whose Redis connections go through the proxy; a worker and a sweeper that reach
    Redis directly."""

    proxy: RedisProxy
    client: httpx.Client
    redis: redis.Redis
    sweeper: Sweeper
    url: str


@pytest.fixture(scope="module")
def own_settings(settings: Settings) -> Settings:
    url = database_url(settings.redis_url, DATABASE)
    return settings.model_copy(
        update={"redis_url": url, "queue": "lost-answer", "sweep_grace_s": 0, "sweep_interval_s": 1}
    )


@pytest.fixture(scope="module")
def own_worker(own_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    process = start_worker(own_settings, tmp_path_factory.mktemp("lost-answer") / "worker.log", "lost-answer-worker")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def lossy(own_settings: Settings, redis_service: RedisService, own_worker: ManagedProcess) -> Iterator[LossyStack]:
    client = redis.Redis.from_url(own_settings.redis_url)
    client.flushdb()
    proxy = RedisProxy(redis_service.port).start()
    send = TaskPublisher(make_producer(own_settings), own_settings.queue)
    stores = Stores.connect(own_settings, 30)
    sweeper = Sweeper(stores, stores.lifecycle(send.finish_batch), send)
    proxied = own_settings.model_copy(update={"redis_url": proxy.url(DATABASE)})
    try:
        with serve(create_app(proxied)) as url, httpx.Client(base_url=url, timeout=60) as http:
            yield LossyStack(proxy, http, client, sweeper, url)
    finally:
        proxy.stop()
        client.flushdb()
        client.close()


@pytest.fixture
def quick_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api.idempotency, "ABANDONED_AFTER_S", CLAIM_JUDGED_AFTER_S)


def stored_copies(client: redis.Redis, text: str) -> int:
    """How many jobs hold this text: more than one is a duplicate."""
    return sum(client.get(key) == text.encode() for key in client.scan_iter(match="ttsq:job:*:text"))


def repeat(client: httpx.Client, route: str, body: dict[str, Any], key: str) -> httpx.Response:
    """The same request again, as a client honouring ``409 idempotency_in_flight`` does."""
    return wait_for(
        lambda: client.post(route, json=body, headers={"Idempotency-Key": key}),
        lambda answer: (answer.json().get("error") or {}).get("code") != "idempotency_in_flight",
        30,
        "the repeat answered",
    )


def lose_answer(lossy: LossyStack, route: str, body: dict[str, Any], marker: str, key: str | None) -> httpx.Response:
    """Submit while the proxy loses the answer to the write holding ``marker``; Redis back after."""
    lossy.proxy.cut_after(marker.encode())
    headers = {"Idempotency-Key": key} if key else {}
    try:
        response = lossy.client.post(route, json=body, headers=headers)
    finally:
        lossy.proxy.restore()
    assert lossy.proxy.cut.is_set(), "the write never went through the proxy"
    return response


class _RestoreOnOutage(logging.Handler):
    """Brings Redis back as the API answers its 503: an event, not a guess at how long that takes."""

    def __init__(self, proxy: RedisProxy) -> None:
        super().__init__()
        self.proxy = proxy

    def emit(self, record: logging.LogRecord) -> None:
        if "store_unavailable" in record.getMessage():
            self.proxy.restore()


@contextmanager
def back_after_the_503(proxy: RedisProxy) -> Iterator[None]:
    handler = _RestoreOnOutage(proxy)
    logger = logging.getLogger("api.errors")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        proxy.restore()


def sweep_until_requeued(sweeper: Sweeper, job_ids: set[str]) -> None:
    """Two looks (a job missing at both is stuck); its entry task is then queued again."""
    now = time.time()
    sweeper.sweep(now)
    assert job_ids <= set(sweeper.sweep(now + 1).requeued)


@pytest.mark.usefixtures("quick_claims")
def test_a_job_whose_answer_was_lost_is_named_exists_completes_and_is_not_made_twice(lossy: LossyStack) -> None:
    text = f"The answer to this one was lost, {uuid.uuid4().hex[:8]}."
    body = {"text": text, "format": "wav"}
    key = f"lost-{uuid.uuid4()}"
    response = lose_answer(lossy, "/v1/jobs", body, text, key)

    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "store_unavailable"
    assert "Location" in error["message"]
    assert "Idempotency-Key" in error["message"]
    assert int(response.headers["Retry-After"]) > 0
    job_id = error["job_id"]
    assert response.headers["Location"] == f"/v1/jobs/{job_id}"
    assert lossy.redis.exists(job_key(job_id)), "the premise: Redis applied the write"

    found = lossy.client.get(response.headers["Location"])
    assert found.status_code == 200
    assert found.json()["status"] == "queued"

    again = repeat(lossy.client, "/v1/jobs", body, key)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == job_id
    assert again.headers["Idempotent-Replayed"] == "true"
    assert stored_copies(lossy.redis, text) == 1

    sweep_until_requeued(lossy.sweeper, {job_id})
    assert wait_for_job(lossy.client, job_id)["status"] == "succeeded"
    assert stored_copies(lossy.redis, text) == 1


@pytest.mark.usefixtures("quick_claims")
def test_ttsqs_own_client_retries_a_lost_answer_with_its_key_and_gets_the_one_job(lossy: LossyStack) -> None:
    """``ttsq say``'s client: its submit is answered 503 naming the job; it repeats the request with
    the same key (after ``Retry-After``, through ``idempotency_in_flight``) and is given that job."""
    text = f"My own client lost this answer, {uuid.uuid4().hex[:8]}."
    lossy.proxy.cut_after(text.encode())
    with back_after_the_503(lossy.proxy), TTSQClient(lossy.url) as client:
        job = client.submit(text, format="wav")
    assert lossy.proxy.cut.is_set()
    assert stored_copies(lossy.redis, text) == 1
    assert lossy.redis.get(job_key(job["id"]) + ":text") == text.encode()
    claim = idempotency_claim(lossy.redis, job["id"])
    assert claim is not None
    assert claim["job_id"] == job["id"]
    sweep_until_requeued(lossy.sweeper, {job["id"]})
    assert wait_for_job(lossy.client, job["id"])["status"] == "succeeded"


@pytest.mark.usefixtures("quick_claims")
def test_a_batch_whose_answer_was_lost_is_named_exists_completes_and_is_not_made_twice(lossy: LossyStack) -> None:
    text = f"A batch item whose answer was lost, {uuid.uuid4().hex[:8]}."
    body = {"items": [{"text": text}, {"text": "And its sibling."}], "defaults": {"format": "wav"}}
    key = f"lost-{uuid.uuid4()}"
    response = lose_answer(lossy, "/v1/batches", body, text, key)

    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "store_unavailable"
    batch_id = error["batch_id"]
    assert "job_id" not in error
    assert response.headers["Location"] == f"/v1/batches/{batch_id}"

    found = lossy.client.get(response.headers["Location"])
    assert found.status_code == 200
    assert len(found.json()["items"]) == 2

    again = repeat(lossy.client, "/v1/batches", body, key)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == batch_id
    assert stored_copies(lossy.redis, text) == 1

    sweep_until_requeued(lossy.sweeper, {item["job_id"] for item in found.json()["items"]})
    done = wait_for(
        lambda: lossy.client.get(f"/v1/batches/{batch_id}"),
        lambda answer: answer.json()["counts"]["pending"] == 0,
        90,
        f"batch {batch_id}'s items finished",
    )  # the batch's own finishing (its manifest) is the service worker's, which this module does not start
    assert done.json()["counts"]["succeeded"] == 2


def test_a_speech_request_whose_answer_was_lost_names_its_job(lossy: LossyStack) -> None:
    """The speech endpoint takes no ``Idempotency-Key`` (its answer is the audio): the 503 names the
    job, which the client can follow and download instead."""
    text = f"Spoken, but the answer was lost, {uuid.uuid4().hex[:8]}."
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"}
    response = lose_answer(lossy, "/v1/audio/speech", body, text, None)

    assert response.status_code == 503, response.text
    job_id = response.json()["error"]["job_id"]
    assert response.headers["Location"] == f"/v1/jobs/{job_id}"
    assert lossy.client.get(f"/v1/jobs/{job_id}").status_code == 200
    sweep_until_requeued(lossy.sweeper, {job_id})
    assert wait_for_job(lossy.client, job_id)["status"] == "succeeded"


def test_a_submit_refused_before_any_write_names_no_job(lossy: LossyStack) -> None:
    """Redis gone before the request: nothing was written, so the 503 claims no job."""
    lossy.proxy.go_down()
    try:
        response = lossy.client.post("/v1/jobs", json={"text": "Never stored."}, headers={"Idempotency-Key": "none"})
    finally:
        lossy.proxy.restore()
    assert response.status_code == 503
    assert "Location" not in response.headers
    assert set(response.json()["error"]) == {"code", "message"}


def test_an_unsettled_claim_is_judged_by_its_job_at_once(lossy: LossyStack) -> None:
    """A request whose write may have been applied leaves its claim ``unsettled``: a repeat replays
    the job if it exists and makes it if not, without waiting for the claim to grow old."""
    store = IdempotencyStore(lossy.redis, 3600)
    key = f"unsettled-{uuid.uuid4()}"
    assert store.claim(ANONYMOUS_TENANT, key, "body", "job-a", lambda _: False) is None
    store.mark_unsettled(ANONYMOUS_TENANT, key, "job-a")
    assert store.claim(ANONYMOUS_TENANT, key, "body", "job-b", lambda job_id: job_id == "job-a") == Claimed(
        "job-a", done=True
    )
    assert store.claim(ANONYMOUS_TENANT, key, "body", "job-c", lambda _: False) is None  # taken over
    assert store.claim(ANONYMOUS_TENANT, key, "body", "job-d", lambda _: False) == Claimed("job-c", done=False)
