"""Cancel, list and idempotent submission through the real API and worker."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
import redis
from mypy_boto3_s3 import S3Client

from api.idempotency import ABANDONED_AFTER_S, IdempotencyStore, fingerprint
from api.schemas import JobCreate
from cli.processes import ManagedProcess, wait_until
from tests.conftest import JOB_TIMEOUT_S, TEST_BUCKET, IdleQueueApi, wait_for, wait_for_job, wait_for_tasks
from tests.receiver import Receiver
from ttsq.constants import job_objects_prefix
from ttsq.job_record import JobStatus
from ttsq.settings import Settings

SHORT = {"text": "Cancel me if you can.", "format": "wav"}
LONG = " ".join(["The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."] * 40)


def objects_of(s3_client: S3Client, job: dict[str, Any]) -> list[str]:
    listing = s3_client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=job_objects_prefix("anonymous", job["id"]))
    return [item["Key"] for item in listing.get("Contents", [])]


def test_a_canceled_queued_job_never_runs(
    idle_queue_api: IdleQueueApi, settings: Settings, worker: ManagedProcess, redis_client: redis.Redis,
    s3_client: S3Client,
) -> None:  # fmt: skip
    client = idle_queue_api.client
    job = client.post("/v1/jobs", json=SHORT).json()
    canceled = client.delete(f"/v1/jobs/{job['id']}")
    assert canceled.status_code == 200
    assert canceled.json()["status"] == "canceled"
    assert canceled.json()["finished_at"] is not None
    # Hand its entry task to the suite's worker: it must find the job canceled and do nothing.
    moved = redis_client.lmove(idle_queue_api.queue, settings.queue, "RIGHT", "LEFT")
    assert moved is not None
    wait_for_tasks(worker, [job["id"]])
    after = client.get(f"/v1/jobs/{job['id']}").json()
    assert after["status"] == "canceled"
    assert after["started_at"] is None
    assert after["result"] is None
    assert objects_of(s3_client, job) == []


def test_canceling_a_running_job_stops_it_and_removes_its_parts(
    client: httpx.Client, redis_client: redis.Redis, s3_client: S3Client
) -> None:
    job = client.post("/v1/jobs", json={"text": LONG, "format": "wav"}).json()
    running = wait_for(
        lambda: client.get(f"/v1/jobs/{job['id']}").json(),
        lambda job: JobStatus(job["status"]).terminal or job["progress"]["segments_done"] >= 2,
        JOB_TIMEOUT_S,
        "two segments done",
    )
    assert running["status"] == "running", running
    total = running["progress"]["segments_total"]
    canceled = client.delete(f"/v1/jobs/{job['id']}").json()
    assert canceled["status"] == "canceled"
    # The segments in flight finish, see the status and drop their parts; the rest never start.
    wait_until(lambda: not list(redis_client.scan_iter(f"ttsq:job:{job['id']}:part:*")), 30, "the parts dropped")
    later = client.get(f"/v1/jobs/{job['id']}").json()
    assert later["status"] == "canceled"
    assert later["progress"]["segments_done"] < total
    assert objects_of(s3_client, job) == []
    # The worker is free again: a new job succeeds at once.
    assert wait_for_job(client, client.post("/v1/jobs", json=SHORT).json()["id"])["status"] == "succeeded"


def test_deleting_a_finished_job_deletes_its_audio(client: httpx.Client, s3_client: S3Client) -> None:
    done = wait_for_job(client, client.post("/v1/jobs", json=SHORT).json()["id"])
    assert objects_of(s3_client, done) == [done["result"]["key"]]
    purged = client.delete(f"/v1/jobs/{done['id']}").json()
    assert purged["status"] == "succeeded"
    assert purged["purged_at"] is not None
    assert purged["result"] is None
    assert objects_of(s3_client, done) == []
    assert client.get(f"/v1/jobs/{done['id']}/audio").status_code == 409
    assert client.delete(f"/v1/jobs/{done['id']}").json()["purged_at"] == purged["purged_at"]  # idempotent


def test_a_canceled_job_sends_job_canceled(idle_queue_api: IdleQueueApi, webhook_worker: ManagedProcess) -> None:
    receiver = Receiver()
    try:
        client = idle_queue_api.client
        job = client.post("/v1/jobs", json={**SHORT, "webhook_url": f"{receiver.url}/hook"}).json()
        client.delete(f"/v1/jobs/{job['id']}")
        waited = wait_for(
            lambda: client.get(f"/v1/jobs/{job['id']}").json(),
            lambda job: job["webhook"]["state"] != "pending",
            60,
            "the job.canceled delivery",
        )
        assert waited["webhook"]["state"] == "delivered", waited["webhook"]
        bodies = [r.body for r in receiver.received if r.path == "/hook"]
        assert len(bodies) == 1
        assert b'"type":"job.canceled"' in bodies[0]
    finally:
        receiver.close()


def test_jobs_are_listed_newest_first_page_by_page(idle_queue_api: IdleQueueApi, settings: Settings) -> None:
    """Every job once, in order, across pages; a status filter; a foreign cursor refused."""
    client = idle_queue_api.client
    key = f"ttsq_{uuid.uuid4().hex}"  # an unknown key: the anonymous tenant, listed with the suite's other jobs
    mine = [client.post("/v1/jobs", json=SHORT, headers={"Authorization": f"Bearer {key}"}).json() for _ in range(5)]
    client.delete(f"/v1/jobs/{mine[1]['id']}")
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/jobs", params=params).json()
        assert len(page["jobs"]) <= 2
        seen.extend(page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    ids = [job["id"] for job in seen]
    assert len(ids) == len(set(ids))
    created = [job["created_at"] for job in seen]
    assert created == sorted(created, reverse=True)
    assert [i for i in ids if i in {m["id"] for m in mine}] == [m["id"] for m in reversed(mine)]
    canceled = client.get("/v1/jobs", params={"status": "canceled", "limit": 200}).json()["jobs"]
    assert mine[1]["id"] in [j["id"] for j in canceled]
    assert all(j["status"] == "canceled" for j in canceled)
    refused = client.get("/v1/jobs", params={"cursor": "bm90LWEtY3Vyc29y"})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_cursor"


def test_an_idempotency_key_returns_the_first_job(idle_queue_api: IdleQueueApi) -> None:
    client = idle_queue_api.client
    key = {"Idempotency-Key": f"order-{uuid.uuid4()}"}
    first = client.post("/v1/jobs", json=SHORT, headers=key)
    again = client.post("/v1/jobs", json=SHORT, headers=key)
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    other_body = client.post("/v1/jobs", json={**SHORT, "text": "Something else."}, headers=key)
    assert other_body.status_code == 409
    assert other_body.json()["error"]["code"] == "idempotency_conflict"
    listed = [j["id"] for j in client.get("/v1/jobs", params={"limit": 200}).json()["jobs"]]
    assert listed.count(first.json()["id"]) == 1
    fresh = client.post("/v1/jobs", json=SHORT, headers={"Idempotency-Key": f"order-{uuid.uuid4()}"})
    assert fresh.status_code == 202
    assert fresh.json()["id"] != first.json()["id"]


@pytest.mark.parametrize("header", ["", "x" * 256, "tab\there"])
def test_a_malformed_idempotency_key_is_refused(idle_queue_api: IdleQueueApi, header: str) -> None:
    answer = idle_queue_api.client.post("/v1/jobs", json=SHORT, headers={"Idempotency-Key": header})
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid_idempotency_key"


def test_a_refused_request_does_not_claim_its_idempotency_key(idle_queue_api: IdleQueueApi) -> None:
    client = idle_queue_api.client
    key = {"Idempotency-Key": f"retry-{uuid.uuid4()}"}
    refused = client.post("/v1/jobs", json={**SHORT, "voice": "xx_XX-nobody-low"}, headers=key)
    assert refused.status_code == 422
    fixed = client.post("/v1/jobs", json=SHORT, headers=key)
    assert fixed.status_code == 202  # the fixed request took the key...
    replayed = client.post("/v1/jobs", json=SHORT, headers=key)
    assert (replayed.status_code, replayed.json()["id"]) == (200, fixed.json()["id"])  # ...and holds it


def test_an_abandoned_idempotency_claim_is_taken_over(idle_queue_api: IdleQueueApi, redis_client: redis.Redis) -> None:
    """A request that claimed its key and then died with Redis (so it could neither create its job
    nor release the key) must not make the client's retries fail for a day."""
    key = f"order-{uuid.uuid4()}"
    body = JobCreate.model_validate(SHORT).model_dump(mode="json")
    entry = IdempotencyStore(redis_client, 3600)._entry("anonymous", key)
    lost = {"fingerprint": fingerprint(body), "job_id": str(uuid.uuid4()), "claimed_at": time.time()}
    redis_client.set(entry, json.dumps(lost), ex=3600)
    fresh = idle_queue_api.client.post("/v1/jobs", json=SHORT, headers={"Idempotency-Key": key})
    assert fresh.status_code == 409  # a young claim may still be in flight
    redis_client.set(entry, json.dumps({**lost, "claimed_at": time.time() - ABANDONED_AFTER_S - 1}), ex=3600)
    taken = idle_queue_api.client.post("/v1/jobs", json=SHORT, headers={"Idempotency-Key": key})
    assert taken.status_code == 202
    again = idle_queue_api.client.post("/v1/jobs", json=SHORT, headers={"Idempotency-Key": key})
    assert again.status_code == 200
    assert again.json()["id"] == taken.json()["id"]
