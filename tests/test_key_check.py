"""Keys are checked before bodies are read: where keys are required, a request to any route that
takes a tenant and carries no live key is answered 401 while its body is still unsent, so that
unauthenticated clients cannot make the API receive and parse large bodies."""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import redis
from fastapi import FastAPI

from api.deps import current_tenant
from api.key_check import endpoints
from api.main import create_app
from api.voicevox.app import PREFIX as VOICEVOX_PREFIX
from api.voicevox.deps import voicevox_tenant
from tests.conftest import serve
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore

DECLARED_BYTES = 10_000_000
"""A body the client announces (under the body cap, so the 413 check does not answer first) and
never sends: a server that waits for it before its 401 never answers."""

ANSWER_WAIT_S = 20.0
"""How long the client waits for the 401: the body never comes, so no answer in this time means
the server is waiting for it."""

BODY_METHODS = ("POST", "PUT", "PATCH")


@pytest.fixture(scope="module")
def keyed(settings: Settings) -> Iterator[tuple[FastAPI, str, str]]:
    """An API that requires keys (no worker needed: nothing here gets as far as a job), a live key."""
    app = create_app(settings.model_copy(update={"auth_required": True}))
    client = redis.Redis.from_url(settings.redis_url)
    key, _ = TenantStore(client).create(f"keycheck-{uuid.uuid4().hex[:6]}", Limits())
    with serve(app) as url:
        yield app, url, key
    client.close()


def body_routes(app: FastAPI, dependency: Callable[..., Any], prefix: str = "") -> list[tuple[str, str]]:
    """(method, path) of every route taking a body that depends on the tenant, path parameters filled."""
    found = []
    for endpoint in endpoints(app.routes, dependency):
        if endpoint.needs_key:
            path = prefix + re.sub(r"\(\?P<[^>]+>[^)]+\)", str(uuid.uuid4()), endpoint.pattern.pattern[1:-1])
            found += [(method, path.replace("\\", "")) for method in sorted(endpoint.methods & set(BODY_METHODS))]
    return found


def send_unfinished(url: str, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """Send the request's head and the first bytes of a body of ``DECLARED_BYTES``, then wait for
    the answer: its status and body."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    assert port is not None
    head = [f"{method} {path}?text=a&speaker=0 HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    head += [f"Content-Length: {DECLARED_BYTES}", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection((host, port), timeout=ANSWER_WAIT_S) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b'{"text": "')
        received = b""
        while b"\r\n\r\n" not in received:
            received += _recv(sock)
        answer_head, _, body = received.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", answer_head).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += _recv(sock)
    return int(answer_head.split()[1]), body


def _recv(sock: socket.socket) -> bytes:
    try:
        data = sock.recv(65536)
    except TimeoutError:
        pytest.fail(f"no answer within {ANSWER_WAIT_S:g} s: the server waits for the body before checking the key")
    assert data, "the server closed the connection without an answer"
    return data


def test_every_keyed_route_refuses_a_missing_or_unknown_key_before_reading_the_body(
    keyed: tuple[FastAPI, str, str],
) -> None:
    app, url, _ = keyed
    voicevox: FastAPI = app.state.voicevox
    routes = body_routes(app, current_tenant) + body_routes(voicevox, voicevox_tenant, VOICEVOX_PREFIX)
    paths = {path.split("/")[2] if path.startswith("/v1/") else path for _, path in routes}
    assert {"jobs", "batches", "audio", "lexicons", f"{VOICEVOX_PREFIX}/synthesis"} <= paths, paths
    assert f"{VOICEVOX_PREFIX}/connect_waves" in paths
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer ttsq_" + "x" * 43}):
            status, body = send_unfinished(url, method, path, headers)
            assert status == 401, (method, path, body)
            answer = json.loads(body)
            if path.startswith(VOICEVOX_PREFIX):
                assert "API key" in answer["detail"], answer
            else:
                assert answer["error"]["code"] == "unauthorized", answer
                reason = "no API key given" if not headers else "unknown or revoked"
                assert reason in answer["error"]["message"], answer


def test_a_live_key_reaches_the_route_and_public_routes_stay_open(keyed: tuple[FastAPI, str, str]) -> None:
    _, url, key = keyed
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/openapi.json").status_code == 200
        assert client.post("/v1/jobs", json={}).status_code == 401
        counted = 'handler="/v1/jobs",method="POST",status="401"'
        assert counted in client.get("/metrics").text  # answered before the route, measured all the same
        refused = client.post("/v1/jobs", json={}, headers={"Authorization": f"Bearer {key}"})
        assert refused.status_code == 422, refused.text  # past the key: the body was read and checked
        query = client.post(
            f"{VOICEVOX_PREFIX}/audio_query",
            params={"text": "", "speaker": 0},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert query.status_code != 401, query.text
