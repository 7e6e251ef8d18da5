"""VOICEVOX's user dictionary against the real API, Redis and worker: a word a VOICEVOX client adds is
said that way by every Japanese job of its tenant, without the job naming a lexicon; changed and
deleted as VOICEVOX does; bad input refused in VOICEVOX's shape with nothing stored; one tenant's
words never reach another's jobs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any, Final

import httpx
import pytest
import redis
from fastapi import FastAPI

from api.deps import get_state
from api.main import create_app
from api.voicevox.user_dict import router
from cli.processes import ManagedProcess
from tests.conftest import serve, wait_for_job
from tests.test_lexicons import JAPANESE_VOICE, STILL, finished, marks_of
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore

SENTENCE: Final = "東海林さん。"
"""The family name (read ショージ by the dictionary) and little else to speak."""
WRITTEN: Final = "アズマさん。"
PREFIX: Final = "/voicevox"


@pytest.fixture(scope="module")
def app_url(settings: Settings, worker: ManagedProcess) -> Iterator[str]:
    """An API requiring keys, with the router on a sub-application of its own (the VOICEVOX error
    shape: FastAPI's ``{"detail": ...}``), sharing the API's state."""
    app = create_app(settings.model_copy(update={"auth_required": True}))
    voicevox = FastAPI()
    voicevox.include_router(router)
    voicevox.dependency_overrides[get_state] = lambda: app.state.ttsq
    app.mount(PREFIX, voicevox)
    with serve(app) as url:
        yield url


@pytest.fixture
def tenant_client(app_url: str, settings: Settings) -> Iterator[httpx.Client]:
    with _keyed(app_url, settings) as client:
        yield client


@pytest.fixture
def other_tenant_client(app_url: str, settings: Settings) -> Iterator[httpx.Client]:
    """A second tenant's client, for what one tenant's words must not reach."""
    with _keyed(app_url, settings) as client:
        yield client


def _keyed(url: str, settings: Settings) -> httpx.Client:
    key, _ = TenantStore(redis.Redis.from_url(settings.redis_url)).create(f"vv-{uuid.uuid4().hex[:6]}", Limits())
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def add(client: httpx.Client, **params: Any) -> httpx.Response:
    return client.post(f"{PREFIX}/user_dict_word", params=params)


def heard(client: httpx.Client, text: str) -> list[str]:
    """The phonemes a Japanese job with no lexicon named speaks for the text."""
    (phonemes,) = heard_together([(client, text)])
    return phonemes


def heard_together(asked: list[tuple[httpx.Client, str]]) -> list[list[str]]:
    """:func:`heard` of each client and text, the jobs submitted together and then awaited."""
    submitted = []
    for client, text in asked:
        body = {**STILL, "text": text, "voice": JAPANESE_VOICE, "marks": ["word", "phoneme"]}
        answer = client.post("/v1/jobs", json=body)
        assert answer.status_code == 202, answer.text
        submitted.append((client, answer.json()["id"], text))
    heard_each = []
    for client, job_id, text in submitted:
        done = wait_for_job(client, job_id)
        assert done["status"] == "succeeded", (text, done)
        heard_each.append([m.value for m in marks_of(done) if m.type == "phoneme"])
    return heard_each


def test_a_word_is_listed_said_by_every_job_of_its_tenant_alone_changed_and_deleted(
    tenant_client: httpx.Client, other_tenant_client: httpx.Client
) -> None:
    """One tenant's word: its jobs say it so, another tenant's jobs do not, and the other tenant can
    neither list nor delete it."""
    client, other = tenant_client, other_tenant_client
    default, written, toukairin = heard_together(
        [(client, SENTENCE), (client, WRITTEN), (client, "トウカイリンさん。")]
    )
    assert default != written
    assert toukairin not in (default, written)
    answer = add(client, surface="東海林", pronunciation="アズマ", accent_type=1)
    assert answer.status_code == 200, answer.text
    word_uuid = answer.json()
    assert str(uuid.UUID(word_uuid)) == word_uuid
    listed = client.get(f"{PREFIX}/user_dict").json()
    assert listed == {
        word_uuid: {
            "surface": "東海林",
            "priority": 5,
            "context_id": 1348,
            "part_of_speech": "名詞",
            "part_of_speech_detail_1": "固有名詞",
            "part_of_speech_detail_2": "一般",
            "part_of_speech_detail_3": "*",
            "inflectional_type": "*",
            "inflectional_form": "*",
            "stem": "*",
            "yomi": "アズマ",
            "pronunciation": "アズマ",
            "accent_type": 1,
            "mora_count": 3,
            "accent_associative_rule": "*",
        }
    }
    assert other.get(f"{PREFIX}/user_dict").json() == {}
    assert other.delete(f"{PREFIX}/user_dict_word/{word_uuid}").status_code == 422
    owners, others = heard_together([(client, SENTENCE), (other, SENTENCE)])
    assert owners == written  # no lexicon named
    assert others == default  # another tenant's job
    lexicons = {item["name"]: item for item in client.get("/v1/lexicons").json()["lexicons"]}
    assert lexicons["userdict"]["language"] == "ja"

    changed = client.put(
        f"{PREFIX}/user_dict_word/{word_uuid}",
        params={"surface": "東海林", "pronunciation": "トウカイリン", "accent_type": 0, "word_type": "COMMON_NOUN"},
    )
    assert changed.status_code == 204, changed.text
    assert client.get(f"{PREFIX}/user_dict").json()[word_uuid]["part_of_speech_detail_1"] == "一般"
    assert heard(client, SENTENCE) == toukairin

    assert client.delete(f"{PREFIX}/user_dict_word/{word_uuid}").status_code == 204
    assert client.get(f"{PREFIX}/user_dict").json() == {}
    assert heard(client, SENTENCE) == default
    assert "userdict" not in {item["name"] for item in client.get("/v1/lexicons").json()["lexicons"]}


def test_an_english_job_is_not_refused_for_the_japanese_dictionary(tenant_client: httpx.Client) -> None:
    assert add(tenant_client, surface="東海林", pronunciation="アズマ", accent_type=1).status_code == 200
    job = finished(tenant_client, {"text": "An English sentence."})
    assert job["status"] == "succeeded"


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"surface": "東海林", "pronunciation": "azuma", "accent_type": 1}, "katakana"),
        ({"surface": "東海林", "pronunciation": "アズマ", "accent_type": 4}, "0..3"),
        ({"surface": "東海林", "pronunciation": "アズマ", "accent_type": -1}, "0..3"),
        ({"surface": "東海林", "pronunciation": "アズマ", "accent_type": 1, "priority": 11}, "priority"),
        ({"surface": "", "pronunciation": "アズマ", "accent_type": 1}, "surface"),
        ({"surface": "東海林", "pronunciation": "アズマ", "accent_type": 1, "word_type": "PRONOUN"}, "word_type"),
        ({"pronunciation": "アズマ", "accent_type": 1}, "surface"),
    ],
)
def test_bad_words_are_refused_in_voicevox_shape_and_nothing_is_stored(
    tenant_client: httpx.Client, params: dict[str, Any], named: str
) -> None:
    answer = add(tenant_client, **params)
    assert answer.status_code == 422, answer.text
    assert set(answer.json()) == {"detail"}
    assert named in str(answer.json()["detail"])
    assert tenant_client.get(f"{PREFIX}/user_dict").json() == {}
    assert "userdict" not in {item["name"] for item in tenant_client.get("/v1/lexicons").json()["lexicons"]}


def test_unknown_uuids_are_refused_as_voicevox_refuses_them(tenant_client: httpx.Client) -> None:
    """VOICEVOX ENGINE answers 422 (not 404) for a word it does not have."""
    unknown = str(uuid.uuid4())
    word = {"surface": "東海林", "pronunciation": "アズマ", "accent_type": 1}
    changed = tenant_client.put(f"{PREFIX}/user_dict_word/{unknown}", params=word)  # type: ignore[arg-type]
    assert changed.status_code == 422
    assert unknown in changed.json()["detail"]
    assert tenant_client.delete(f"{PREFIX}/user_dict_word/{unknown}").status_code == 422
    assert tenant_client.get(f"{PREFIX}/user_dict").json() == {}


def test_import_adds_and_overrides_only_when_asked(tenant_client: httpx.Client) -> None:
    client = tenant_client
    kept = add(client, surface="東海林", pronunciation="アズマ", accent_type=1).json()
    exported = client.get(f"{PREFIX}/user_dict").json()
    other = str(uuid.uuid4())
    imported = {
        kept: {**exported[kept], "pronunciation": "ショウジ", "yomi": "ショウジ", "mora_count": None},
        other: {**exported[kept], "surface": "小鳥遊", "pronunciation": "タカナシ", "yomi": "タカナシ"},
    }
    assert client.post(f"{PREFIX}/import_user_dict", params={"override": False}, json=imported).status_code == 204
    words = client.get(f"{PREFIX}/user_dict").json()
    assert (words[kept]["pronunciation"], words[other]["pronunciation"]) == ("アズマ", "タカナシ")
    assert client.post(f"{PREFIX}/import_user_dict", params={"override": True}, json=imported).status_code == 204
    assert client.get(f"{PREFIX}/user_dict").json()[kept]["pronunciation"] == "ショウジ"
    bad = {str(uuid.uuid4()): {**exported[kept], "accent_type": 9}}
    refused = client.post(f"{PREFIX}/import_user_dict", params={"override": True}, json=bad)
    assert refused.status_code == 422
    assert len(client.get(f"{PREFIX}/user_dict").json()) == 2


def test_concurrent_additions_all_land_in_the_words_and_the_lexicon(tenant_client: httpx.Client) -> None:
    surfaces = [f"試験語{n}" for n in range(8)]
    answers: list[httpx.Response] = []

    def post(surface: str) -> None:
        answers.append(add(tenant_client, surface=surface, pronunciation="テスト", accent_type=1))

    threads = [threading.Thread(target=post, args=(s,)) for s in surfaces]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [200] * len(surfaces)
    words = tenant_client.get(f"{PREFIX}/user_dict").json()
    assert sorted(w["surface"] for w in words.values()) == sorted(surfaces)
    lexicon = tenant_client.get("/v1/lexicons/userdict").json()
    assert sorted(e["graphemes"][0] for e in lexicon["entries"]) == sorted(surfaces)
