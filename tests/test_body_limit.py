"""Request bodies over the cap (``max_request_bytes``, by default derived from ``max_text_chars``) are
refused with 413 before any parsing, whether they declare their length or stream in chunks, and the
API process does not grow by what they carry; the longest text fits however it is escaped."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from cli.commands import api_argv
from cli.processes import ManagedProcess, free_port, wait_until
from ttsq.constants import consumed_queues
from ttsq.settings import Settings, settings_env

HUGE_BYTES = 150 * 1024 * 1024
CHUNK = b"x" * (1024 * 1024)
MAX_GROWTH_BYTES = 64 * 1024 * 1024
MAX_CHARS = 10_000
"""A small ``max_text_chars``, so that the derived cap (12 bytes a character plus 64 KiB) is small too."""


@dataclass(frozen=True)
class ApiProcess:
    """The API in a uvicorn process of its own, as deployed, so that its memory can be read."""

    process: ManagedProcess
    url: str
    settings: Settings

    def rss_bytes(self) -> int:
        """VmRSS of the process, from /proc (kB there)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS line")


@pytest.fixture(scope="module")
def api_process(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    """On a queue no worker reads: accepted jobs stay queued and cost nothing. The body cap is the
    one derived from ``MAX_CHARS``."""
    idle = settings.model_copy(
        update={
            "queue": f"idle-{uuid.uuid4().hex[:8]}",
            "model_affinity": False,
            "max_text_chars": MAX_CHARS,
            "max_request_bytes": None,
        }
    )
    port = free_port()
    env = {**os.environ, **settings_env(idle)}
    log_path = tmp_path_factory.mktemp("api") / "api.log"
    process = ManagedProcess("body-limit-api", api_argv("127.0.0.1", port), log_path, env).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{url}/healthz").status_code == 200, 60, "API", process)
        yield ApiProcess(process, url, idle)
    finally:
        process.stop()
        client = redis.Redis.from_url(idle.redis_url)
        client.delete(*consumed_queues(idle.queue))
        client.close()


class PeakRss:
    """The highest RSS of the process while the block runs, sampled every few milliseconds."""

    def __init__(self, api: ApiProcess) -> None:
        self._api = api
        self._done = threading.Event()
        self.before = api.rss_bytes()
        self.peak = self.before
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, self._api.rss_bytes())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._api.rss_bytes())

    @property
    def growth(self) -> int:
        return self.peak - self.before


def huge_body() -> Iterator[bytes]:
    for _ in range(HUGE_BYTES // len(CHUNK)):
        yield CHUNK


def padded_job(size: int) -> bytes:
    """A valid job request of exactly ``size`` bytes: JSON allows any whitespace between tokens."""
    head, tail = b'{"text": "A body just under the cap.",', b'"priority": "bulk"}'
    return head + b" " * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize(
    "headers",
    [{}, {"content-length": str(HUGE_BYTES)}],
    ids=["chunked", "content-length"],
)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/audio/speech"])
def test_a_huge_body_is_refused_without_growing_the_api(
    api_process: ApiProcess, headers: dict[str, str], path: str
) -> None:
    httpx.get(f"{api_process.url}/v1/voices")  # warm: the first answers allocate what every later one reuses
    with PeakRss(api_process) as rss:
        response = httpx.post(
            f"{api_process.url}{path}",
            content=huge_body(),
            headers={"content-type": "application/json", **headers},
            timeout=120,
        )
    assert response.status_code == 413, response.text
    limit = api_process.settings.request_bytes_limit
    assert response.json()["error"]["code"] == "request_too_large"
    assert f"larger than the limit of {limit} bytes" in response.json()["error"]["message"]
    assert rss.growth < MAX_GROWTH_BYTES, f"the API grew by {rss.growth / 2**20:.0f} MiB"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_at_the_cap_is_accepted_and_one_byte_more_is_not(api_process: ApiProcess, chunked: bool) -> None:
    limit = api_process.settings.request_bytes_limit

    def post(body: bytes) -> httpx.Response:
        content: Any = iter([body[: len(body) // 2], body[len(body) // 2 :]]) if chunked else body
        return httpx.post(
            f"{api_process.url}/v1/jobs", content=content, headers={"content-type": "application/json"}, timeout=30
        )

    accepted = post(padded_job(limit))
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["status"] == "queued"
    refused = post(padded_job(limit + 1))
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "request_too_large"


def test_the_cap_follows_max_text_chars(api_process: ApiProcess) -> None:
    assert api_process.settings.request_bytes_limit == 12 * MAX_CHARS + 64 * 1024


def post_json(api: ApiProcess, path: str, body: object) -> httpx.Response:
    """``body`` as Python's ``json`` writes it by default: every non-ASCII character escaped."""
    content = json.dumps(body).encode("ascii")
    return httpx.post(f"{api.url}{path}", content=content, headers={"content-type": "application/json"}, timeout=30)


def test_the_longest_text_fits_the_cap_at_its_worst_escaping(api_process: ApiProcess) -> None:
    """``max_text_chars`` characters, all but one an emoji escaped as a surrogate pair (12 bytes):
    accepted; one character more is refused for its length (text_too_long), not for its bytes."""
    longest = "A" + "\U0001f600" * (MAX_CHARS - 1)
    accepted = post_json(api_process, "/v1/jobs", {"text": longest})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["characters"] == MAX_CHARS
    refused = post_json(api_process, "/v1/jobs", {"text": longest + "\U0001f600"})
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"]["code"] == "text_too_long"


def test_a_batch_over_the_cap_is_refused_whole(api_process: ApiProcess) -> None:
    """A batch's items share the one body cap: each item's text is within ``max_text_chars``, but
    together they pass the cap, so the whole body is refused before parsing and no job exists."""
    items = [{"text": "A" * MAX_CHARS, "ref": str(n)} for n in range(20)]
    body = json.dumps({"items": items}).encode()
    assert len(body) > api_process.settings.request_bytes_limit
    response = post_json(api_process, "/v1/batches", {"items": items})
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "request_too_large"
    assert f"limit of {api_process.settings.request_bytes_limit} bytes" in response.json()["error"]["message"]
