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
from tests.conftest import IdleQueueApi, enqueue, serve, wait_for_job
from ttsq.constants import KEY_PREFIX
from ttsq.job_record import utcnow
from ttsq.quotas import Quotas, usage_day
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


SMALL_CAP: Final = BYTES_CAP // 4
"""The tenant's lexicon bytes of the API that stores large lexicons again and again: a quarter of
``BYTES_CAP``, for lexicons a quarter of the finding's size (each store parses every entry)."""


def test_replacing_a_lexicon_keeps_the_tenants_bytes_under_the_cap(
    settings: Settings, redis_client: redis.Redis
) -> None:
    """40 stores of a 737 KB lexicon (each version 1.5 MB with its entries) kept every replaced
    version for a week: 59 MB. Now the oldest kept ones go; the current ones alone are refused past
    the cap, naming it. Here everything is a quarter of that (a 1 MiB cap, versions of about 0.4 MB),
    and ten stores show it: kept whole they would hold more than the bound checked, and the third
    store already has to drop a kept version to fit."""
    small = settings.model_copy(update={"auth_required": True, "lexicon_bytes_per_tenant": SMALL_CAP})
    with serve(create_app(small)) as url:
        client, tenant = keyed(url, settings)
        with client:
            document = json_lexicon(2250)
            headers = {"Content-Type": "application/json"}
            for round_ in range(10):
                answer = client.put("/v1/lexicons/big", content=document, headers=headers)
                assert answer.status_code == 200, (round_, answer.text)
            assert 10 * len(document) > SMALL_CAP * 1.5  # what kept versions would hold, documents alone
            assert stored_bytes(redis_client, tenant) < SMALL_CAP * 1.5  # Redis's own overhead on top
            assert client.get("/v1/lexicons/big").content == document
            # a second name fits where the kept versions were; a third would not beside the current two
            assert client.put("/v1/lexicons/other", content=document, headers=headers).status_code == 200
            refused = client.put("/v1/lexicons/third", content=document, headers=headers)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "lexicon_refused"
            assert "TTSQ_LEXICON_BYTES_PER_TENANT" in refused.json()["error"]["message"]
            assert {s["name"] for s in client.get("/v1/lexicons").json()["lexicons"]} == {"big", "other"}
            assert stored_bytes(redis_client, tenant) < SMALL_CAP * 1.5


def test_a_name_keeps_its_last_versions_only(bounded_url: str, settings: Settings, redis_client: redis.Redis) -> None:
    client, tenant = keyed(bounded_url, settings)
    with client:
        for round_ in range(10):
            document = json_lexicon(3, alias=f"w{round_}")
            answer = client.put("/v1/lexicons/small", content=document, headers={"Content-Type": "application/json"})
            assert answer.status_code == 200, answer.text
        versions = sorted(
            int(key.rsplit(b":", 1)[1])
            for key in redis_client.scan_iter(match=f"{KEY_PREFIX}:lexicon:{tenant}:small:*")
        )
        assert versions == [7, 8, 9, 10]  # the current one and TTSQ_LEXICON_VERSIONS_KEPT (3) replaced


def test_a_job_whose_version_was_dropped_fails_naming_it_and_the_user_dictionary_reads_on(
    idle_queue_api: IdleQueueApi, settings: Settings, client: httpx.Client
) -> None:
    """Queued with version 1 of a named lexicon and of the user dictionary, run after four more
    stores of each: the named one's version is gone (``lexicon_version_gone``, the setting named);
    the user dictionary, used unnamed, is read as it is now."""
    headers = {"Content-Type": "application/json"}
    name = f"gone{uuid.uuid4().hex[:10]}"

    def store(lexicon: str, language: str, **entry: object) -> None:
        answer = client.put(f"/v1/lexicons/{lexicon}", content=lexicon_json(language, **entry), headers=headers)
        assert answer.status_code == 200, answer.text

    store(name, "en-US", graphemes=["Nguyen"], alias="win")
    store("userdict", "ja", graphemes=["東海林"], reading="アズマ")
    try:
        named = idle_queue_api.client.post("/v1/jobs", json={"text": "Nguyen rang.", "lexicons": [name]})
        unnamed = idle_queue_api.client.post(
            "/v1/jobs", json={"text": "東海林さん。", "voice": "ja_JP-kokoro-jf_alpha"}
        )
        assert (named.status_code, unnamed.status_code) == (202, 202), unnamed.text
        for round_ in range(4):
            store(name, "en-US", graphemes=["Nguyen"], alias=f"win {round_}")
            store("userdict", "ja", graphemes=["東海林"], reading="アズマ" * (round_ + 2))
        for job in (named, unnamed):
            enqueue(settings, job.json()["id"])
        failed, spoken = (wait_for_job(client, job.json()["id"]) for job in (named, unnamed))
        assert failed["status"] == "failed", failed
        assert failed["error"]["code"] == "lexicon_version_gone"
        assert "TTSQ_LEXICON_VERSIONS_KEPT" in failed["error"]["message"]
        assert spoken["status"] == "succeeded", spoken
    finally:
        client.delete("/v1/lexicons/userdict")


def add_word(client: httpx.Client, number: int) -> None:
    surface = "".join(chr(0x4E00 + int(d) + 10 * position) for position, d in enumerate(f"{number:04d}"))
    answer = client.post(
        f"{VOICEVOX}/user_dict_word", params={"surface": surface, "pronunciation": "アズマ", "accent_type": 1}
    )
    assert answer.status_code == 200, answer.text


def test_voicevox_words_grow_redis_linearly(bounded_url: str, settings: Settings, redis_client: redis.Redis) -> None:
    """Each word rewrote the whole dictionary as a version kept for a week: 2,000 words took Redis
    from 249 to 610 MiB. Now what the dictionary holds grows as its words do: its bytes at 200
    words are about four times those at 50, not sixteen."""
    client, tenant = keyed(bounded_url, settings)
    with client:
        for number in range(50):
            add_word(client, number)
        at_50 = stored_bytes(redis_client, tenant)
        for number in range(50, 200):
            add_word(client, number)
        at_200 = stored_bytes(redis_client, tenant)
        assert len(client.get(f"{VOICEVOX}/user_dict").json()) == 200
    assert at_200 < 6 * at_50, (at_50, at_200)


# --- Finding 2: what a job speaks decides its priority, admission and charge ----------------------

ALIAS: Final = ("the quick brown fox jumps over the lazy dog " * 5)[:200]
"""The longest alias a lexicon may hold (200 characters), for a one-letter grapheme."""
IPA: Final = ("\u00f0\u0259 kw\u026ak b\u0279a\u028an f\u0251ks " * 11)[:200]
READING: Final = "アズマ" * 66
DIGITS: Final = "1234567890" * 100


def lexicon_json(language: str, **entry: object) -> bytes:
    return json.dumps({"language": language, "entries": [entry]}, ensure_ascii=False).encode()


SHAPES: Final = {
    "letter aliased to 200 characters": (lexicon_json("en-US", graphemes=["b"], alias=ALIAS), "b " * 499 + "b", None),
    "letter as 200 characters of IPA": (
        lexicon_json("en-US", graphemes=["b"], phoneme=IPA, alphabet="ipa"),
        "b " * 499 + "b",
        None,
    ),
    "two-word grapheme": (lexicon_json("en-US", graphemes=["New York"], alias=ALIAS), "New York " * 100, None),
    "kana read as 198": (lexicon_json("ja", graphemes=["あ"], reading=READING), "あ" * 20, "ja_JP-kokoro-jf_alpha"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_job_its_lexicons_make_long_is_bulk(idle_queue_api: IdleQueueApi, shape: str) -> None:
    """The same text is interactive without the lexicon, bulk with it: judged on what it speaks."""
    document, text, voice = SHAPES[shape]
    client = idle_queue_api.client
    name = f"amp{uuid.uuid4().hex[:10]}"
    stored = client.put(f"/v1/lexicons/{name}", content=document, headers={"Content-Type": "application/json"})
    assert stored.status_code == 200, stored.text
    body = {"text": text, **({"voice": voice} if voice else {})}
    plain = client.post("/v1/jobs", json=body)
    amplified = client.post("/v1/jobs", json={**body, "lexicons": [name]})
    assert (plain.status_code, amplified.status_code) == (202, 202), amplified.text
    assert (plain.json()["priority"], amplified.json()["priority"]) == ("interactive", "bulk")


def test_numbers_read_as_words_make_a_job_bulk(idle_queue_api: IdleQueueApi) -> None:
    """999 digits are read as ~600 s of words: bulk, as prose of the same length is not."""
    answers = [idle_queue_api.client.post("/v1/jobs", json={"text": text}) for text in (DIGITS[:999], ALIAS * 4)]
    assert [a.json()["priority"] for a in answers] == ["bulk", "interactive"]


def test_an_amplified_job_is_charged_and_refused_by_what_it_speaks(
    bounded_url: str, settings: Settings, redis_client: redis.Redis
) -> None:
    """The finding's job: 999 characters, 500 of them a "b" spoken as 200 characters: 100,499
    spoken characters, past a key's 50,000 a day (no job made); past ``max_text_chars`` it is 413."""
    client, _ = keyed(bounded_url, settings, Limits(chars_per_day=50_000))
    with client:
        stored = client.put("/v1/lexicons/amp", content=SHAPES["letter aliased to 200 characters"][0],
                            headers={"Content-Type": "application/json"})  # fmt: skip
        assert stored.status_code == 200, stored.text
        refused = client.post("/v1/jobs", json={"text": "b " * 499 + "b", "lexicons": ["amp"]})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "chars_per_day_exceeded"
        assert "100499 characters" in refused.json()["error"]["message"]
        assert client.get("/v1/jobs").json()["jobs"] == []
    small = settings.model_copy(update={"auth_required": True, "max_text_chars": 50_000})
    with serve(create_app(small)) as url:
        client, _ = keyed(url, settings)
        with client:
            client.put("/v1/lexicons/amp", content=SHAPES["letter aliased to 200 characters"][0],
                       headers={"Content-Type": "application/json"})  # fmt: skip
            too_long = client.post("/v1/jobs", json={"text": "b " * 499 + "b", "lexicons": ["amp"]})
            assert too_long.status_code == 413, too_long.text
            assert "spoken as up to 100499" in too_long.json()["error"]["message"]
            assert client.get("/v1/jobs").json()["jobs"] == []


CHARGED_INTERACTIVE_MAX: Final = 300
"""The most an interactive job speaks on the API of the charge test: two aliased "b"s pass it, as five
(a minute of audio) pass the default 1,000."""


def test_a_worker_charges_what_the_alias_made_it_speak(settings: Settings, worker: ManagedProcess) -> None:
    """Two "b"s (3 characters) speak 401: bulk, charged 401 characters and the audio delivered."""
    keyed_api = settings.model_copy(update={"auth_required": True, "interactive_max_chars": CHARGED_INTERACTIVE_MAX})
    with serve(create_app(keyed_api)) as url:
        client, tenant = keyed(url, settings)
        with client:
            stored = client.put("/v1/lexicons/amp", content=SHAPES["letter aliased to 200 characters"][0],
                                headers={"Content-Type": "application/json"})  # fmt: skip
            assert stored.status_code == 200, stored.text
            answer = client.post("/v1/jobs", json={"text": "b b", "lexicons": ["amp"], "format": "wav"})
            assert answer.status_code == 202, answer.text
            assert answer.json()["priority"] == "bulk"
            done = wait_for_job(client, answer.json()["id"])
            assert done["status"] == "succeeded", done
            assert done["result"]["duration_s"] > 12  # 400 characters of prose, not 3
            characters, audio_s = Quotas(redis.Redis.from_url(settings.redis_url)).usage(tenant, usage_day(utcnow()))
            assert characters == 3 + 2 * 199
            assert audio_s == pytest.approx(done["result"]["duration_s"], abs=1)
