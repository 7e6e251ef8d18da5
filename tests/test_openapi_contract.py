"""The served OpenAPI document states the limits the server enforces, following its settings, and
every error answer it can give; the answers agree with it (tests/test_schemathesis.py fuzzes that)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from api.main import create_app
from api.schemas import MAX_METADATA_BYTES, MAX_WEBHOOK_URL_CHARS
from tests.conftest import serve
from ttsq.constants import consumed_queues
from ttsq.settings import Settings

MAX_CHARS = 50
"""A limit of this server's own, so that the document is seen to follow the setting."""


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[httpx.Client]:
    """On a queue no worker reads, with a small ``max_text_chars``."""
    small = settings.model_copy(
        update={"queue": f"contract-{uuid.uuid4().hex[:8]}", "model_affinity": False, "max_text_chars": MAX_CHARS}
    )
    # A pooled connection is dropped after 1 s idle: uvicorn closes its own after 5 s, and a request
    # sent on one it is closing meets a reset (seen when a loaded machine stretches a test's gap).
    keepalive = httpx.Limits(keepalive_expiry=1.0)
    with serve(create_app(small)) as url, httpx.Client(base_url=url, timeout=30, limits=keepalive) as client:
        yield client
    cleanup = redis.Redis.from_url(small.redis_url)
    cleanup.delete(*consumed_queues(small.queue))
    cleanup.close()


@pytest.fixture(scope="module")
def document(api: httpx.Client) -> dict[str, Any]:
    response = api.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def test_the_document_states_the_text_limits_of_this_server(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    text = schemas["JobCreate"]["properties"]["text"]
    assert (text["minLength"], text["maxLength"]) == (1, 10 * MAX_CHARS)
    assert "plain text of 1 to 50 characters" in text["description"]
    assert "SSML document of up to 500 characters and 1,000 tags" in text["description"]
    assert "whose spoken text has at most 50." in text["description"]
    speech_input = schemas["SpeechCreate"]["properties"]["input"]
    assert (speech_input["minLength"], speech_input["maxLength"]) == (1, MAX_CHARS)
    job = schemas["JobCreate"]["properties"]
    assert {"type": "string", "minLength": 1, "maxLength": 200} in job["speaker"]["anyOf"]
    assert {"type": "string", "maxLength": MAX_WEBHOOK_URL_CHARS} in job["webhook_url"]["anyOf"]
    assert f"at most {MAX_METADATA_BYTES} bytes as JSON" in job["metadata"]["description"]
    assert schemas["JobCreate"]["additionalProperties"] is False


def ssml(size: int) -> str:
    """An SSML document of exactly ``size`` characters that speaks two words."""
    document = "<speak>Hello there.</speak>"
    return document + " " * (size - len(document))


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/jobs", {"text": "a" * MAX_CHARS}, 202),
        ("/v1/jobs", {"text": "a" * (MAX_CHARS + 1)}, 413),
        ("/v1/jobs", {"text": ""}, 422),
        ("/v1/jobs", {"text": ssml(10 * MAX_CHARS), "text_type": "ssml"}, 202),
        ("/v1/jobs", {"text": ssml(10 * MAX_CHARS + 1), "text_type": "ssml"}, 413),
        ("/v1/audio/speech", {"model": "tts-1", "voice": "alloy", "input": "a" * (MAX_CHARS + 1)}, 413),
        ("/v1/audio/speech", {"model": "tts-1", "voice": "alloy", "input": ""}, 422),
    ],
)
def test_the_server_refuses_what_the_document_calls_too_long(
    api: httpx.Client, path: str, body: dict[str, Any], status: int
) -> None:
    response = api.post(path, json=body)
    assert response.status_code == status, response.text


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method.upper(), operation


def test_every_error_answer_is_documented_with_the_error_body(document: dict[str, Any]) -> None:
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorPublic"}}}
    for path, method, operation in operations(document):
        responses = operation["responses"]
        expected = {"500"} | ({"401", "429", "503"} if path.startswith("/v1/") else set())
        if "requestBody" in operation:
            expected |= {"400", "413", "422"}
        assert expected <= set(responses), f"{method} {path}: {sorted(responses)}"
        for code, response in responses.items():
            if int(code) >= 400 and (path, code) != ("/readyz", "503"):
                assert response["content"] == error_body, f"{method} {path} {code}"
            if code == "503":
                assert response["headers"]["Retry-After"]["required"] is True
        assert not any(p["name"].lower() == "content-type" for p in operation.get("parameters", []))
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_api_keys_are_optional_where_the_server_does_not_require_them(document: dict[str, Any]) -> None:
    secured = [operation for _, _, operation in operations(document) if "security" in operation]
    assert secured
    assert all({} in operation["security"] for operation in secured)


def test_a_wrong_method_is_told_every_method_of_the_path(api: httpx.Client, document: dict[str, Any]) -> None:
    response = api.request("PATCH", f"/v1/jobs/{uuid.uuid4()}")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    allowed = {method.strip() for method in response.headers["allow"].split(",")}
    assert {method.upper() for method in document["paths"]["/v1/jobs/{job_id}"]} <= allowed


def test_an_unexpected_failure_is_a_500_that_tells_nothing(settings: Settings) -> None:
    app = create_app(settings)

    @app.get("/explode")
    def explode() -> None:
        raise RuntimeError("cannot reach 10.1.2.3:6379")

    with serve(app) as url:
        response = httpx.get(f"{url}/explode")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal error; the server's log has the details"}
    }
