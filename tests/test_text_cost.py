"""Text a tenant sends costs linear time wherever it is read, and is never read on an event loop
(issue 34, findings 5 and 6): through the real API and a real worker, a run of abbreviations is
accepted at once and planned; through the Wyoming server over TCP, one client's huge chunks do not
hold up another client's first audio.

The sentence split was quadratic on "a. a. a." and "Dr. Dr. Dr.": 150,000 characters took 30.6 s
in the API and 37 s of planning, and three streamed chunks of 60,000 characters held the Wyoming
server's event loop for two minutes. ``tests/test_text_linear.py`` bounds each step alone.
"""

from __future__ import annotations

import ast
import asyncio
import time
from pathlib import Path
from typing import Any, Final

import httpx
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart

from tests.conftest import wait_for
from tests.test_wyoming import SENTENCE, Served, read_until
from tests.test_wyoming import tenant_key as tenant_key  # a fixture the server needs
from tests.test_wyoming import wyoming as wyoming  # the Wyoming server, for this module
from ttsq.job_record import JobStatus

SUBMIT_S = 15.0
"""Longest a submit of 150,000 characters may take: well under a second of work now, where the
quadratic split took 30 s."""

FIRST_AUDIO_S = 45.0
"""Longest one Wyoming client may wait for its first audio while another streams huge chunks: a
short sentence's job (about a second) with room for a loaded machine (the suite's worker may still be
taking and skipping the segments of the job canceled before), where it waited 119.5 s."""


def test_a_long_run_of_abbreviations_is_accepted_at_once_and_planned(client: httpx.Client) -> None:
    """150,000 characters of one merged sentence: accepted within the bound, then planned by the
    worker (its plan stored, or refused by the segment limit naming it); the job is canceled then,
    its hour of audio not wanted here. "a. " here; the other runs ("Dr. ", "e.g. ", "A. b. ") go
    through the same check, split and planning in ``tests/test_text_linear.py``."""
    text = "a. " * 50_000
    answer = client.post("/v1/jobs", json={"text": text}, timeout=SUBMIT_S)
    assert answer.status_code == 202, answer.text[:300]
    job_id = answer.json()["id"]
    try:
        job = wait_for(lambda: client.get(f"/v1/jobs/{job_id}").json(), _planned, 90, f"job {job_id} planned")
    finally:
        client.delete(f"/v1/jobs/{job_id}")
    if job["status"] == JobStatus.FAILED.value:
        assert job["error"]["code"] == "plan_too_long", job["error"]
    else:
        assert job["progress"]["segments_total"] > 1, job["progress"]


def _planned(job: dict[str, Any]) -> bool:
    return job["progress"]["segments_total"] is not None or JobStatus(job["status"]).terminal


def test_one_client_streaming_huge_chunks_does_not_hold_up_another(wyoming: Served) -> None:
    """Client A streams three 60,000-character chunks of "a. a. " (one open sentence) and then asks
    for a ``describe``; client B, connecting as A's chunks are sent, gets its first audio within the
    bound, and A is answered too."""
    chunk = "a. " * 20_000

    async def stream(sent: asyncio.Event) -> Info:
        async with wyoming.client() as client:
            await client.write_event(SynthesizeStart().event())
            for _ in range(3):
                await client.write_event(SynthesizeChunk(text=chunk).event())
            sent.set()
            await client.write_event(Describe().event())  # answered once the chunks before it are read
            event = await client.read_event()
            assert event is not None
            assert Info.is_type(event.type), event
            return Info.from_event(event)

    async def first_audio_s(sent: asyncio.Event) -> float:
        await sent.wait()
        start = time.monotonic()
        async with wyoming.client() as client:
            await client.write_event(Synthesize(text=SENTENCE).event())
            await read_until(client, "audio-chunk")
        return time.monotonic() - start

    async def both() -> tuple[float, Info]:
        sent = asyncio.Event()
        waited = asyncio.wait_for(first_audio_s(sent), FIRST_AUDIO_S)
        return await asyncio.gather(waited, stream(sent))

    waited, info = asyncio.run(both())
    assert waited < FIRST_AUDIO_S
    assert info.tts


ROOT: Final = Path(__file__).resolve().parent.parent

TEXT_WORK: Final = frozenset(
    {
        "draft_job", "draft_batch", "parsed_text", "check_text", "normalize_text", "has_speech", "split_sentences",
        "sentences_of", "cut_long", "parse_ssml", "spoken_edits", "estimate_job", "text_silence", "check_speakable",
        "spoken_text", "audio_query", "accent_phrases",
    }
)  # fmt: skip
"""What reads a whole text (splitting, normalising, parsing, estimating, analysing): never called
on an event loop, where one tenant's long text would stop every other request and connection."""


def _called(node: ast.AST) -> set[str]:
    """Names of what ``node`` calls directly, outside functions defined inside it."""
    names: set[str] = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(child, ast.Call):
            func = child.func
            names.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "")
        names |= _called(child)
    return names


def text_work_on_the_loop(source: str) -> list[str]:
    """The ``async def`` functions of a module that call text work, directly or through the
    module's own plain functions (a name passed to ``run_in_threadpool`` is not a call)."""
    functions = [
        node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    blocking = set(TEXT_WORK)
    grown = True
    while grown:  # the module's plain functions that reach text work, to a fixed point
        reaching = {f.name for f in functions if isinstance(f, ast.FunctionDef) and _called(f) & blocking}
        grown = not reaching <= blocking
        blocking |= reaching
    return sorted(
        f"{f.name} calls {', '.join(sorted(_called(f) & blocking))}"
        for f in functions
        if isinstance(f, ast.AsyncFunctionDef) and _called(f) & blocking
    )


def test_no_async_function_of_the_api_reads_text_on_the_event_loop() -> None:
    found = {
        str(path.relative_to(ROOT)): on_loop
        for path in sorted((ROOT / "api").rglob("*.py"))
        if (on_loop := text_work_on_the_loop(path.read_text()))
    }
    assert found == {}


def test_the_event_loop_check_can_fail() -> None:
    source = """
def _check(text):
    check_text(text, 10)

async def route(text):
    _check(text)
    await run_in_threadpool(draft_job, text)
    return normalize_text(text)
"""
    assert text_work_on_the_loop(source) == ["route calls _check, normalize_text"]
