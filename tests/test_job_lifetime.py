"""``ttl_hours``: a job or batch kept for its own lifetime after it finishes, within the server's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest
import redis
from mypy_boto3_s3 import S3Client

from tests.conftest import TEST_BUCKET, wait_for, wait_for_job
from ttsq.constants import OBJECT_EXPIRY_KEY, batch_key, job_key, job_text_key
from ttsq.maintenance import cleanup
from ttsq.settings import Settings
from ttsq.storage import ObjectStore
from ttsq.stores import Stores


def finished_at(body: dict[str, Any]) -> float:
    return datetime.fromisoformat(body["finished_at"]).timestamp()


def test_a_job_is_kept_its_own_lifetime_after_it_finishes_then_cleaned_up(
    client: httpx.Client, redis_client: redis.Redis, s3_client: S3Client, settings: Settings
) -> None:
    job = client.post("/v1/jobs", json={"text": "Kept for an hour.", "ttl_hours": 1}).json()
    assert job["ttl_hours"] == 1
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    end = finished_at(done) + 3600
    for key in (job_key(job["id"]), job_text_key(job["id"])):
        assert redis_client.ttl(key) == pytest.approx(3600, abs=15)  # not the server's 7 days
    audio_key = done["result"]["key"]
    assert redis_client.zscore(OBJECT_EXPIRY_KEY, audio_key) == pytest.approx(end, abs=2)
    cleanup(redis_client, _objects(settings), settings.part_ttl_s, now=end - 60)
    assert s3_client.head_object(Bucket=TEST_BUCKET, Key=audio_key)["ContentLength"] == done["result"]["bytes"]
    cleanup(redis_client, _objects(settings), settings.part_ttl_s, now=end + 1)
    with pytest.raises(s3_client.exceptions.ClientError):
        s3_client.head_object(Bucket=TEST_BUCKET, Key=audio_key)


def test_a_job_without_one_keeps_the_servers_lifetime(client: httpx.Client, redis_client: redis.Redis) -> None:
    job = client.post("/v1/jobs", json={"text": "Kept as long as the server keeps jobs."}).json()
    assert job["ttl_hours"] is None
    assert wait_for_job(client, job["id"])["status"] == "succeeded"
    assert redis_client.ttl(job_key(job["id"])) > 7 * 24 * 3600 - 120


def test_a_batch_and_its_items_are_kept_its_lifetime(client: httpx.Client, redis_client: redis.Redis) -> None:
    body = {"items": [{"text": "One."}, {"text": "Two."}], "ttl_hours": 2}
    batch = client.post("/v1/batches", json=body).json()
    assert batch["ttl_hours"] == 2
    done = wait_for(
        lambda: client.get(f"/v1/batches/{batch['id']}").json(), lambda b: b["status"] == "completed", 90, "the batch"
    )
    assert redis_client.ttl(batch_key(batch["id"])) == pytest.approx(7200, abs=15)
    items = done["items"]
    assert len(items) == 2
    for item in items:
        job = client.get(f"/v1/jobs/{item['job_id']}").json()
        assert job["ttl_hours"] == 2
        assert redis_client.ttl(job_key(item["job_id"])) == pytest.approx(7200, abs=30)
    expiring: list[bytes] = redis_client.zrange(OBJECT_EXPIRY_KEY, 0, -1)  # type: ignore[assignment]
    manifests = [k for k in expiring if batch["id"].encode() in k]
    assert manifests
    assert redis_client.zscore(OBJECT_EXPIRY_KEY, manifests[0]) == pytest.approx(finished_at(done) + 7200, abs=5)


@pytest.mark.parametrize(
    ("ttl_hours", "message"),
    [
        (0, "ttl_hours: Input should be greater than or equal to 1"),
        (True, "ttl_hours: Input should be a valid integer"),
        (1.5, "ttl_hours: Input should be a valid integer"),
        (169, "ttl_hours: 169 is over this server's 168 (TTSQ_JOB_TTL_S)"),
    ],
)
def test_a_lifetime_out_of_bounds_is_refused(client: httpx.Client, ttl_hours: object, message: str) -> None:
    for path, body in (
        ("/v1/jobs", {"text": "Never kept.", "ttl_hours": ttl_hours}),
        ("/v1/batches", {"items": [{"text": "Never kept."}], "ttl_hours": ttl_hours}),
    ):
        refused = client.post(path, json=body)
        assert refused.status_code == 422, refused.text
        assert message in refused.json()["error"]["message"]


def _objects(settings: Settings) -> ObjectStore:
    return Stores.connect(settings, 5).objects
