"""``peer`` section: ttsq's interactive path against Piper's own synchronous HTTP server.

The peer is ``piper-tts`` (its Flask ``piper.http_server``) in a virtual environment of its own under
``.ttsq/bench/peer-venv``, made on first use from PyPI: piper-tts pulls the CPU ``onnxruntime``, which
must never land in ttsq's environment beside ``onnxruntime-gpu``. Both speak with the same model file
(ttsq's default voice). Three ways, same short texts, alternating request by request: the peer's
``POST /synthesize``; ttsq's ``POST /v1/audio/speech``; and submit + ``?wait=`` + audio download.
Then 8 concurrent clients on each, one way after the other.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

from bench import corpus
from bench.stack import BenchStack
from tts_core.catalog import DEFAULT_VOICE_ID, bundled_voices
from ttsq.ops.processes import ManagedProcess, free_port, wait_until

PEER_PACKAGE: Final = "piper-tts[http]==1.8.0"
PEER_VENV: Final = Path(".ttsq/bench/peer-venv")
WAV_HEADER_BYTES: Final = 44
CLIENTS: Final = 8

Request = Callable[[httpx.Client, str], bytes]
"""One way of turning text into audio bytes, with the client given."""


def peer_python(venv: Path = PEER_VENV) -> Path:
    """The peer's interpreter, installing piper-tts into its own venv the first time."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", PEER_PACKAGE], check=True)
    return python


class PeerServer:
    """Piper's HTTP server on a free port, with ttsq's default voice model."""

    def __init__(self, root: Path) -> None:
        model, _config = bundled_voices()[DEFAULT_VOICE_ID]
        self.port = free_port()
        argv = [str(peer_python()), "-m", "piper.http_server", "-m", str(model), "--host", "127.0.0.1",
                "--port", str(self.port), "--data-dir", str(model.parent)]  # fmt: skip
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


def peer_request(url: str) -> Request:
    def run(client: httpx.Client, text: str) -> bytes:
        response = client.post(f"{url}/synthesize", json={"text": text})
        response.raise_for_status()
        return response.content

    return run


def speech_request(url: str, keep: bool = True) -> Request:
    def run(client: httpx.Client, text: str) -> bytes:
        body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav", "keep": keep}
        response = client.post(f"{url}/v1/audio/speech", json=body)
        response.raise_for_status()
        return response.content

    return run


def submit_wait_fetch_request(url: str) -> Request:
    def run(client: httpx.Client, text: str) -> bytes:
        job = client.post(f"{url}/v1/jobs", json={"text": text, "format": "wav"}).json()
        done = client.get(f"{url}/v1/jobs/{job['id']}", params={"wait": 30}).json()
        if done["status"] != "succeeded":
            raise RuntimeError(f"job {job['id']} {done['status']}: {done['error']}")
        audio = client.get(f"{url}/v1/jobs/{job['id']}/audio", follow_redirects=True)
        audio.raise_for_status()
        return audio.content

    return run


def _ms_percentiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "n": len(values)}


def latency(ways: dict[str, Request], texts: list[str], rounds: int) -> dict[str, dict[str, float]]:
    """Each text through each way in turn, ``rounds`` times; text to last byte, in ms."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    with httpx.Client(timeout=60) as client:
        for way in ways.values():  # warm each path once
            way(client, texts[0])
        for _ in range(rounds):
            for text in texts:
                for name, way in ways.items():
                    started = time.perf_counter()
                    way(client, text)
                    times[name].append(1000 * (time.perf_counter() - started))
    return {name: _ms_percentiles(values) for name, values in times.items()}


def throughput(way: Request, texts: list[str], per_client: int, sample_rate: int) -> dict[str, float]:
    """``CLIENTS`` threads, each sending ``per_client`` texts back to back; requests and audio per second."""
    audio_bytes = [0] * CLIENTS
    errors: list[BaseException] = []

    def client_loop(index: int) -> None:
        with httpx.Client(timeout=120) as client:
            for n in range(per_client):
                try:
                    audio_bytes[index] += len(way(client, texts[(index + n) % len(texts)])) - WAV_HEADER_BYTES
                except (httpx.HTTPError, RuntimeError) as e:
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
    audio_s = sum(audio_bytes) / 2 / sample_rate
    return {"requests_per_s": CLIENTS * per_client / wall, "audio_per_wall": audio_s / wall, "wall_s": wall}


def time_to_first_byte(url: str, text: str) -> dict[str, float]:
    """The speech endpoint streaming a long text: first chunk and last chunk, in ms."""
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"}
    started = time.perf_counter()
    first = None
    size = 0
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=300) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes():
            if first is None:
                first = time.perf_counter()
            size += len(chunk)
    assert first is not None
    return {"characters": len(text), "first_byte_ms": 1000 * (first - started),
            "last_byte_ms": 1000 * (time.perf_counter() - started), "bytes": size}  # fmt: skip


def stages(stack: BenchStack, texts: list[str]) -> dict[str, float]:
    """Where a submit-wait-fetch request's milliseconds go (medians), from the client's clock and
    the job record (same host, same clock)."""
    rows: dict[str, list[float]] = {k: [] for k in ("api", "queue", "synthesis", "finish", "answer", "download")}
    with httpx.Client(base_url=stack.url, timeout=60) as client:
        for text in texts:
            t0 = time.time()
            job = client.post("/v1/jobs", json={"text": text, "format": "wav"}).json()
            client.get(f"/v1/jobs/{job['id']}", params={"wait": 30})
            t_answer = time.time()
            client.get(f"/v1/jobs/{job['id']}/audio", follow_redirects=True)
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


def peer(stack: BenchStack, root: Path, quick: bool) -> dict[str, Any]:
    stack.start_workers(1)
    texts = corpus.short_messages()
    server = PeerServer(root)
    try:
        ways = {
            "peer": peer_request(server.url),
            "speech": speech_request(stack.url),
            "submit_wait_fetch": submit_wait_fetch_request(stack.url),
        }
        lat = latency(ways, texts, 1 if quick else 3)
        per_client = 3 if quick else 8
        rate = 22050
        # The speech endpoint once more without storing the object, to show what storage costs.
        flow_ways = {**ways, "speech_keep_false": speech_request(stack.url, keep=False)}
        flows = {name: throughput(way, texts, per_client, rate) for name, way in flow_ways.items()}
    finally:
        server.stop()
    long_text = " ".join(corpus.paragraphs())[:2000]
    return {
        "latency_ms": lat,
        "speech_p50_over_peer": lat["speech"]["p50"] / lat["peer"]["p50"],
        "speech_p99_over_own_p50": lat["speech"]["p99"] / lat["speech"]["p50"],
        "swf_p50_over_peer": lat["submit_wait_fetch"]["p50"] / lat["peer"]["p50"],
        "throughput": flows,
        "speech_throughput_over_peer": flows["speech"]["audio_per_wall"] / flows["peer"]["audio_per_wall"],
        "swf_throughput_over_peer": flows["submit_wait_fetch"]["audio_per_wall"] / flows["peer"]["audio_per_wall"],
        "streaming_2000_chars": time_to_first_byte(stack.url, long_text),
        "stages_ms": stages(stack, texts[:10] if quick else texts),
    }
