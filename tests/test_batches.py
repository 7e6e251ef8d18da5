"""Batches through the real API, worker, service worker, Redis and S3."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
import redis
from mypy_boto3_s3 import S3Client

from api.submission import PUBLISH_PIPELINE
from cli.processes import ManagedProcess
from tests.conftest import JOB_TIMEOUT_S, TEST_BUCKET, IdleQueueApi, wait_for
from tests.receiver import Receiver
from ttsq.batches import BatchStore
from ttsq.constants import ACTIVE_BATCHES_KEY, batch_items_key
from ttsq.tenants import Limits, TenantStore

SENTENCES = ["One little line.", "Two little lines.", "Three lines now.", "Four of them.", "And five."]


@pytest.fixture(autouse=True)
def _service_worker(webhook_worker: ManagedProcess) -> None:
    """Batches are finished (manifest, webhook) by the service worker."""


@pytest.fixture
def tenants(redis_client: redis.Redis) -> TenantStore:
    return TenantStore(redis_client)


def new_key(tenants: TenantStore, **limits: float) -> dict[str, str]:
    key, _ = tenants.create(f"batch-{uuid.uuid4().hex[:6]}", Limits.model_validate(limits))
    return {"Authorization": f"Bearer {key}"}


def submit(client: httpx.Client, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    response = client.post("/v1/batches", json=body, **kwargs)
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/batches/{response.json()['id']}"
    batch: dict[str, Any] = response.json()
    return batch


def wait_for_batch(client: httpx.Client, batch_id: str, done: Any, timeout_s: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    """Poll until ``done(batch)``; returns the batch."""
    batch: dict[str, Any] = wait_for(
        lambda: client.get(f"/v1/batches/{batch_id}", params={"limit": 200}).json(),
        done,
        timeout_s,
        f"batch {batch_id}",
    )
    return batch


def test_a_batch_runs_to_completion_with_a_manifest(
    client: httpx.Client, s3_client: S3Client, redis_client: redis.Redis
) -> None:
    items = [{"text": text} for text in SENTENCES]
    items[0]["ref"] = "chapter-1"
    items[1]["format"] = "mp3"
    batch = submit(client, {"items": items, "defaults": {"format": "flac", "speed": 1.2}})
    assert batch["status"] == "running"
    assert batch["counts"] == {"total": 5, "pending": 5, "succeeded": 0, "failed": 0, "canceled": 0}
    assert batch["progress"]["characters_total"] == sum(len(text) for text in SENTENCES)
    done = wait_for_batch(client, batch["id"], lambda b: b["status"] == "completed")
    assert done["counts"] == {"total": 5, "pending": 0, "succeeded": 5, "failed": 0, "canceled": 0}
    assert done["progress"]["characters_done"] == done["progress"]["characters_total"]
    assert done["progress"]["segments_done"] == 5
    assert done["finished_at"] is not None
    assert redis_client.zscore(ACTIVE_BATCHES_KEY, batch["id"]) is None  # the sweeper looks no more
    assert [item["ref"] for item in done["items"]] == ["chapter-1", "1", "2", "3", "4"]
    key = BatchStore(redis_client, 600).get(batch["id"]).manifest_key
    assert key is not None
    assert re.fullmatch(rf"anonymous/batches/{batch['id']}/[0-9a-f]{{16}}/manifest\.json", key)
    manifest = json.loads(s3_client.get_object(Bucket=TEST_BUCKET, Key=key)["Body"].read())
    assert httpx.get(done["manifest_url"]).json() == manifest
    assert manifest["batch_id"] == batch["id"]
    assert manifest["totals"]["items"] == manifest["totals"]["succeeded"] == 5
    for item, entry in zip(done["items"], manifest["items"], strict=True):
        job = client.get(f"/v1/jobs/{item['job_id']}").json()
        assert job["batch_id"] == batch["id"]
        assert job["priority"] == "bulk"
        assert (entry["ref"], entry["job_id"], entry["status"]) == (item["ref"], job["id"], "succeeded")
        assert entry["key"] == job["result"]["key"] == item["result"]["key"]
        assert entry["duration_s"] == job["result"]["duration_s"] > 0
        assert entry["error"] is None
        assert job["options"]["speed"] == 1.2
    formats = [client.get(f"/v1/jobs/{item['job_id']}").json()["format"] for item in done["items"]]
    assert formats == ["flac", "mp3", "flac", "flac", "flac"]


def _nothing_new(api: IdleQueueApi, redis_client: redis.Redis, before: list[str]) -> None:
    base = api.queue.removesuffix(".interactive")
    assert redis_client.llen(base) == 0
    assert [b["id"] for b in api.client.get("/v1/batches").json()["batches"]] == before


@pytest.mark.parametrize(
    ("index", "change", "status", "code", "named"),
    [
        (3, {"text": "   "}, 422, "empty_text", "items[3].text"),
        (2, {"voice": "xx_XX-nobody-low"}, 422, "voice_not_found", "items[2].voice"),
        (1, {"speed": 9.0}, 422, "invalid_request", "items[1].speed"),
        (4, {"ref": "0"}, 422, "invalid_request", "items[4].ref"),
        (2, {"bitrate": 64000}, 422, "invalid_request", "items[2]: bitrate applies to opus, aac, m4a, not wav"),
        (1, {"format": "opus", "sample_rate": 22050}, 422, "invalid_request", "items[1]: sample_rate 22050 is not"),
    ],
)
def test_an_invalid_item_refuses_the_whole_batch(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis, index: int, change: dict[str, Any], status: int,
    code: str, named: str,
) -> None:  # fmt: skip
    before = [b["id"] for b in idle_queue_api.client.get("/v1/batches").json()["batches"]]
    items: list[dict[str, Any]] = [{"text": text} for text in SENTENCES]
    items[0]["ref"] = "0"
    items[index].update(change)
    refused = idle_queue_api.client.post("/v1/batches", json={"items": items})
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    assert refused.json()["error"]["message"].startswith(named)
    _nothing_new(idle_queue_api, redis_client, before)


def test_the_defaults_and_an_item_refused_together_name_the_item(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    """The defaults ask for Opus at 48 kHz; an item that sets its own format keeps that rate, which
    G.711 cannot take: the batch is refused naming that item, and nothing is created."""
    before = [b["id"] for b in idle_queue_api.client.get("/v1/batches").json()["batches"]]
    items: list[dict[str, Any]] = [{"text": SENTENCES[0]}, {"text": SENTENCES[1], "format": "mulaw"}]
    body = {"items": items, "defaults": {"format": "opus", "sample_rate": 48000}}
    refused = idle_queue_api.client.post("/v1/batches", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == {
        "code": "invalid_request",
        "message": "items[1]: sample_rate 48000 is not offered for mulaw; choose one of: 8000",
    }
    _nothing_new(idle_queue_api, redis_client, before)


def test_another_tenants_batch_is_not_found(idle_queue_api: IdleQueueApi, tenants: TenantStore) -> None:
    client = idle_queue_api.client
    mine = new_key(tenants)
    batch = submit(client, {"items": [{"text": SENTENCES[0]}]}, headers=mine)
    assert client.get(f"/v1/batches/{batch['id']}", headers=mine).status_code == 200
    for answer in (client.get(f"/v1/batches/{batch['id']}"), client.delete(f"/v1/batches/{batch['id']}")):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "batch_not_found"
    assert batch["id"] not in [b["id"] for b in client.get("/v1/batches").json()["batches"]]
    assert [b["id"] for b in client.get("/v1/batches", headers=mine).json()["batches"]] == [batch["id"]]
    assert client.get(f"/v1/batches/{batch['id']}", headers=mine).json()["status"] == "running"


def test_canceling_a_batch_cancels_every_item(idle_queue_api: IdleQueueApi, redis_client: redis.Redis) -> None:
    client = idle_queue_api.client
    batch = submit(client, {"items": [{"text": text} for text in SENTENCES[:3]]})
    assert redis_client.zscore(ACTIVE_BATCHES_KEY, batch["id"]) is not None
    canceled = client.delete(f"/v1/batches/{batch['id']}")
    assert canceled.status_code == 200
    assert canceled.json()["status"] == "canceled"
    assert canceled.json()["canceled_at"] is not None
    assert canceled.json()["counts"] == {"total": 3, "pending": 0, "succeeded": 0, "failed": 0, "canceled": 3}
    # The last cancel sent the finishing task: the service worker writes the manifest.
    finished = wait_for_batch(client, batch["id"], lambda b: b["manifest_url"] is not None)
    assert finished["status"] == "canceled"
    assert redis_client.zscore(ACTIVE_BATCHES_KEY, batch["id"]) is None
    assert [item["status"] for item in finished["items"]] == ["canceled"] * 3
    for item in finished["items"]:
        assert client.get(f"/v1/jobs/{item['job_id']}").json()["status"] == "canceled"
    manifest = httpx.get(finished["manifest_url"]).json()
    assert manifest["status"] == "canceled"
    assert [entry["status"] for entry in manifest["items"]] == ["canceled"] * 3
    assert client.delete(f"/v1/batches/{batch['id']}").json()["status"] == "canceled"  # harmless again


def test_items_are_paged_in_order(idle_queue_api: IdleQueueApi) -> None:
    client = idle_queue_api.client
    refs = [f"line-{n}" for n in range(7)]
    batch = submit(client, {"items": [{"text": f"Line number {n}.", "ref": ref} for n, ref in enumerate(refs)]})
    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/v1/batches/{batch['id']}", params=params).json()
        pages += 1
        seen.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert [item["ref"] for item in seen] == refs
    assert len({item["job_id"] for item in seen}) == 7
    assert all(item["status"] == "queued" and item["result"] is None for item in seen)
    other = submit(client, {"items": [{"text": "Another batch."}]})
    first = client.get(f"/v1/batches/{batch['id']}", params={"limit": 3}).json()["next_cursor"]
    refused = client.get(f"/v1/batches/{other['id']}", params={"cursor": first})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_cursor"
    client.delete(f"/v1/batches/{batch['id']}")
    client.delete(f"/v1/batches/{other['id']}")


def test_a_batch_larger_than_one_pipeline_queues_every_item_once_in_order(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    """The entry tasks go out in pipelines of ``PUBLISH_PIPELINE`` commands (two per item): every
    item's task is queued once, the first item's oldest, whatever chunk it fell in."""
    client = idle_queue_api.client
    count = PUBLISH_PIPELINE + 1
    batch = submit(client, {"items": [{"text": f"Line {n}."} for n in range(count)]})
    item_ids = [m.decode() for m in cast(list[bytes], redis_client.lrange(batch_items_key(batch["id"]), 0, -1))]
    base = idle_queue_api.queue.removesuffix(".interactive")
    waiting = redis_client.lrange(base, 0, -1)  # producers LPUSH: the tail is the oldest
    assert [json.loads(m)["headers"]["id"] for m in reversed(waiting)] == item_ids
    assert len(item_ids) == count
    client.delete(f"/v1/batches/{batch['id']}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def test_a_finished_batch_sends_batch_completed(client: httpx.Client, receiver: Receiver) -> None:
    url = receiver.path(204)
    batch = submit(client, {"items": [{"text": text} for text in SENTENCES[:2]], "webhook_url": url})
    done = wait_for_batch(
        client, batch["id"], lambda b: b["webhook"] is not None and b["webhook"]["state"] != "pending"
    )
    assert done["webhook"]["state"] == "delivered"
    assert (done["webhook"]["attempts"], done["webhook"]["last_status"]) == (1, 204)
    [event] = receiver.at(url)
    assert event.headers["webhook-signature"].startswith("v1,")
    assert event.headers["webhook-id"].startswith("msg_")
    body = json.loads(event.body)
    assert body["type"] == "batch.completed"
    assert body["data"]["id"] == batch["id"]
    assert body["data"]["status"] == "completed"
    assert body["data"]["counts"]["succeeded"] == 2
    assert body["data"]["manifest_url"].startswith("http")


def test_a_batch_over_a_limit_is_refused_whole(idle_queue_api: IdleQueueApi, tenants: TenantStore) -> None:
    client = idle_queue_api.client
    items = [{"text": text} for text in SENTENCES[:3]]
    two_active = new_key(tenants, max_active_jobs=2)
    refused = client.post("/v1/batches", json={"items": items}, headers=two_active)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "max_active_jobs_exceeded"
    assert "3 jobs" in refused.json()["error"]["message"]
    assert client.get("/v1/batches", headers=two_active).json()["batches"] == []
    assert client.get("/v1/jobs", headers=two_active).json()["jobs"] == []
    fits = submit(client, {"items": items[:2]}, headers=two_active)
    assert fits["counts"]["total"] == 2
    chars = sum(len(item["text"]) for item in items)
    few_chars = new_key(tenants, chars_per_day=chars - 1)
    refused = client.post("/v1/batches", json={"items": items}, headers=few_chars)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "chars_per_day_exceeded"
    assert refused.headers["retry-after"]
    assert client.get("/v1/batches", headers=few_chars).json()["batches"] == []
    assert submit(client, {"items": items[:2]}, headers=few_chars)["counts"]["total"] == 2
