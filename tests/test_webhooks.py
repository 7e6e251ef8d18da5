"""Webhooks end to end: real jobs, the real webhook worker, a real HTTP receiver on loopback.

The signature is checked by an implementation of the Standard Webhooks algorithm written here from
the specification, independent of ``ttsq.webhook_signing``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.main import create_app
from cli.processes import ManagedProcess, wait_until
from tests.conftest import (
    TEST_WEBHOOK_RETRIES,
    TEST_WEBHOOK_SECRET,
    IdleQueueApi,
    create_record,
    enqueue,
    serve,
    wait_for,
)
from tests.receiver import Receiver
from ttsq.job_store import JobStore
from ttsq.settings import Settings

SENTENCE = "Tell my receiver when this is done."


def spec_signature(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    """Standard Webhooks: base64(HMAC-SHA256(key=base64-decoded secret after 'whsec_',
    msg='{id}.{timestamp}.{body}')), prefixed with the version 'v1,'."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _webhook_worker(webhook_worker: ManagedProcess) -> None:
    """Every test here needs the delivery worker running."""


def wait_for_webhook(client: httpx.Client, job_id: str, timeout_s: float = 60) -> dict[str, Any]:
    """The job once its webhook delivery is no longer pending."""
    job: dict[str, Any] = wait_for(
        lambda: client.get(f"/v1/jobs/{job_id}", params={"wait": 30}).json(),
        lambda job: job["webhook"] is not None and job["webhook"]["state"] != "pending",
        timeout_s,
        f"the webhook of job {job_id} delivered or failed",
    )
    return job


def submit(client: httpx.Client, url: str, text: str = SENTENCE) -> dict[str, Any]:
    response = client.post("/v1/jobs", json={"text": text, "webhook_url": url})
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


def test_a_delivered_event_verifies_by_the_specification(client: httpx.Client, receiver: Receiver) -> None:
    url = receiver.path(204)
    job = submit(client, url)
    done = wait_for_webhook(client, job["id"])
    assert done["webhook"]["state"] == "delivered"
    assert (done["webhook"]["attempts"], done["webhook"]["last_status"]) == (1, 204)
    [event] = receiver.at(url)
    headers = event.headers
    assert headers["content-type"] == "application/json"
    expected = spec_signature(TEST_WEBHOOK_SECRET, headers["webhook-id"], headers["webhook-timestamp"], event.body)
    assert expected in headers["webhook-signature"].split(" ")
    wrong = "whsec_" + base64.b64encode(b"some other secret of 32 bytes!!").decode()
    forged = spec_signature(wrong, headers["webhook-id"], headers["webhook-timestamp"], event.body)
    assert forged not in headers["webhook-signature"].split(" ")
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 300
    body = json.loads(event.body)
    assert body["type"] == "job.succeeded"
    assert body["data"]["id"] == job["id"]
    assert body["data"]["status"] == "succeeded"
    assert body["data"]["result"]["url"].startswith("http")
    assert "text" not in body["data"]  # links and status, never the text or the audio


def test_a_receiver_failing_twice_gets_three_attempts_with_one_id(client: httpx.Client, receiver: Receiver) -> None:
    url = receiver.path(500, 503, 200)
    job = submit(client, url)
    done = wait_for_webhook(client, job["id"])
    assert done["webhook"]["state"] == "delivered"
    assert done["webhook"]["attempts"] == 3
    attempts = receiver.at(url)
    assert len(attempts) == 3
    assert len({a.headers["webhook-id"] for a in attempts}) == 1


def test_a_receiver_that_always_fails_ends_failed_after_every_attempt(client: httpx.Client, receiver: Receiver) -> None:
    url = receiver.path(500)
    job = submit(client, url)
    done = wait_for_webhook(client, job["id"])
    assert done["webhook"]["state"] == "failed"
    assert done["webhook"]["attempts"] == len(TEST_WEBHOOK_RETRIES) + 1 == len(receiver.at(url))
    assert done["webhook"]["last_status"] == 500
    assert done["webhook"]["next_attempt_at"] is None


def test_a_4xx_answer_is_not_retried(client: httpx.Client, receiver: Receiver) -> None:
    url = receiver.path(400)
    job = submit(client, url)
    done = wait_for_webhook(client, job["id"])
    assert (done["webhook"]["state"], done["webhook"]["attempts"], done["webhook"]["last_status"]) == ("failed", 1, 400)
    assert len(receiver.at(url)) == 1


def test_a_silent_receiver_times_out_without_holding_up_other_jobs(
    client: httpx.Client, receiver: Receiver, idle_queue_api: IdleQueueApi
) -> None:
    """The receiver stays silent for three attempts, then refuses (a 4xx: no more attempts), so the
    test need not wait out every attempt's timeout (``test_a_receiver_that_always_fails…`` checks
    the last one); three, so that its event stays pending for about 7 s, however slowly the other
    job's is delivered on a loaded machine. The other job is finished by a cancel while queued: its
    event is due at once, while the silent receiver's attempt still hangs."""
    silent, fine = receiver.path("hang", "hang", "hang", 400), receiver.path(200)
    stuck = submit(client, silent)
    wait_until(lambda: bool(receiver.at(silent)), 30, "the silent receiver's first request")
    other = submit(idle_queue_api.client, fine)
    assert idle_queue_api.client.delete(f"/v1/jobs/{other['id']}").status_code == 200
    other_done = wait_for_webhook(idle_queue_api.client, other["id"])
    assert other_done["webhook"]["state"] == "delivered"
    stuck_now = client.get(f"/v1/jobs/{stuck['id']}").json()
    assert stuck_now["webhook"]["state"] == "pending", "the other job's event waited for the silent receiver"
    timed_out = wait_for(
        lambda: client.get(f"/v1/jobs/{stuck['id']}").json()["webhook"],
        lambda hook: hook["attempts"] >= 1,
        30,
        "the silent receiver's first attempt ended",
    )
    # Read after one of the silent attempts: it timed out, and another is to come.
    assert (timed_out["state"], timed_out["last_status"]) == ("pending", None), timed_out
    assert "timed out" in timed_out["last_error"].lower()
    assert timed_out["next_attempt_at"] is not None
    stuck_done = wait_for_webhook(client, stuck["id"])
    assert (stuck_done["webhook"]["state"], stuck_done["webhook"]["attempts"]) == ("failed", 4)
    assert len(receiver.at(silent)) == 4


def test_a_failed_job_sends_job_failed(
    client: httpx.Client, receiver: Receiver, store: JobStore, settings: Settings
) -> None:
    url = receiver.path(200)
    record = create_record(store, voice="en_US-nobody-medium", webhook_url=url)
    enqueue(settings, record.id)
    done = wait_for_webhook(client, record.id)
    assert done["status"] == "failed"
    body = json.loads(receiver.at(url)[0].body)
    assert body["type"] == "job.failed"
    assert body["data"]["error"]["code"] == "voice_not_found"


@pytest.fixture(scope="module")
def guarded_api(settings: Settings) -> Iterator[tuple[str, Settings]]:
    """An API with the guard on (production's default), on queues no worker reads: one for the
    module, each app starting its own helper processes."""
    guarded = settings.model_copy(
        update={"webhook_allow_private": False, "queue": f"guarded-{uuid.uuid4()}", "model_affinity": False}
    )
    with serve(create_app(guarded)) as api:
        yield api, guarded


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:9/hook", "loopback"),
        ("http://10.1.2.3/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://localhost:8080/hook", "loopback"),
        ("ftp://example.com/hook", "http"),
    ],
)
def test_private_receivers_are_refused_at_submit_with_the_guard_on(
    guarded_api: tuple[str, Settings], url: str, reason: str, redis_client: Any
) -> None:
    api, guarded = guarded_api
    with httpx.Client(base_url=api) as http:
        response = http.post("/v1/jobs", json={"text": SENTENCE, "webhook_url": url})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "webhook_url_refused"
    assert reason in response.json()["error"]["message"].lower()
    assert not any(redis_client.llen(q) for q in (guarded.queue, f"{guarded.queue}.interactive"))


def test_webhooks_need_a_signing_secret(settings: Settings) -> None:
    unsigned = settings.model_copy(update={"webhook_secret": None})
    with serve(create_app(unsigned)) as api, httpx.Client(base_url=api) as http:
        response = http.post("/v1/jobs", json={"text": SENTENCE, "webhook_url": "https://example.com/hook"})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "webhooks_not_configured"
