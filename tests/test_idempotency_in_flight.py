"""Repeats of a request still being handled (issue 19, finding 12): many identical requests under one
``Idempotency-Key`` at once, across two API processes, make one job and are each answered with it, or
with ``409 idempotency_in_flight`` and ``Retry-After``; never ``idempotency_conflict``, which means
another body. Also a slow first request, and a first request that fails."""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
import redis

from api.idempotency import IdempotencyStore, fingerprint
from api.main import create_app
from api.schemas import JobCreate
from cli.commands import api_argv
from cli.embedded import LOOPBACK
from cli.processes import ManagedProcess, free_port, wait_until
from tests.conftest import create_record, serve
from ttsq.constants import consumed_queues, interactive_queue
from ttsq.job_store import JobStore
from ttsq.settings import Settings, settings_env
from ttsq.tenants import ANONYMOUS_TENANT, Limits, TenantStore

BODY = {"text": "Said once, whatever the retries.", "format": "wav"}
BODIES = {"/v1/jobs": BODY, "/v1/batches": {"items": [BODY, {"text": "And its sibling."}]}}
CONCURRENT = 50


@dataclass(frozen=True)
class TwoApis:
    """Two API processes sending to one queue no worker reads."""

    urls: tuple[str, str]
    queue: str
    settings: Settings


@pytest.fixture(scope="module")
def apis(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoApis]:
    base = f"idle-{uuid.uuid4()}"
    idle = settings.model_copy(update={"queue": base, "model_affinity": False})
    port = free_port()
    env = {**os.environ, **settings_env(idle)}
    log_path = tmp_path_factory.mktemp("api-b") / "api-b.log"
    other = ManagedProcess("api-b", api_argv(LOOPBACK, port), log_path, env).start()
    try:
        other_url = f"http://{LOOPBACK}:{port}"
        wait_until(lambda: httpx.get(f"{other_url}/healthz").status_code == 200, 60, "second API", other)
        with serve(create_app(idle)) as url:
            yield TwoApis((url, other_url), interactive_queue(base), idle)
    finally:
        other.stop()


@pytest.fixture
def two_apis(apis: TwoApis, redis_client: redis.Redis) -> Iterator[TwoApis]:
    """The module's two APIs, their queues empty when the test starts and emptied when it ends."""
    redis_client.delete(*consumed_queues(apis.settings.queue))
    yield apis
    redis_client.delete(*consumed_queues(apis.settings.queue))


def post_at_once(
    urls: tuple[str, ...], count: int, headers: dict[str, str], path: str = "/v1/jobs"
) -> list[httpx.Response]:
    """``count`` identical POSTs released together, spread over ``urls``."""
    start = threading.Barrier(count)

    def one(index: int) -> httpx.Response:
        with httpx.Client(base_url=urls[index % len(urls)], timeout=60) as client:
            start.wait()
            return client.post(path, json=BODIES[path], headers=headers)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def outcome(answer: httpx.Response) -> str:
    """The error code of a refusal, else the status."""
    return str(answer.json()["error"]["code"]) if answer.status_code >= 400 else str(answer.status_code)


def check_in_flight(answer: httpx.Response) -> None:
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["code"] == "idempotency_in_flight"
    assert int(answer.headers["retry-after"]) >= 1


@pytest.mark.parametrize(("path", "messages"), [("/v1/jobs", 1), ("/v1/batches", 2)])
def test_concurrent_repeats_across_two_processes_make_one_job_and_replay_it(
    two_apis: TwoApis, redis_client: redis.Redis, path: str, messages: int
) -> None:
    key = {"Idempotency-Key": f"burst-{uuid.uuid4()}"}
    answers = post_at_once(two_apis.urls, CONCURRENT, key, path)
    codes = Counter(outcome(a) for a in answers)
    assert codes["202"] == 1, codes
    assert "idempotency_conflict" not in codes, codes
    [created] = [a.json()["id"] for a in answers if a.status_code == 202]
    for answer in answers:
        if answer.status_code == 200:
            assert answer.json()["id"] == created
            assert answer.headers["idempotent-replayed"] == "true"
        elif answer.status_code != 202:
            check_in_flight(answer)
    queued = sum(int(redis_client.llen(queue)) for queue in consumed_queues(two_apis.settings.queue))
    assert queued == messages  # one job (or one batch's items) queued, once
    late = httpx.post(f"{two_apis.urls[1]}{path}", json=BODIES[path], headers=key)
    assert (late.status_code, late.json()["id"]) == (200, created)


def test_a_repeat_of_a_slow_first_request_waits_then_answers_in_flight(
    two_apis: TwoApis, redis_client: redis.Redis
) -> None:
    """The claim a first request holds while it is still storing its job, written as it writes it."""
    key = f"slow-{uuid.uuid4()}"
    digest = fingerprint(JobCreate.model_validate(BODY).model_dump(mode="json"))
    claims = IdempotencyStore(redis_client, 3600)
    pending = str(uuid.uuid4())
    assert claims.claim(ANONYMOUS_TENANT, key, digest, pending, lambda _: False) is None
    for url in two_apis.urls:
        check_in_flight(httpx.post(f"{url}/v1/jobs", json=BODY, headers={"Idempotency-Key": key}, timeout=30))
    other = {**BODY, "text": "Another."}
    other_body = httpx.post(f"{two_apis.urls[0]}/v1/jobs", json=other, headers={"Idempotency-Key": key})
    assert other_body.json()["error"]["code"] == "idempotency_conflict"  # a different body is still a conflict

    record = create_record(JobStore(redis_client, two_apis.settings.job_ttl_s), BODY["text"], id=pending)
    claims.mark_done(ANONYMOUS_TENANT, key, pending)  # the first request finished
    replayed = httpx.post(f"{two_apis.urls[1]}/v1/jobs", json=BODY, headers={"Idempotency-Key": key})
    assert (replayed.status_code, replayed.json()["id"]) == (200, record.id)
    assert redis_client.llen(two_apis.queue) == 0  # nothing made by the repeats


def test_repeats_of_a_first_request_that_fails_get_their_own_answer(
    two_apis: TwoApis, redis_client: redis.Redis
) -> None:
    """The first request is refused after claiming its key (the tenant's active-jobs limit is full):
    it gives the key back, and each waiting repeat, trying in turn, gets the real refusal (429)."""
    key, _ = TenantStore(redis_client).create(f"idem-{uuid.uuid4().hex[:6]}", Limits(max_active_jobs=1))
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.post(f"{two_apis.urls[0]}/v1/jobs", json=BODY, headers=auth).status_code == 202  # the limit is full
    answers = post_at_once(two_apis.urls, 20, {**auth, "Idempotency-Key": f"full-{uuid.uuid4()}"})
    codes = Counter(outcome(a) for a in answers)
    assert set(codes) <= {"max_active_jobs_exceeded", "idempotency_in_flight"}, codes
    assert codes["max_active_jobs_exceeded"] >= 1
    for answer in answers:
        if outcome(answer) == "idempotency_in_flight":
            check_in_flight(answer)
    assert redis_client.llen(two_apis.queue) == 1  # only the job that filled the limit
