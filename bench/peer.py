"""``peer`` section: ttsq's interactive path against Piper's own synchronous HTTP server.

The peer is ``piper-tts`` (its Flask ``piper.http_server``) in a virtual environment of its own under
``.ttsq/bench/peer-venv``, made on first use from PyPI: piper-tts pulls the CPU ``onnxruntime``, which
must never land in ttsq's environment beside ``onnxruntime-gpu``. Both speak with the same model file
(ttsq's default voice) and the same pause between sentences. Three ways, same short texts, alternating
request by request: the peer's ``POST /synthesize``; ttsq's ``POST /v1/audio/speech``; and submit +
``?wait=`` + audio download. Then 8 concurrent clients on each, one way after the other.

A way the API does not offer (404 on its first request, as before ``/v1/audio/speech`` existed) is
recorded under ``missing`` with the answer it got, and left out of the figures rather than faked.
"""

from __future__ import annotations

import os
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from bench import corpus
from bench.stack import BenchStack, Submitted
from bench.submit_keys import bench_client
from cli.processes import ManagedProcess, free_port, wait_until
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.piper_engine import piper_source
from ttsq.job_record import JobStatus
from ttsq.settings import Settings

PEER_PACKAGE: Final = "piper-tts[http]==1.8.0"
"""Pinned so runs compare; 1.8.0 installs on Python 3.11-3.13 and serves ``POST /synthesize`` (JSON)."""
PEER_VENV: Final = Path(__file__).resolve().parents[1] / ".ttsq" / "bench" / "peer-venv"
CLIENTS: Final = 8
WAIT_S: Final = 30
STREAM_CHARS: Final = 2000

Request = Callable[[httpx.Client, str], bytes]
"""One way of turning text into WAV bytes, with the client given."""


class Missing(Exception):
    """The API under test does not offer this way (404/405): recorded as missing, not measured."""


def peer_python(venv: Path = PEER_VENV) -> Path:
    """The peer's interpreter, installing piper-tts into its own venv unless a finished install of
    the same package spec is there (the stamp is written last, so an interrupted install is redone)."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.is_file() and stamp.read_text() == PEER_PACKAGE:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", PEER_PACKAGE], check=True)
    stamp.write_text(PEER_PACKAGE)
    return python


class PeerServer:
    """Piper's HTTP server on a free port, with the model file of ttsq's default voice."""

    def __init__(self, root: Path, settings: Settings) -> None:
        voice = VoiceCatalog.discover(settings.voices_dir).get(settings.default_voice)
        self.model = piper_source(voice).model_path
        self.port = free_port()
        # --data-dir: where it would look up voices by name; the model is given by path, so nothing downloads.
        argv = [str(peer_python()), "-m", "piper.http_server", "-m", str(self.model), "--host", "127.0.0.1",
                "--port", str(self.port), "--data-dir", str(self.model.parent),
                "--sentence-silence", str(settings.sentence_pause_s)]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTSQ_")}
        self.process = ManagedProcess("piper-http", argv, root / "peer.log", env).start()
        self.url = f"http://127.0.0.1:{self.port}"
        wait_until(self._answers, 120, "piper http server", self.process)

    def _answers(self) -> bool:
        try:
            return httpx.post(f"{self.url}/synthesize", json={"text": "Ready."}, timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.process.stop()


def wav_audio_s(data: bytes) -> float:
    """Seconds of audio in a PCM WAV: the format from its ``fmt`` chunk, the length from the bytes
    after the ``data`` chunk header (a streamed WAV's sizes are placeholders)."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"not a WAV file: {data[:12]!r}")
    offset, frame_rate = 12, 0
    while offset + 8 <= len(data):
        chunk, size = data[offset : offset + 4], int.from_bytes(data[offset + 4 : offset + 8], "little")
        body = offset + 8
        if chunk == b"fmt ":
            _tag, _channels, rate, _byte_rate, block_align = struct.unpack_from("<HHIIH", data, body)
            frame_rate = rate * block_align
        elif chunk == b"data" and frame_rate:
            return (len(data) - body) / frame_rate
        offset = body + size + (size & 1)
    raise ValueError("WAV without fmt and data chunks")


def _offered(response: httpx.Response) -> httpx.Response:
    if response.status_code in (404, 405):
        request = response.request
        raise Missing(f"{request.method} {request.url.path}: {response.status_code} {response.text[:200]}")
    return response.raise_for_status()


def peer_request(url: str) -> Request:
    def run(client: httpx.Client, text: str) -> bytes:
        return client.post(f"{url}/synthesize", json={"text": text}).raise_for_status().content

    return run


def speech_request(url: str, keep: bool = True) -> Request:
    def run(client: httpx.Client, text: str) -> bytes:
        body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav", "keep": keep}
        return _offered(client.post(f"{url}/v1/audio/speech", json=body)).content

    return run


def wait_terminal(client: httpx.Client, url: str, job_id: str) -> dict[str, Any]:
    """The job once terminal: ``?wait=`` answers at the end, or when the wait runs out (or at once,
    from an API that ignores it), so ask again until it is."""
    while True:
        job: dict[str, Any] = client.get(f"{url}/v1/jobs/{job_id}", params={"wait": WAIT_S}).raise_for_status().json()
        if JobStatus(job["status"]).terminal:
            return job


def submit_wait_fetch_request(url: str) -> Request:
    def run(client: httpx.Client, text: str) -> bytes:
        job = client.post(f"{url}/v1/jobs", json={"text": text, "format": "wav"}).raise_for_status().json()
        done = wait_terminal(client, url, job["id"])
        if done["status"] != JobStatus.SUCCEEDED:
            raise RuntimeError(f"job {job['id']} {done['status']}: {done['error']}")
        return client.get(f"{url}/v1/jobs/{job['id']}/audio", follow_redirects=True).raise_for_status().content

    return run


def _ms_percentiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "n": len(values)}


def offered_ways(ways: dict[str, Request], text: str) -> tuple[dict[str, Request], dict[str, str]]:
    """Each way warmed once; those answering 404/405 set apart with what they answered."""
    offered, missing = {}, {}
    with bench_client(timeout=60) as client:
        for name, way in ways.items():
            try:
                wav_audio_s(way(client, text))
                offered[name] = way
            except Missing as e:
                missing[name] = str(e)
    return offered, missing


SETTLE_S: Final = 0.1
"""Pause before each request of :func:`alternating`, so that each meets an idle machine. Without it a
request pays for the one before it: the peer's ONNX Runtime threads spin on after every call (its
default; about 40 ms of a core in the 200 ms after a request, measured), and a ttsq job stores its
object and record after its answer has left."""


def alternating(
    ways: dict[str, Request], texts: list[str], rounds: int, settle_s: float = SETTLE_S
) -> dict[str, list[float]]:
    """Each text through each way in turn, ``rounds`` times: text to last byte in ms, request by
    request, so the i-th time of every way is the same text at about the same moment; ``settle_s``
    before each request (0: back to back)."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    with bench_client(timeout=60) as client:
        for _ in range(rounds):
            for text in texts:
                for name, way in ways.items():
                    time.sleep(settle_s)
                    started = time.perf_counter()
                    way(client, text)
                    times[name].append(1000 * (time.perf_counter() - started))
    return times


def latency(
    ways: dict[str, Request], texts: list[str], rounds: int, settle_s: float = SETTLE_S
) -> dict[str, dict[str, float]]:
    """Percentiles of :func:`alternating`, and each way's paired median over the peer's (the median
    of request-by-request ratios: the machine's drift cancels out of each pair)."""
    times = alternating(ways, texts, rounds, settle_s)
    found = {name: _ms_percentiles(values) for name, values in times.items()}
    for name, values in times.items():
        if name != "peer":
            found[name]["paired_over_peer"] = paired_median(values, times["peer"])
    return found


def paired_median(ours: list[float], theirs: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


MESSAGES: Final = (
    "OK.",
    "Your order has shipped.",
    "Meeting moved to three pm.",
    "Good morning, here is the news.",
    "Please call me back when you can.",
    "The build passed on the first try.",
)
"""Notification-style messages of growing length: what the speech endpoint adds beside the peer,
message by message, tells a fixed cost from one that grows with the audio (issue 38)."""
MESSAGE_ROUNDS: Final = 12


def per_message(ways: dict[str, Request], rounds: int) -> dict[str, dict[str, float]]:
    """Each of :data:`MESSAGES`, ``rounds`` times through the peer and the speech endpoint,
    alternating: median ms of each, and the speech endpoint's extra time."""
    found: dict[str, dict[str, float]] = {}
    for message in MESSAGES:
        times = alternating({name: ways[name] for name in ("peer", "speech")}, [message], rounds)
        peer_ms, speech_ms = statistics.median(times["peer"]), statistics.median(times["speech"])
        found[message] = {"peer_ms": peer_ms, "speech_ms": speech_ms, "extra_ms": speech_ms - peer_ms}
    return found


def throughput(way: Request, texts: list[str], per_client: int) -> dict[str, float]:
    """``CLIENTS`` threads, each sending ``per_client`` texts back to back; requests and audio per second."""
    audio_s = [0.0] * CLIENTS
    errors: list[BaseException] = []

    def client_loop(index: int) -> None:
        with bench_client(timeout=120) as client:
            for n in range(per_client):
                try:
                    audio_s[index] += wav_audio_s(way(client, texts[(index + n) % len(texts)]))
                except (httpx.HTTPError, RuntimeError, ValueError) as e:
                    errors.append(e)

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, first: {errors[0]!r}")
    return {"requests": CLIENTS * per_client, "requests_per_s": CLIENTS * per_client / wall,
            "audio_s": sum(audio_s), "audio_per_wall": sum(audio_s) / wall, "wall_s": wall}  # fmt: skip


def stream_text(limit: int = STREAM_CHARS) -> str:
    """Whole sentences of the corpus paragraphs, up to about ``limit`` characters."""
    text = " ".join(corpus.paragraphs())[:limit]
    return text[: text.rfind(". ") + 1] or text


@dataclass(frozen=True)
class SpeechTiming:
    """One answer of the speech endpoint, timed by the client."""

    first_s: float
    """Request sent to first byte of audio."""
    last_s: float
    """Request sent to last byte."""
    data: bytes
    job_id: str
    """The job behind the answer (``x-ttsq-job-id``)."""
    arrivals: tuple[tuple[float, int], ...] = ()
    """Each chunk: seconds since the request was sent, and the answer's bytes so far."""

    @property
    def stall_s(self) -> float:
        """:func:`playback_stall_s` of this answer."""
        return playback_stall_s(self.arrivals, self.data)


WAV_HEADER_BYTES: Final = 44


def playback_stall_s(arrivals: Sequence[tuple[float, int]], data: bytes) -> float:
    """Seconds a listener who plays a streamed WAV from its first audio waits in all after it: each
    chunk against the moment the audio that came before it has been played."""
    byte_rate = int.from_bytes(data[28:32], "little")
    waited, runs_out, heard = 0.0, None, 0.0
    for at, total in arrivals:
        audio = max(0, total - WAV_HEADER_BYTES) / byte_rate
        if audio <= heard:
            continue
        if runs_out is not None and at > runs_out:
            waited += at - runs_out
        runs_out = (at if runs_out is None else max(runs_out, at)) + audio - heard
        heard = audio
    return waited


def speech_timing(url: str, voice: str, text: str) -> SpeechTiming:
    """One WAV answer of the speech endpoint on a new connection, timed. The client is made before the
    clock starts: making an ``httpx.Client`` (its TLS context, certificates read even for plain HTTP)
    takes about 30 ms here, which is the client's cost, not the server's, and which a real client
    pays once, not per request."""
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": "wav"}
    data = bytearray()
    arrivals: list[tuple[float, int]] = []
    with httpx.Client(timeout=300) as client:
        started = time.perf_counter()
        with client.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                data += chunk
                arrivals.append((time.perf_counter() - started, len(data)))
            job_id = response.headers["x-ttsq-job-id"]
    assert arrivals
    return SpeechTiming(arrivals[0][0], time.perf_counter() - started, bytes(data), job_id, tuple(arrivals))


def time_to_first_byte(url: str, text: str) -> dict[str, float]:
    """The speech endpoint streaming a long text: first chunk and last chunk, in ms."""
    timing = speech_timing(url, "alloy", text)
    return {"characters": len(text), "first_byte_ms": 1000 * timing.first_s, "last_byte_ms": 1000 * timing.last_s,
            "bytes": len(timing.data), "audio_s": wav_audio_s(timing.data)}  # fmt: skip


def stages(stack: BenchStack, texts: list[str]) -> dict[str, float]:
    """Where a submit-wait-fetch request's milliseconds go (medians), from the client's clock and
    the job record (same host, same clock): API (submit -> created_at), queue (created -> started,
    what ``progress.queued_ms`` counts), synthesis, finish (started -> finished minus synthesis:
    encode, upload, record), answer (finished -> the long poll's answer), download (the audio)."""
    rows: dict[str, list[float]] = {k: [] for k in ("api", "queue", "synthesis", "finish", "answer", "download")}
    with bench_client(timeout=60) as client:
        for text in texts:
            t0 = time.time()
            job = client.post(f"{stack.url}/v1/jobs", json={"text": text, "format": "wav"}).raise_for_status().json()
            wait_terminal(client, stack.url, job["id"])
            t_answer = time.time()
            client.get(f"{stack.url}/v1/jobs/{job['id']}/audio", follow_redirects=True).raise_for_status()
            t_done = time.time()
            record = stack.jobs.get(job["id"])
            assert record.started_at is not None
            assert record.finished_at is not None
            created, started, finished = (
                d.timestamp() for d in (record.created_at, record.started_at, record.finished_at)
            )
            synthesis = (record.progress.synthesis_ms or 0) / 1000
            rows["api"].append(created - t0)
            rows["queue"].append(started - created)
            rows["synthesis"].append(synthesis)
            rows["finish"].append(finished - started - synthesis)
            rows["answer"].append(t_answer - finished)
            rows["download"].append(t_done - t_answer)
    return {name: 1000 * statistics.median(values) for name, values in rows.items()}


def speech_stages(stack: BenchStack, texts: list[str]) -> dict[str, float]:
    """Where a speech request's milliseconds go (medians), from the client's clock and the job
    record: API (request sent -> record created), queue (created -> started), synthesis (the model
    calls), rest (started -> last byte, less synthesis: planning, the part's store and
    announcement, the API's read and answer)."""
    rows: dict[str, list[float]] = {k: [] for k in ("api", "queue", "synthesis", "rest", "total")}
    with bench_client(timeout=60) as client:
        for text in texts:
            sent = time.time()
            job_id = speech_job(client, stack.url, text)
            answered = time.time()
            record = stack.jobs.get(job_id)
            assert record.started_at is not None
            created, started = record.created_at.timestamp(), record.started_at.timestamp()
            stack.wait_all([Submitted(job_id, 0.0)])  # its object stored: the next starts on an idle service
            synthesis = (stack.jobs.get(job_id).progress.synthesis_ms or 0) / 1000
            rows["api"].append(created - sent)
            rows["queue"].append(started - created)
            rows["synthesis"].append(synthesis)
            rows["rest"].append(answered - started - synthesis)
            rows["total"].append(answered - sent)
    return {name: 1000 * statistics.median(values) for name, values in rows.items()}


def speech_job(client: httpx.Client, url: str, text: str) -> str:
    """One WAV answer of the speech endpoint, read whole; its job's id."""
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"}
    response = _offered(client.post(f"{url}/v1/audio/speech", json=body))
    return response.headers["x-ttsq-job-id"]


def _ratio(numerator: dict[str, Any] | None, denominator: dict[str, Any], key: str) -> float | None:
    return numerator[key] / denominator[key] if numerator is not None else None


def summary(lat: dict[str, dict[str, float]], flows: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """The ratios the goals are stated in; None where the way is missing."""
    speech, swf, peer_lat = lat.get("speech"), lat.get("submit_wait_fetch"), lat["peer"]
    return {
        "speech_p50_over_peer": _ratio(speech, peer_lat, "p50"),
        "speech_p99_over_own_p50": speech["p99"] / speech["p50"] if speech else None,
        "swf_p50_over_peer": _ratio(swf, peer_lat, "p50"),
        "speech_paired_over_peer": speech.get("paired_over_peer") if speech else None,
        "swf_paired_over_peer": swf.get("paired_over_peer") if swf else None,
        "speech_throughput_over_peer": _ratio(flows.get("speech"), flows["peer"], "audio_per_wall"),
        "swf_throughput_over_peer": _ratio(flows.get("submit_wait_fetch"), flows["peer"], "audio_per_wall"),
    }


def peer(stack: BenchStack, root: Path, quick: bool) -> dict[str, Any]:
    settings = stack.start_workers(1)
    texts = corpus.short_messages()
    server = PeerServer(root, settings)
    try:
        ways, missing = offered_ways(
            {
                "peer": peer_request(server.url),
                "speech": speech_request(stack.url),
                "submit_wait_fetch": submit_wait_fetch_request(stack.url),
                # Once more without storing the object (throughput only), to show what storage costs.
                "speech_keep_false": speech_request(stack.url, keep=False),
            },
            texts[0],
        )
        latency_ways = {k: w for k, w in ways.items() if k != "speech_keep_false"}
        lat = latency(latency_ways, texts, 1 if quick else 3)
        back_to_back = latency(latency_ways, texts, 1, settle_s=0.0)
        messages = per_message(ways, 3 if quick else MESSAGE_ROUNDS) if "speech" in ways else {}
        flows = {name: throughput(way, texts, 3 if quick else 8) for name, way in ways.items()}
    finally:
        server.stop()
    return {
        "peer_package": PEER_PACKAGE,
        "model": str(server.model),
        "texts": len(texts),
        "missing": missing,
        "latency_ms": lat,
        "settle_s": SETTLE_S,
        "back_to_back_ms": back_to_back,
        **summary(lat, flows),
        "throughput": flows,
        "streaming_2000_chars": None if "speech" in missing else time_to_first_byte(stack.url, stream_text()),
        "stages_ms": stages(stack, texts[:10] if quick else texts),
        "messages_ms": messages,
        "speech_stages_ms": None if "speech" in missing else speech_stages(stack, texts[:10] if quick else texts),
    }
