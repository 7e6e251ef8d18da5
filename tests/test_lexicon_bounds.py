"""What a tenant's lexicons may cost the others, through the real API, Redis and worker: the bytes
they hold in Redis, replaced versions included, stay under ``TTSQ_LEXICON_BYTES_PER_TENANT``, the
VOICEVOX user dictionary grows linearly with its words, and what a job speaks after its lexicons'
aliases (not what it was written with) decides its priority, admission and charge."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Final

import httpx
import pytest
import redis
from fastapi import FastAPI

from api.deps import get_state
from api.main import create_app
from api.voicevox.user_dict import router
from cli.processes import ManagedProcess
from tests.conftest import serve
from ttsq.constants import KEY_PREFIX
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore

BYTES_CAP: Final = 4 * 1024 * 1024
"""The tenant's lexicon bytes of the API these tests run against."""
VOICEVOX: Final = "/voicevox"


@pytest.fixture(scope="module")
def bounded_url(settings: Settings, worker: ManagedProcess) -> Iterator[str]:
    """An API requiring keys, with a small lexicon store per tenant and the VOICEVOX user dictionary
    mounted as the VOICEVOX facade mounts it."""
    app = create_app(settings.model_copy(update={"auth_required": True, "lexicon_bytes_per_tenant": BYTES_CAP}))
    voicevox = FastAPI()
    voicevox.include_router(router)
    voicevox.dependency_overrides[get_state] = lambda: app.state.ttsq
    app.mount(VOICEVOX, voicevox)
    with serve(app) as url:
        yield url


def keyed(url: str, settings: Settings, limits: Limits | None = None) -> tuple[httpx.Client, str]:
    """A client of a new tenant, and the tenant's id."""
    store = TenantStore(redis.Redis.from_url(settings.redis_url))
    key, tenant = store.create(f"bound-{uuid.uuid4().hex[:6]}", limits or Limits())
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60), tenant.id


def stored_bytes(client: redis.Redis, tenant: str) -> int:
    """What the tenant's lexicons hold in Redis: every key of their versions and summaries."""
    total = 0
    for pattern in (f"{KEY_PREFIX}:lexicon:{tenant}:*", f"{KEY_PREFIX}:lexicons:{tenant}*"):
        for key in client.scan_iter(match=pattern, count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)
    return total


def json_lexicon(entries: int, alias: str = "w" * 40) -> bytes:
    rows = [{"graphemes": [f"word{i}"], "alias": alias} for i in range(entries)]
    return json.dumps({"language": "en-US", "entries": rows}).encode()


# --- Finding 3: stored versions ------------------------------------------------------------------


def test_replacing_a_lexicon_keeps_the_tenants_bytes_under_the_cap(
    bounded_url: str, settings: Settings, redis_client: redis.Redis
) -> None:
    """40 stores of a 737 KB lexicon (each version 1.5 MB with its entries) kept every replaced
    version for a week: 59 MB. Now the oldest kept ones go; the current ones alone are refused past
    the cap, naming it."""
    client, tenant = keyed(bounded_url, settings)
    with client:
        document = json_lexicon(9000)
        for round_ in range(40):
            answer = client.put(
                "/v1/lexicons/big", content=document, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 200, (round_, answer.text)
        assert stored_bytes(redis_client, tenant) < BYTES_CAP * 1.5  # Redis's own overhead on top
        assert client.get("/v1/lexicons/big").content == document
        # a second name fits where the kept versions were; a third would not beside the current two
        headers = {"Content-Type": "application/json"}
        assert client.put("/v1/lexicons/other", content=document, headers=headers).status_code == 200
        refused = client.put("/v1/lexicons/third", content=document, headers=headers)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "lexicon_refused"
        assert "TTSQ_LEXICON_BYTES_PER_TENANT" in refused.json()["error"]["message"]
        assert {s["name"] for s in client.get("/v1/lexicons").json()["lexicons"]} == {"big", "other"}
        assert stored_bytes(redis_client, tenant) < BYTES_CAP * 1.5


def test_a_name_keeps_its_last_versions_only(bounded_url: str, settings: Settings, redis_client: redis.Redis) -> None:
    client, tenant = keyed(bounded_url, settings)
    with client:
        for round_ in range(10):
            document = json_lexicon(3, alias=f"w{round_}")
            answer = client.put("/v1/lexicons/small", content=document, headers={"Content-Type": "application/json"})
            assert answer.status_code == 200, answer.text
        versions = sorted(
            int(key.rsplit(b":", 1)[1]) for key in redis_client.scan_iter(match=f"{KEY_PREFIX}:lexicon:{tenant}:small:*")
        )
        assert versions == [7, 8, 9, 10]  # the current one and TTSQ_LEXICON_VERSIONS_KEPT (3) replaced


def add_word(client: httpx.Client, number: int) -> None:
    surface = "".join(chr(0x4E00 + int(d) + 10 * position) for position, d in enumerate(f"{number:04d}"))
    answer = client.post(
        f"{VOICEVOX}/user_dict_word", params={"surface": surface, "pronunciation": "アズマ", "accent_type": 1}
    )
    assert answer.status_code == 200, answer.text


def test_voicevox_words_grow_redis_linearly(bounded_url: str, settings: Settings, redis_client: redis.Redis) -> None:
    """Each word rewrote the whole dictionary as a version kept for a week: 2,000 words took Redis
    from 249 to 610 MiB. Now what the dictionary holds grows as its words do: its bytes at 400
    words are about four times those at 100, not sixteen."""
    client, tenant = keyed(bounded_url, settings)
    with client:
        for number in range(100):
            add_word(client, number)
        at_100 = stored_bytes(redis_client, tenant)
        for number in range(100, 400):
            add_word(client, number)
        at_400 = stored_bytes(redis_client, tenant)
        assert len(client.get(f"{VOICEVOX}/user_dict").json()) == 400
    assert at_400 < 6 * at_100, (at_100, at_400)
