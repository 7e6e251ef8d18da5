"""``POST /v1/lexicon-preview`` through the real API and worker: a draft lexicon changes what is
heard as a saved one does, is checked as a saved one is (a bad entry named), and stays out of the
tenant's lexicons: not listed, not counted against their number or bytes, gone after a short time."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, Final

import httpx
import numpy as np
import pytest
import redis
import soundfile

from api.main import create_app
from cli.processes import ManagedProcess
from tests.conftest import serve, wait_for_job
from tests.test_lexicons import JAPANESE_VOICE, fresh_name, pls, put
from ttsq.constants import lexicon_kept_key, lexicon_sizes_key, lexicon_version_key
from ttsq.lexicons import DRAFT_NAME, DRAFT_TTL_S
from ttsq.settings import Settings
from ttsq.tenants import ANONYMOUS_TENANT

LONG_ALIAS: Final = "a name that is a great deal longer than it looks on the page"
DRAFT: Final = {"language": "en-US", "entries": [{"graphemes": ["Nguyen"], "alias": LONG_ALIAS}]}
TEXT: Final = "Nguyen rang."


def preview(client: httpx.Client, lexicon: dict[str, Any], text: str = TEXT, **body: Any) -> httpx.Response:
    return client.post("/v1/lexicon-preview", json={"lexicon": lexicon, "text": text, **body})


def samples(answer: httpx.Response) -> np.ndarray:
    assert answer.status_code == 200, answer.text
    decoded, _ = soundfile.read(io.BytesIO(answer.content), dtype="float64")
    return np.asarray(decoded)


def spoken(client: httpx.Client, text: str, voice: str = "alloy") -> np.ndarray:
    """The text said without any lexicon of the test's: the Listen button's other half."""
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": "wav"}
    return samples(client.post("/v1/audio/speech", json=body))


def test_a_draft_changes_what_is_heard_and_stays_out_of_the_tenants_lexicons(
    client: httpx.Client, redis_client: redis.Redis
) -> None:
    listed = client.get("/v1/lexicons").json()
    answer = preview(client, DRAFT, format="wav")
    heard, plain = samples(answer), spoken(client, TEXT)
    assert len(heard) > 2 * len(plain)  # the alias is many times the name's length
    written = spoken(client, f"{LONG_ALIAS} rang.")
    assert abs(len(heard) - len(written)) < len(written) * 0.15  # said as its alias would be
    assert answer.headers["content-type"] == "audio/wav"
    job = wait_for_job(client, answer.headers["x-ttsq-job-id"])
    assert job["status"] == "succeeded"
    assert job["result"] is None  # no stored object
    (use,) = job["options"]["lexicons"]
    assert use["name"] == DRAFT_NAME
    assert client.get("/v1/lexicons").json() == listed
    key = lexicon_version_key(ANONYMOUS_TENANT, DRAFT_NAME, use["version"])
    assert 0 < redis_client.ttl(key) <= DRAFT_TTL_S
    assert redis_client.hget(lexicon_sizes_key(ANONYMOUS_TENANT), key) is None
    assert redis_client.zscore(lexicon_kept_key(ANONYMOUS_TENANT), key) is None


def test_the_answer_is_mp3_by_default(client: httpx.Client) -> None:
    answer = preview(client, DRAFT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "audio/mpeg"
    assert len(samples(answer)) > 2 * len(spoken(client, TEXT))


@pytest.fixture(scope="module")
def full_url(settings: Settings, worker: ManagedProcess) -> Iterator[str]:
    """An API whose tenants may store no lexicon, and no byte of one."""
    full = settings.model_copy(update={"lexicons_per_tenant": 0, "lexicon_bytes_per_tenant": 1})
    with serve(create_app(full)) as url:
        yield url


def test_a_tenant_that_may_store_no_more_lexicons_still_hears_drafts(full_url: str) -> None:
    with httpx.Client(base_url=full_url, timeout=60) as client:
        refused = put(client, fresh_name(), pls("<lexeme><grapheme>Nguyen</grapheme><alias>win</alias></lexeme>"))
        assert refused.status_code == 422
        assert refused.json()["error"]["code"] == "lexicon_refused"
        assert len(samples(preview(client, DRAFT, format="wav"))) > 2 * len(spoken(client, TEXT))


@pytest.mark.parametrize(
    ("body", "status", "code", "message"),
    [
        (
            {
                "lexicon": {
                    "language": "en-US",
                    "entries": [{"graphemes": ["a"], "alias": "b"}, {"graphemes": ["Nguyen"], "phoneme": "ŋwi3n"}],
                }
            },
            422,
            "invalid_lexicon",
            "entries[1] ('Nguyen'): phoneme 'ŋwi3n' holds the digit '3'",
        ),
        (
            {"lexicon": {"language": "en-US", "entries": [{"graphemes": ["Nguyen"], "alias": "win", "stress": 1}]}},
            422,
            "invalid_lexicon",
            "entries[0] ('Nguyen'): unknown keys stress",
        ),
        (
            {"lexicon": {"language": "ja", "entries": [{"graphemes": ["今日"], "reading": "コンニチ"}]}},
            422,
            "lexicon_refused",
            "it is a 'ja' lexicon and voice",
        ),
        ({"lexicon": DRAFT, "text": "a" * 501}, 413, "text_too_long", "text has 501 characters; the limit is 500"),
        ({"lexicon": DRAFT, "voice": "nobody"}, 422, "voice_not_found", "unknown voice 'nobody'"),
    ],
)
def test_a_bad_draft_or_request_is_refused_naming_the_problem(
    client: httpx.Client, body: dict[str, Any], status: int, code: str, message: str
) -> None:
    answer = client.post("/v1/lexicon-preview", json={"text": TEXT, **body})
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert message in answer.json()["error"]["message"]


def test_a_japanese_reading_is_heard_through_a_preview(client: httpx.Client) -> None:
    """今日 is read キョー by the dictionary; the draft says コンニチ, two moras longer."""
    draft = {"language": "ja", "entries": [{"graphemes": ["今日"], "reading": "コンニチ"}]}
    heard = samples(preview(client, draft, "今日。", voice=JAPANESE_VOICE, format="wav"))
    assert len(heard) > len(spoken(client, "今日。", JAPANESE_VOICE)) * 1.2  # 1.6 when written
