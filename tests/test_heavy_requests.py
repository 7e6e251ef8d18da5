"""A tenant's heavy requests (long texts, big lexicons) through the real API: read in the API's
helper processes at a low OS priority, their refusals as they were, and at most a share of them per
tenant at once (``api.heavy_work``, issue 34's noisy neighbour)."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import psutil
import pytest
import redis

from api.heavy_work import HEAVY_NICE
from api.main import create_app
from cli.commands import api_argv
from cli.embedded import LOOPBACK
from cli.processes import ManagedProcess, free_port, wait_until
from tests.conftest import serve
from ttsq.settings import Settings, settings_env
from ttsq.tenants import Limits, TenantStore

SHARE: Final = 1
"""Heavy requests of one tenant read at once by the API these tests run against."""
PROSE: Final = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
LONG_TEXT: Final = PROSE * 3000
"""213,000 characters: a heavy request at the default ``TTSQ_HEAVY_REQUEST_CHARS`` (20,000), read
in about a second."""
SPLIT_CODE: Final = "heavy_requests_exceeded"
QUOTA_CODE: Final = "chars_per_day_exceeded"


@pytest.fixture(scope="module")
def shared_url(settings: Settings, worker: ManagedProcess) -> Iterator[str]:
    """An API requiring keys, reading one heavy request of a tenant at once; its helper processes
    started with it, as by default."""
    assert len(LONG_TEXT) >= settings.heavy_request_chars
    OTHER_CHILDREN.update(child.pid for child in spawned())
    update = {"auth_required": True, "heavy_requests_per_tenant": SHARE, "heavy_processes_at_start": True}
    with serve(create_app(settings.model_copy(update=update))) as url:
        yield url


def keyed(url: str, settings: Settings, limits: Limits | None = None) -> httpx.Client:
    key, _ = TenantStore(redis.Redis.from_url(settings.redis_url)).create(
        f"heavy-{uuid.uuid4().hex[:6]}", limits or Limits()
    )
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


OTHER_CHILDREN: set[int] = set()
"""Processes spawned under this one before the module's API started: not its helpers (earlier
tests' pools in the same test process, such as the VOICEVOX analysis process, which runs un-niced)."""


def spawned() -> list[psutil.Process]:
    """The processes that ``multiprocessing`` spawned under this one to run work (its resource
    tracker is none of them)."""
    return [child for child in psutil.Process().children() if "spawn_main" in " ".join(child.cmdline())]


def helpers() -> list[psutil.Process]:
    """The helper processes of the module's API (which runs in this process's threads)."""
    return [child for child in spawned() if child.pid not in OTHER_CHILDREN]


def helpers_cpu_s() -> float:
    return sum(helper.cpu_times().user + helper.cpu_times().system for helper in helpers())


def helpers_niced(niceness: int) -> bool:
    """Whether every helper has started (its niceness set once it has imported what it needs)."""
    found = helpers()
    return bool(found) and all(os.getpriority(os.PRIO_PROCESS, helper.pid) == niceness for helper in found)


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def test_a_long_text_is_read_in_a_low_priority_process_and_keeps_its_answers(
    shared_url: str, settings: Settings
) -> None:
    """The job is made as from a request thread; the helper runs niced; what it refuses is
    answered with the same status, code and message as before (the errors cross the process)."""
    with keyed(shared_url, settings) as client:
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + HEAVY_NICE)
        wait_until(lambda: helpers_niced(niceness), 60, "the API's helper processes")
        before = helpers_cpu_s()
        accepted = client.post("/v1/jobs", json={"text": LONG_TEXT, "priority": "bulk"})
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["characters"] == len(LONG_TEXT)
        client.delete(f"/v1/jobs/{accepted.json()['id']}")
        assert helpers_cpu_s() - before > 0.05, "the helpers did not read the long text"

        empty = client.post("/v1/jobs", json={"text": "." * 30_000})
        assert (empty.status_code, error_code(empty)) == (422, "empty_text"), empty.text
        too_long = client.post("/v1/jobs", json={"text": "a" * (settings.max_text_chars + 1)})
        assert (too_long.status_code, error_code(too_long)) == (413, "text_too_long"), too_long.text
        assert str(settings.max_text_chars) in too_long.json()["error"]["message"]

        lexemes = "".join(f"<lexeme><grapheme>word{n}</grapheme><alias>word</alias></lexeme>" for n in range(400))
        document = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<lexicon version="1.0" '
            'xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">\n'
            f"{lexemes}<lexeme><grapheme>tsar</grapheme><phoneme>ʦɑɹ</phoneme></lexeme>\n</lexicon>\n"
        ).encode()
        assert len(document) >= settings.heavy_request_chars
        refused = client.put("/v1/lexicons/big", content=document, headers={"Content-Type": "application/pls+xml"})
        assert (refused.status_code, error_code(refused)) == (422, "lexicon_refused"), refused.text
        assert "'ʦ'" in refused.json()["error"]["message"]


def test_a_tenants_heavy_requests_past_its_share_are_refused_while_anothers_are_read(
    shared_url: str, settings: Settings
) -> None:
    """Six of A's long texts at once: one is read, one waits, the rest are answered 429 naming the
    limit, with a Retry-After; B's long text meanwhile is read (each tenant's day allows less than
    one text, so every text that is read is then refused by that quota, and nothing is queued)."""
    day = Limits(chars_per_day=1000)
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    start = threading.Barrier(7)

    def submit(client: httpx.Client) -> None:
        start.wait()
        answer = client.post("/v1/jobs", json={"text": LONG_TEXT})
        with lock:
            answers.append(answer)

    with keyed(shared_url, settings, day) as a, keyed(shared_url, settings, day) as b:
        threads = [threading.Thread(target=submit, args=(a,)) for _ in range(6)]
        for thread in threads:
            thread.start()
        start.wait()
        b_answer = b.post("/v1/jobs", json={"text": LONG_TEXT})
        for thread in threads:
            thread.join(120)
    codes = sorted(error_code(answer) for answer in answers)
    assert codes.count(SPLIT_CODE) >= 2, codes
    assert QUOTA_CODE in codes, codes  # read in its turn
    refused = next(answer for answer in answers if error_code(answer) == SPLIT_CODE)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "TTSQ_HEAVY_REQUESTS_PER_TENANT" in refused.json()["error"]["message"]
    assert (b_answer.status_code, error_code(b_answer)) == (429, QUOTA_CODE), b_answer.text


def test_without_a_start_the_helpers_start_with_the_first_long_text(settings: Settings) -> None:
    """``heavy_processes_at_start`` off (the suite's setting): no helper until a long text comes,
    which is then read in one, niced as at start."""
    assert not settings.heavy_processes_at_start
    before = {child.pid for child in spawned()}
    with serve(create_app(settings)) as url, httpx.Client(base_url=url, timeout=120) as client:
        assert client.get("/healthz").status_code == 200
        assert [child for child in spawned() if child.pid not in before] == [], "helpers started with the API"
        accepted = client.post("/v1/jobs", json={"text": LONG_TEXT, "priority": "bulk"})
        assert accepted.status_code == 202, accepted.text
        client.delete(f"/v1/jobs/{accepted.json()['id']}")
        started = [child for child in spawned() if child.pid not in before]
        assert started, "the long text was not read in a helper process"
        niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + HEAVY_NICE)
        assert all(os.getpriority(os.PRIO_PROCESS, child.pid) == niceness for child in started)


def test_the_helpers_end_with_a_killed_api(settings: Settings, tmp_path: Path) -> None:
    """An API process killed outright (SIGKILL, out of memory) closes no pool: its helpers see
    it gone and exit, instead of waiting for work forever."""
    env = {**os.environ, **settings_env(settings.model_copy(update={"heavy_processes_at_start": True}))}
    port = free_port()
    api = ManagedProcess("api", api_argv(LOOPBACK, port), tmp_path / "api.log", env).start()
    try:
        wait_until(lambda: httpx.get(f"http://{LOOPBACK}:{port}/healthz").status_code == 200, 60, "API", api)
        wait_until(lambda: len(psutil.Process(api.pid).children()) >= settings.heavy_request_processes, 60, "helpers")
        spawned = [child for child in psutil.Process(api.pid).children() if "spawn_main" in " ".join(child.cmdline())]
        assert len(spawned) == settings.heavy_request_processes
        api.kill(signal.SIGKILL)
    finally:
        api.stop()
    wait_until(
        lambda: not any(helper.is_running() and helper.status() != psutil.STATUS_ZOMBIE for helper in spawned),
        30,
        "helpers gone",
    )
