"""A batch's bundles (all chapters as a zip, an m4b audiobook) through the real API, service worker,
Redis and S3: what is in them, how they are served, and what a failed item does to them."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import pytest
import redis
import soundfile
from mypy_boto3_s3 import S3Client

from cli.processes import ManagedProcess
from tests.conftest import TEST_BUCKET, IdleQueueApi
from tests.test_batches import submit, wait_for_batch
from tests.voices import BROKEN_VOICE_ID
from ttsq.bundling import make_bundles
from ttsq.constants import ACTIVE_BATCHES_KEY, OBJECT_EXPIRY_KEY
from ttsq.settings import Settings
from ttsq.stores import Stores

TITLES = ["The Door", "Über den Fluß"]
TEXTS = ["The door opened.", "Then it closed."]


@pytest.fixture(autouse=True)
def _service_worker(webhook_worker: ManagedProcess) -> None:
    """Batches are finished, and their bundles made, by the service worker."""


@pytest.fixture
def stores(settings: Settings) -> Iterator[Stores]:
    own = Stores.connect(settings, 30)
    yield own
    own.close()


def settled(batch: dict[str, Any]) -> bool:
    return batch["status"] == "completed" and all(b["status"] != "pending" for b in batch["bundles"].values())


def decoded_s(data: bytes) -> float:
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        return sum(frame.samples for frame in container.decode(stream)) / stream.sample_rate


def batch_keys(s3_client: S3Client, batch_id: str) -> list[str]:
    listing = s3_client.list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"anonymous/batches/{batch_id}/")
    return sorted(item["Key"] for item in listing.get("Contents", []))


def test_a_book_batch_gets_a_zip_of_its_chapters_and_an_m4b_with_chapter_marks(
    client: httpx.Client, s3_client: S3Client, redis_client: redis.Redis, stores: Stores
) -> None:
    items = [{"text": text, "title": title} for text, title in zip(TEXTS, TITLES, strict=True)]
    body = {"items": items, "title": "The Small Book", "bundle": ["zip", "m4b"], "defaults": {"marks": ["sentence"]}}
    batch = submit(client, body)
    assert batch["bundles"] == {
        kind: {"status": "pending", "url": None, "bytes": None, "chapters": None, "error": None}
        for kind in ("zip", "m4b")
    }
    pending = client.get(f"/v1/batches/{batch['id']}/files/book.zip")
    assert pending.status_code in (409, 200)  # 200 only if the worker was quicker than this request
    done = wait_for_batch(client, batch["id"], settled)
    assert redis_client.zscore(ACTIVE_BATCHES_KEY, batch["id"]) is None  # settled: the sweeper looks no more
    assert [item["title"] for item in done["items"]] == TITLES
    durations = [item["result"]["duration_s"] for item in done["items"]]
    bundles = done["bundles"]
    assert {kind: (b["status"], b["chapters"], b["error"]) for kind, b in bundles.items()} == {
        "zip": ("ready", 2, None),
        "m4b": ("ready", 2, None),
    }

    archive = httpx.get(bundles["zip"]["url"]).content
    assert len(archive) == bundles["zip"]["bytes"]
    with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
        names = zipped.namelist()
        assert names == [
            *("01-the-door.wav", "01-the-door.marks.json", "01-the-door.vtt", "01-the-door.srt"),
            *(
                "02-uber-den-fluss.wav",
                "02-uber-den-fluss.marks.json",
                "02-uber-den-fluss.vtt",
                "02-uber-den-fluss.srt",
            ),
        ]
        for stem, duration in zip(("01-the-door", "02-uber-den-fluss"), durations, strict=True):
            audio, rate = soundfile.read(io.BytesIO(zipped.read(f"{stem}.wav")))
            assert len(audio) / rate == pytest.approx(duration, abs=0.01)
            assert zipped.read(f"{stem}.vtt").startswith(b"WEBVTT")
            assert {mark["type"] for mark in json.loads(zipped.read(f"{stem}.marks.json"))} == {"sentence"}

    book = httpx.get(bundles["m4b"]["url"]).content
    assert len(book) == bundles["m4b"]["bytes"]
    with av.open(io.BytesIO(book)) as container:
        assert container.streams.audio[0].codec_context.name == "aac"
        assert container.metadata["title"] == "The Small Book"
        marks = container.chapters()
    assert [mark["metadata"]["title"] for mark in marks] == TITLES
    starts = [float(mark["start"] * (mark["time_base"] or 0)) for mark in marks]
    assert starts == [0, pytest.approx(durations[0], abs=0.01)]
    assert decoded_s(book) == pytest.approx(sum(durations), abs=0.1)

    # The same bytes through the API, named after the book; saved with ?download=true.
    served = client.get(f"/v1/batches/{batch['id']}/files/book.zip")
    assert (served.status_code, served.headers["content-type"], served.content) == (200, "application/zip", archive)
    assert served.headers["content-disposition"].startswith('inline; filename="the-small-book.zip"')
    saved = client.get(f"/v1/batches/{batch['id']}/files/book.m4b", params={"download": "true"})
    assert (saved.status_code, saved.headers["content-type"], saved.content) == (200, "audio/mp4", book)
    assert saved.headers["content-disposition"].startswith('attachment; filename="the-small-book.m4b"')

    # Under the batch's prefix, beside the manifest, with the same expiry as it.
    record = stores.batches.get(batch["id"])
    keys = [key for state in record.bundles.values() if (key := state.key) is not None]
    assert len(keys) == 2
    assert all(key.startswith(f"anonymous/batches/{batch['id']}/") for key in keys)
    assert record.manifest_key is not None
    expiries = {redis_client.zscore(OBJECT_EXPIRY_KEY, key) for key in [record.manifest_key, *keys]}
    assert len(expiries) == 1
    assert None not in expiries

    # Made once: the step again (a redelivered finishing task) finds nothing pending and makes nothing.
    before = batch_keys(s3_client, batch["id"])
    assert make_bundles(batch["id"], stores.batches, stores.jobs, stores.objects, "0123456789abcdef") is None
    assert stores.batches.get(batch["id"]) == record
    assert batch_keys(s3_client, batch["id"]) == before
    assert len(before) == 3  # the manifest and the two bundles


def test_a_failed_chapter_leaves_it_out_of_the_zip_and_fails_the_m4b(client: httpx.Client) -> None:
    """The batch completes as always (its webhook does not wait); the zip holds what succeeded, and
    the m4b, which needs every chapter, says which one kept it from being made."""
    items = [{"text": TEXTS[0], "title": TITLES[0]}, {"text": "I think so.", "voice": BROKEN_VOICE_ID, "ref": "two"}]
    batch = submit(client, {"items": items, "bundle": ["m4b", "zip"]})
    done = wait_for_batch(client, batch["id"], settled)
    assert done["counts"]["failed"] == 1
    zipped, m4b = done["bundles"]["zip"], done["bundles"]["m4b"]
    assert (zipped["status"], zipped["chapters"]) == ("ready", 1)
    with zipfile.ZipFile(io.BytesIO(httpx.get(zipped["url"]).content)) as archive:
        assert archive.namelist() == ["01-the-door.wav"]
    assert (m4b["status"], m4b["url"], m4b["bytes"]) == ("failed", None, None)
    assert m4b["error"] == {
        "code": "item_not_succeeded",
        "message": "items[1] (two) is failed: an m4b needs every item",
    }
    refused = client.get(f"/v1/batches/{batch['id']}/files/book.m4b")
    assert refused.status_code == 409
    assert refused.json()["error"] == {
        "code": "bundle_failed",
        "message": "the m4b bundle failed: items[1] (two) is failed: an m4b needs every item",
    }


def test_a_batch_without_bundles_has_none(client: httpx.Client, s3_client: S3Client) -> None:
    batch = submit(client, {"items": [{"text": TEXTS[0]}]})
    assert batch["bundles"] == {}
    done = wait_for_batch(client, batch["id"], lambda b: b["status"] == "completed")
    assert done["bundles"] == {}
    missing = client.get(f"/v1/batches/{batch['id']}/files/book.zip")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == f"batch {batch['id']} asked for no zip bundle"
    assert client.get(f"/v1/batches/{batch['id']}/files/book.tar").status_code == 422
    assert [Path(key).name for key in batch_keys(s3_client, batch["id"])] == ["manifest.json"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bundle": ["zip", "zip"]}, "bundle: Value error, bundle names a kind twice"),
        ({"bundle": ["mp3"]}, "bundle[0]: Input should be 'zip' or 'm4b'"),
        ({"bundle": ["m4b"], "defaults": {"format": "mulaw"}}, "items[0].format: mulaw is raw G.711"),
    ],
)
def test_a_bundle_that_cannot_be_made_refuses_the_batch(
    idle_queue_api: IdleQueueApi, change: dict[str, Any], message: str
) -> None:
    body = {"items": [{"text": TEXTS[0]}, {"text": TEXTS[1]}], **change}
    refused = idle_queue_api.client.post("/v1/batches", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["message"].startswith(message)
