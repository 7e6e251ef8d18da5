"""Hostile request bodies through the real API: lone surrogates anywhere, bytes that are not UTF-8,
what ``json.loads`` accepts but JSON does not (NaN, Infinity), nesting without end, and values of the
wrong JSON type. Each is refused with a 4xx naming the field, never a 500, never stored mangled."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.conftest import IdleQueueApi

SPEECH = b'"model": "tts-1", "voice": "alloy"'
"""The speech body's other required fields, so that only the field under test is wrong."""


def post_raw(api: IdleQueueApi, path: str, body: bytes) -> Any:
    """POST bytes exactly as given: the JSON a client library would refuse to write."""
    return api.client.post(path, content=body, headers={"content-type": "application/json"})


SURROGATES: list[tuple[str, str, bytes, str]] = [
    ("text", "/v1/jobs", rb'{"text": "abc \udcff def"}', "text: contains a lone surrogate (U+DCFF) at position 4"),
    (
        "metadata value",
        "/v1/jobs",
        rb'{"text": "Hi.", "metadata": {"note": "x\ud800"}}',
        "metadata.note: contains a lone surrogate (U+D800) at position 1",
    ),
    (
        "metadata key",
        "/v1/jobs",
        rb'{"text": "Hi.", "metadata": {"k\udcff": 1}}',
        "metadata: a key contains a lone surrogate (U+DCFF) at position 1",
    ),
    (
        "nested metadata key",
        "/v1/jobs",
        rb'{"text": "Hi.", "metadata": {"a": [{"b": {"\udfffc": 1}}]}}',
        "metadata.a.0.b: a key contains a lone surrogate (U+DFFF) at position 0",
    ),
    (
        "voice",
        "/v1/jobs",
        rb'{"text": "Hi.", "voice": "\ud83d"}',
        "voice: contains a lone surrogate (U+D83D) at position 0",
    ),
    (
        "webhook_url",
        "/v1/jobs",
        rb'{"text": "Hi.", "webhook_url": "https://example.com/\udcff"}',
        "webhook_url: contains a lone surrogate (U+DCFF) at position 20",
    ),
    (
        "unknown field",
        "/v1/jobs",
        rb'{"text": "Hi.", "x\udcff": 1}',
        "body: a key contains a lone surrogate (U+DCFF) at position 1",
    ),
    (
        "speech input",
        "/v1/audio/speech",
        b"{" + SPEECH + rb', "input": "Hi \udcff"}',
        "input: contains a lone surrogate (U+DCFF) at position 3",
    ),
    (
        "speech voice",
        "/v1/audio/speech",
        rb'{"model": "tts-1", "input": "Hi.", "voice": {"id": "\udcff"}}',
        "voice.id: contains a lone surrogate (U+DCFF) at position 0",
    ),
    (
        "speech instructions",
        "/v1/audio/speech",
        b"{" + SPEECH + rb', "input": "Hi.", "instructions": "calm \udcff"}',
        "instructions: contains a lone surrogate (U+DCFF) at position 5",
    ),
    (
        # Not valid UTF-8 either, but json.loads decodes it with "surrogatepass": refused all the same.
        "surrogate as UTF-8 bytes",
        "/v1/jobs",
        b'{"text": "abc \xed\xb3\xbf def"}',
        "text: contains a lone surrogate (U+DCFF) at position 4",
    ),
]


@pytest.mark.parametrize(("path", "body", "message"), [s[1:] for s in SURROGATES], ids=[s[0] for s in SURROGATES])
def test_a_lone_surrogate_is_refused_naming_its_field(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis, path: str, body: bytes, message: str
) -> None:
    response = post_raw(idle_queue_api, path, body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == {"code": "invalid_request", "message": message}
    assert redis_client.llen(idle_queue_api.queue) == 0


def test_a_surrogate_pair_is_one_character_and_accepted(idle_queue_api: IdleQueueApi) -> None:
    response = post_raw(idle_queue_api, "/v1/jobs", rb'{"text": "Hi \ud83d\ude00", "metadata": {"\ud83d\ude00": "ok"}}')
    assert response.status_code == 202, response.text
    assert response.json()["characters"] == 4
    assert response.json()["metadata"] == {"\U0001f600": "ok"}


MALFORMED: list[tuple[str, bytes, str]] = [
    ("latin-1 byte", b'{"text": "caf\xe9"}', "invalid UTF-8 byte 0xe9 at position 13"),
    ("truncated sequence", b'{"text": "\xe2\x82"}', "invalid UTF-8 byte 0xe2 at position 10"),
    ("NaN", b'{"text": "Hi.", "speed": NaN}', "speed: NaN is not a JSON number"),
    ("Infinity in metadata", b'{"text": "Hi.", "metadata": {"x": [-Infinity]}}', "metadata.x.0: -Infinity is not"),
    (
        "nesting past the parser",
        b'{"text": "Hi.", "metadata": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        "nested",
    ),
]


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/audio/speech"])
@pytest.mark.parametrize(("body", "detail"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_what_is_not_json_is_malformed_json(idle_queue_api: IdleQueueApi, path: str, body: bytes, detail: str) -> None:
    response = post_raw(idle_queue_api, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "malformed_json"
    assert error["message"].startswith("request body is not valid JSON: ")
    assert detail in error["message"]


def test_nesting_is_bounded_below_what_the_parser_takes(idle_queue_api: IdleQueueApi) -> None:
    deep = b'{"text": "Hi.", "metadata": {"a": ' + b"[" * 40 + b"]" * 40 + b"}}"
    response = post_raw(idle_queue_api, "/v1/jobs", deep)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == "metadata.a" + ".0" * 31 + ": nested deeper than 32 levels"


WRONG_TYPES: list[tuple[str, str, dict[str, Any], str]] = [
    ("speed true", "/v1/jobs", {"text": "Hi.", "speed": True}, "speed: Input should be a valid number"),
    (
        "noise_scale true",
        "/v1/jobs",
        {"text": "Hi.", "noise_scale": True},
        "noise_scale: Input should be a valid number",
    ),
    ("noise_w false", "/v1/jobs", {"text": "Hi.", "noise_w": False}, "noise_w: Input should be a valid number"),
    ("noise_w a string", "/v1/jobs", {"text": "Hi.", "noise_w": "0.5"}, "noise_w: Input should be a valid number"),
    ("speaker true", "/v1/jobs", {"text": "Hi.", "speaker": True}, "speaker.int: Input should be a valid integer"),
    ("speaker 1.0", "/v1/jobs", {"text": "Hi.", "speaker": 1.0}, "speaker.int: Input should be a valid integer"),
    (
        "speech speed true",
        "/v1/audio/speech",
        {"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": True},
        "speed: Input should be a valid number",
    ),
    (
        "speech keep 0",
        "/v1/audio/speech",
        {"model": "tts-1", "voice": "alloy", "input": "Hi.", "keep": 0},
        "keep: Input should be a valid boolean",
    ),
]


@pytest.mark.parametrize(("path", "body", "message"), [w[1:] for w in WRONG_TYPES], ids=[w[0] for w in WRONG_TYPES])
def test_a_value_of_the_wrong_json_type_is_refused(
    idle_queue_api: IdleQueueApi, path: str, body: dict[str, Any], message: str
) -> None:
    response = idle_queue_api.client.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert message in response.json()["error"]["message"]


def test_a_boolean_wait_is_refused(idle_queue_api: IdleQueueApi) -> None:
    job = idle_queue_api.client.post("/v1/jobs", json={"text": "Waiting for nobody."}).json()
    response = idle_queue_api.client.get(f"/v1/jobs/{job['id']}", params={"wait": "true"})
    assert response.status_code == 422
    assert "wait: Input should be a valid number" in response.json()["error"]["message"]
