"""The Wyoming server (``ttsq wyoming``) through the ``wyoming`` library's own client, in front of the
real stack: describe, synthesize, streamed text spoken sentence by sentence, and clients that go
away, send garbage or never finish a stream (their jobs end canceled, the server serves on)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psutil
import pytest
import redis
from pydantic import SecretStr
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe, Info
from wyoming.server import AsyncTcpServer
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from api.wyoming import events as wyoming_events
from api.wyoming import handler
from api.wyoming.server import WyomingService
from api.wyoming.speech import SAMPLES_PER_CHUNK
from cli.processes import ManagedProcess, free_port
from tests.conftest import wait_for
from tests.test_segment_jobs import NEARLY_FULL, PARAGRAPH
from tests.voices import MULTI_SPEAKER_VOICE_ID
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from ttsq.job_record import JobRecord, JobStatus
from ttsq.job_store import JobStore
from ttsq.settings import Settings, settings_env
from ttsq.tenants import Limits, TenantStore

SENTENCE = "The Wyoming server answers through the queue, one chunk at a time."
JAPANESE_VOICE_ID = "ja_JP-kokoro-jf_alpha"
READ_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Served:
    """A running Wyoming server and the tenant it speaks as."""

    host: str
    port: int
    tenant: str

    def client(self) -> AsyncTcpClient:
        return AsyncTcpClient(self.host, self.port, connect_timeout=5, read_timeout=READ_TIMEOUT_S)


@pytest.fixture(scope="module")
def tenant_key(settings: Settings) -> Iterator[tuple[str, str]]:
    """A key of its own, so the server's jobs can be told from the rest of the suite's."""
    client = redis.Redis.from_url(settings.redis_url)
    key, tenant = TenantStore(client).create(f"wyoming-{uuid.uuid4().hex[:6]}", Limits())
    yield key, tenant.id
    client.close()


@pytest.fixture(scope="module")
def wyoming(settings: Settings, worker: ManagedProcess, tenant_key: tuple[str, str]) -> Iterator[Served]:
    """The server on its own event loop in a thread, as ``ttsq wyoming`` runs it in its process."""
    key, tenant = tenant_key
    with serve_wyoming(settings.model_copy(update={"wyoming_api_key": SecretStr(key)}), tenant) as served:
        yield served


@contextmanager
def serve_wyoming(custom: Settings, tenant: str) -> Iterator[Served]:
    port = free_port()
    loop = asyncio.new_event_loop()
    service = loop.run_until_complete(WyomingService.open(custom))
    server = AsyncTcpServer("127.0.0.1", port)
    loop.run_until_complete(server.start(service.handler))
    thread = threading.Thread(target=loop.run_forever, name="wyoming-test-server", daemon=True)
    thread.start()
    try:
        yield Served("127.0.0.1", port, tenant)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        asyncio.run_coroutine_threadsafe(service.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def jobs(settings: Settings) -> Iterator[JobStore]:
    client = redis.Redis.from_url(settings.redis_url)
    yield JobStore(client, settings.job_ttl_s)
    client.close()


def wyoming_jobs(store: JobStore, tenant: str) -> list[JobRecord]:
    """The tenant's jobs that came through Wyoming, oldest first."""
    ids = [job_id for job_id, _ in store.tenant_page(tenant, None, 200)]
    records = [r for r in store.many(ids) if r is not None and r.metadata.get("source") == "wyoming"]
    return sorted(records, key=lambda r: r.created_at)


def finished(store: JobStore, job_id: str) -> JobRecord:
    """The job once it is finished: the last audio can reach the client before the worker's
    success write lands."""
    return wait_for(lambda: store.get(job_id), lambda job: job.status.terminal, 30, f"job {job_id} finished")


async def read_until(client: AsyncTcpClient, last: str, errors: bool = False) -> list[Event]:
    """Events up to and including the first of type ``last``; an error event before it fails the
    test unless ``errors``."""
    events: list[Event] = []
    while True:
        event = await client.read_event()
        assert event is not None, f"connection closed before {last}; got {[e.type for e in events]}"
        events.append(event)
        if event.type == last:
            return events
        assert errors or not Error.is_type(event.type), Error.from_event(event)


def audio_of(events: list[Event]) -> tuple[np.ndarray, int]:
    """The chunks' PCM as floats, and their one rate."""
    chunks = [AudioChunk.from_event(e) for e in events if AudioChunk.is_type(e.type)]
    assert chunks
    assert {(c.rate, c.width, c.channels) for c in chunks} == {(chunks[0].rate, 2, 1)}
    assert all(c.samples <= SAMPLES_PER_CHUNK for c in chunks)
    pcm = np.frombuffer(b"".join(c.audio for c in chunks), dtype="<i2").astype(np.float32) / 32768
    return pcm, chunks[0].rate


def is_speech(pcm: np.ndarray) -> bool:
    return bool(np.sqrt(np.mean(pcm**2)) > 0.01)


async def synthesize(served: Served, text: str, voice: SynthesizeVoice | None = None) -> list[Event]:
    async with served.client() as client:
        await client.write_event(Synthesize(text=text, voice=voice).event())
        return await read_until(client, AudioStop().event().type)


def test_describe_lists_every_voice_with_its_language_and_speakers(wyoming: Served, settings: Settings) -> None:
    async def describe() -> Info:
        async with wyoming.client() as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            assert event is not None
            return Info.from_event(event)

    info = asyncio.run(describe())
    assert len(info.tts) == 1
    program = info.tts[0]
    assert program.supports_synthesize_streaming
    voices = {voice.name: voice for voice in program.voices}
    catalog = VoiceCatalog.discover(settings.voices_dir)
    assert set(voices) == set(catalog.ids())
    assert voices[JAPANESE_VOICE_ID].languages == ["ja_JP"]
    assert voices[DEFAULT_VOICE_ID].languages == ["en_US"]
    assert voices[DEFAULT_VOICE_ID].speakers is None
    twins = voices[MULTI_SPEAKER_VOICE_ID].speakers
    assert twins is not None
    assert [s.name for s in twins] == list(catalog.get(MULTI_SPEAKER_VOICE_ID).speakers)


def test_synthesize_answers_with_speech_at_the_voices_rate(wyoming: Served, jobs: JobStore) -> None:
    events = asyncio.run(synthesize(wyoming, SENTENCE))
    start = AudioStart.from_event(events[0])
    assert (start.rate, start.width, start.channels) == (22050, 2, 1)
    assert AudioStop.is_type(events[-1].type)
    pcm, rate = audio_of(events)
    assert rate == 22050
    assert 2.0 < pcm.size / rate < 8.0, pcm.size / rate
    assert is_speech(pcm)
    job = finished(jobs, wyoming_jobs(jobs, wyoming.tenant)[-1].id)
    assert job.status is JobStatus.SUCCEEDED
    assert job.priority.value == "interactive"
    assert jobs.text(job.id) == SENTENCE


def test_a_long_text_arrives_in_many_chunks_of_the_same_speech_as_the_job(wyoming: Served) -> None:
    events = asyncio.run(synthesize(wyoming, f"Here we go. {NEARLY_FULL}"))
    pcm, rate = audio_of(events)
    assert 5.0 < pcm.size / rate < 20.0, pcm.size / rate  # about 10 s of speech, in two segments
    assert sum(AudioChunk.is_type(e.type) for e in events) > 100


def test_a_japanese_voice_speaks_at_24_khz(wyoming: Served) -> None:
    text = "吾輩は猫である。名前はまだ無い。"
    events = asyncio.run(synthesize(wyoming, text, SynthesizeVoice(name=JAPANESE_VOICE_ID)))
    pcm, rate = audio_of(events)
    assert rate == 24000
    assert 1.5 < pcm.size / rate < 8.0, pcm.size / rate
    assert is_speech(pcm)


def test_a_speaker_and_a_language_select_voices(wyoming: Served, jobs: JobStore) -> None:
    events = asyncio.run(synthesize(wyoming, SENTENCE, SynthesizeVoice(name=MULTI_SPEAKER_VOICE_ID, speaker="slow")))
    assert is_speech(audio_of(events)[0])
    job = wyoming_jobs(jobs, wyoming.tenant)[-1]
    assert (job.voice, job.options.speaker_id) == (MULTI_SPEAKER_VOICE_ID, 1)
    events = asyncio.run(synthesize(wyoming, "こんにちは。", SynthesizeVoice(language="ja-JP")))
    assert audio_of(events)[1] == 24000
    assert wyoming_jobs(jobs, wyoming.tenant)[-1].voice.startswith("ja_JP-")


def test_streamed_text_is_spoken_sentence_by_sentence_before_the_rest_is_sent(wyoming: Served, jobs: JobStore) -> None:
    """The first sentence's audio is read before the client has even sent the second sentence's end:
    audio that cannot have waited for the whole text."""
    before = {job.id for job in wyoming_jobs(jobs, wyoming.tenant)}

    async def stream() -> tuple[list[Event], list[Event]]:
        async with wyoming.client() as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="The first sentence is short. The sec").event())
            early = await read_until(client, AudioChunk(rate=0, width=2, channels=1, audio=b"").event().type)
            for text in ["ond sentence", " arrives later. And a third", " one ends it."]:
                await client.write_event(SynthesizeChunk(text=text).event())
            # Home Assistant also sends the whole text as a synthesize, for servers without streaming.
            await client.write_event(Synthesize(text="ignored inside a stream").event())
            await client.write_event(SynthesizeStop().event())
            rest = await read_until(client, SynthesizeStopped().event().type)
            return early, rest

    early, rest = asyncio.run(stream())
    assert [e.type for e in early] == ["audio-start", "audio-chunk"]
    events = early + rest
    assert [e.type for e in events if e.type != "audio-chunk"] == [
        *["audio-start", "audio-stop"] * 3,
        "synthesize-stopped",
    ]
    new = [job for job in wyoming_jobs(jobs, wyoming.tenant) if job.id not in before]
    assert [jobs.text(job.id) for job in new] == [
        "The first sentence is short.",
        "The second sentence arrives later.",
        "And a third one ends it.",
    ]
    assert all(finished(jobs, job.id).status is JobStatus.SUCCEEDED for job in new)
    assert is_speech(audio_of(events)[0])


def test_unknown_voice_is_an_error_event_and_the_connection_goes_on(wyoming: Served, jobs: JobStore) -> None:
    before = len(wyoming_jobs(jobs, wyoming.tenant))

    async def session() -> tuple[Error, Error, Error, list[Event]]:
        async with wyoming.client() as client:
            await client.write_event(Synthesize(text=SENTENCE, voice=SynthesizeVoice(name="xx_nobody")).event())
            unknown = Error.from_event((await read_until(client, "error"))[-1])
            await client.write_event(Synthesize(text="これは日本語です。").event())  # the English default voice
            unreadable = Error.from_event((await read_until(client, "error"))[-1])
            await client.write_event(Synthesize(text="   ").event())
            empty = Error.from_event((await read_until(client, "error"))[-1])
            await client.write_event(Synthesize(text=SENTENCE).event())
            return unknown, unreadable, empty, await read_until(client, "audio-stop")

    unknown, unreadable, empty, events = asyncio.run(session())
    assert unknown.code == "voice_not_found"
    assert "xx_nobody" in unknown.text
    assert unreadable.code == "unsupported_text"
    assert empty.code == "empty_text"
    assert is_speech(audio_of(events)[0])
    assert len(wyoming_jobs(jobs, wyoming.tenant)) == before + 1  # no job left behind by a refusal


def test_a_stream_over_the_text_limit_is_refused(wyoming: Served, settings: Settings) -> None:
    async def session() -> list[Event]:
        async with wyoming.client() as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="a" * (settings.max_text_chars + 1)).event())
            await client.write_event(SynthesizeStop().event())
            return await read_until(client, "synthesize-stopped", errors=True)

    events = asyncio.run(session())
    assert [e.type for e in events] == ["error", "synthesize-stopped"]
    assert Error.from_event(events[0]).code == "text_too_long"


def wait_canceled(jobs: JobStore, tenant: str, text: str) -> JobRecord:
    def newest() -> JobRecord:
        return next(job for job in reversed(wyoming_jobs(jobs, tenant)) if jobs.text(job.id) == text)

    return wait_for(newest, lambda job: job.status.terminal, 30, "the job finished")


@pytest.mark.parametrize("ending", ["close", "garbage"])
def test_a_client_gone_mid_speech_has_its_job_canceled_and_others_are_served(
    wyoming: Served, jobs: JobStore, ending: str
) -> None:
    text = f"{PARAGRAPH} ({ending})"

    async def leave() -> None:
        reader, writer = await asyncio.open_connection(wyoming.host, wyoming.port)
        await async_write_event(Synthesize(text=text).event(), writer)
        while (event := await asyncio.wait_for(async_read_event(reader), READ_TIMEOUT_S)) is not None:
            if AudioChunk.is_type(event.type):
                break
        if ending == "garbage":
            writer.write(b"\xff\xfe this is no JSON \x00\n")
            await writer.drain()
            await asyncio.wait_for(reader.read(), 30)  # returns at end of stream: the server closed its side
        writer.close()
        await writer.wait_closed()

    asyncio.run(leave())
    assert wait_canceled(jobs, wyoming.tenant, text).status is JobStatus.CANCELED
    assert is_speech(audio_of(asyncio.run(synthesize(wyoming, SENTENCE)))[0])


def test_a_stream_never_stopped_is_closed_and_its_job_canceled(
    wyoming: Served, jobs: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handler, "STREAM_IDLE_S", 1.0)
    text = f"(Never stopped.) {PARAGRAPH}"

    async def session() -> list[Event]:
        async with wyoming.client() as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text=f"{text} And an unfinished").event())
            events = []
            while (event := await client.read_event()) is not None:
                events.append(event)
            return events

    events = asyncio.run(session())
    errors = [Error.from_event(e) for e in events if Error.is_type(e.type)]
    assert [e.code for e in errors] == ["stream_timeout"]
    assert wait_canceled(jobs, wyoming.tenant, text).status is JobStatus.CANCELED
    texts = [jobs.text(job.id) for job in wyoming_jobs(jobs, wyoming.tenant)]
    assert not any("unfinished" in t for t in texts)  # the open sentence was never spoken


def test_ttsq_wyoming_refuses_to_start_without_a_key_where_keys_are_required(settings: Settings) -> None:
    """Both commands run at once: most of each is its imports and its start-up, one core's work."""
    refusals = {
        "TTSQ_WYOMING_API_KEY is not set": {"TTSQ_AUTH_REQUIRED": "true"},
        "selects no tenant": {"TTSQ_WYOMING_API_KEY": "ttsq_" + "x" * 43},
    }
    argv = [sys.executable, "-m", "cli.main", "wyoming", "--uri"]
    started = {
        message: subprocess.Popen(
            [*argv, f"tcp://127.0.0.1:{free_port()}"],
            env={**os.environ, **settings_env(settings), **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for message, extra in refusals.items()
    }
    try:
        for message, process in started.items():
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 1, stderr
            assert message in stderr
    finally:
        for process in started.values():
            process.kill()  # nothing, for one that has exited
            process.wait()


# Hostile clients: every size and wait a client controls is bounded, and bad fields are refused by name.

FLOOD_LINE = b'{"type": "describe"}\n'
FLOOD_GROWTH_LIMIT = 64 * 1024 * 1024
"""How much the server's process may grow while one client floods it with describes it never reads
the answers to: the answers it holds at most, with a wide margin; unbounded, 200,000 describes grew it
by 816 MiB."""


def rss() -> int:
    return psutil.Process().memory_info().rss


async def events_until_closed(reader: asyncio.StreamReader) -> list[Event]:
    """Every event the server sends until it closes the connection."""
    events = []
    while (event := await asyncio.wait_for(async_read_event(reader), READ_TIMEOUT_S)) is not None:
        events.append(event)
    return events


def raw_event(event_type: str, data: dict[str, object]) -> bytes:
    """An event as a client may write it, lone surrogates escaped (the library's writer cannot encode them)."""
    body = json.dumps(data).encode()
    return json.dumps({"type": event_type, "data_length": len(body)}).encode() + b"\n" + body


async def describe_answered(served: Served) -> bool:
    async with served.client() as client:
        await client.write_event(Describe().event())
        event = await client.read_event()
        return event is not None and Info.is_type(event.type)


def test_a_client_that_never_reads_stops_being_read_and_others_are_served(wyoming: Served) -> None:
    async def flood() -> tuple[bool, int, bool]:
        _reader, writer = await asyncio.open_connection(wyoming.host, wyoming.port)
        before = rss()
        stalled = False
        for _ in range(40):  # 400,000 describes, 8.4 MB: more than the sockets' buffers take
            writer.write(FLOOD_LINE * 10_000)
            try:
                await asyncio.wait_for(writer.drain(), 5)
            except TimeoutError:
                stalled = True
                break
        grown = rss() - before
        other = await describe_answered(wyoming)
        writer.transport.abort()
        return stalled, grown, other

    stalled, grown, other = asyncio.run(flood())
    assert grown < FLOOD_GROWTH_LIMIT, f"the server grew by {grown / 2**20:.0f} MiB"
    assert stalled, "the server read every describe of a client that reads no answer"
    assert other
    assert is_speech(audio_of(asyncio.run(synthesize(wyoming, SENTENCE)))[0])


@pytest.mark.parametrize(
    ("sent", "limit"),
    [
        (b'{"type": "synthesize", "data_length": 2000000000}\n', "data_length of 2000000000 bytes"),
        (b'{"type": "audio-chunk", "payload_length": 314572800}\n', "payload_length of 314572800 bytes"),
        (b'{"type": "describe", "padding": "' + b"a" * 100_000, "the header line"),
    ],
    ids=["data", "payload", "header"],
)
def test_an_event_over_a_size_limit_is_refused_before_it_is_read(wyoming: Served, sent: bytes, limit: str) -> None:
    async def session() -> list[Event]:
        reader, writer = await asyncio.open_connection(wyoming.host, wyoming.port)
        writer.write(sent)
        await writer.drain()
        try:
            return await events_until_closed(reader)
        finally:
            writer.close()

    events = asyncio.run(session())
    assert [e.type for e in events] == ["error"]
    error = Error.from_event(events[0])
    assert error.code == "event_too_large"
    assert limit in error.text, error.text
    assert "over the limit" in error.text, error.text
    assert asyncio.run(describe_answered(wyoming))


def test_an_event_declared_and_never_sent_whole_closes_the_connection(
    wyoming: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wyoming_events, "EVENT_READ_S", 1.0)

    async def session() -> list[Event]:
        reader, writer = await asyncio.open_connection(wyoming.host, wyoming.port)
        writer.write(b'{"type": "synthesize", "data_length": 100}\n{"text": ')
        await writer.drain()
        try:
            return await events_until_closed(reader)
        finally:
            writer.close()

    events = asyncio.run(session())
    assert [Error.from_event(e).code for e in events] == ["event_timeout"]


def test_connections_past_the_limit_are_told_so_and_closed(settings: Settings, worker: ManagedProcess) -> None:
    async def session(served: Served) -> tuple[list[Event], bool]:
        held = [await asyncio.open_connection(served.host, served.port) for _ in range(2)]
        for reader, writer in held:  # each answered: the server holds both
            await async_write_event(Describe().event(), writer)
            assert (answer := await async_read_event(reader)) is not None
            assert Info.is_type(answer.type)
        reader, writer = await asyncio.open_connection(served.host, served.port)
        refused = await events_until_closed(reader)
        for _, opened in [(reader, writer), held[0]]:
            opened.close()
            await opened.wait_closed()
        deadline = time.monotonic() + READ_TIMEOUT_S  # the server closes its side in its own time
        while not (served_again := await describe_answered(served)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        held[1][1].close()
        await held[1][1].wait_closed()
        return refused, served_again

    with serve_wyoming(settings.model_copy(update={"wyoming_max_connections": 2}), "anonymous") as served:
        refused, served_again = asyncio.run(session(served))
    assert [Error.from_event(e).code for e in refused] == ["too_many_connections"]
    assert "wyoming_max_connections" in Error.from_event(refused[0]).text
    assert served_again


BAD_FIELDS = [
    (
        "synthesize",
        {"text": SENTENCE, "voice": {"name": MULTI_SPEAKER_VOICE_ID, "speaker": "s" * 10_000}},
        "voice.speaker",
    ),
    ("synthesize", {"text": "A lone \udcff surrogate."}, "text"),
    ("synthesize", {"text": SENTENCE, "voice": {"name": "en_US\ud800"}}, "voice.name"),
    ("synthesize", {"text": SENTENCE, "voice": {"language": "en" * 5_000}}, "voice.language"),
    ("synthesize", {"text": SENTENCE, "voice": {"name": MULTI_SPEAKER_VOICE_ID, "speaker": 1}}, "voice.speaker"),
    ("synthesize", {"text": 42}, "text"),
    ("synthesize", {"text": SENTENCE, "voice": ["en_US"]}, "voice"),
    ("synthesize", {"text": SENTENCE, "text_format": "\udfff"}, "text_format"),
    ("synthesize", {"text": SENTENCE, "context": {"\ud800": 1}}, "context"),
    ("synthesize-start", {"voice": {"name": "x" * 10_000}}, "voice.name"),
    ("synthesize-chunk", {"text": "\ud83d"}, "text"),
]


@pytest.mark.parametrize(("event_type", "data", "field"), BAD_FIELDS)
def test_a_bad_field_is_refused_by_name_without_a_job_or_a_logged_error(
    wyoming: Served,
    jobs: JobStore,
    caplog: pytest.LogCaptureFixture,
    event_type: str,
    data: dict[str, object],
    field: str,
) -> None:
    before = len(wyoming_jobs(jobs, wyoming.tenant))

    async def session() -> list[Event]:
        async with wyoming.client() as client:
            assert client._writer is not None
            client._writer.write(raw_event(event_type, data))
            await client.write_event(Describe().event())  # the connection goes on
            return await read_until(client, "info", errors=True)

    events = asyncio.run(session())
    assert [e.type for e in events] == ["error", "info"]
    error = Error.from_event(events[0])
    assert error.code == "invalid_event"
    assert error.text.startswith(f"{event_type}: {field}"), error.text
    assert len(wyoming_jobs(jobs, wyoming.tenant)) == before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
