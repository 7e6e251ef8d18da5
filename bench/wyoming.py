"""``wyoming`` section: how soon a Wyoming client hears the first audio, against Piper's own HTTP server's
whole answer for the same text.

Both speak with ttsq's default voice's model file. The Wyoming server (``ttsq wyoming``, a process of its
own in front of the bench stack and one worker) is asked with the ``wyoming`` library's client; the time
is from connecting to the first ``audio-chunk``, and the rest of the answer is read too (through
``audio-stop``) before the next request. Piper's server (``bench.peer.PeerServer``) answers
``POST /synthesize`` with the whole WAV, its only way. Alternating request by request on the short
messages; p50 and p99 of each, and their ratios.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any, Final

import httpx
from wyoming.audio import AudioChunk, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe
from wyoming.tts import Synthesize

from bench import corpus
from bench.peer import PeerServer, peer_request
from bench.peer import _ms_percentiles as ms_percentiles
from bench.stack import BenchStack
from cli.commands import wyoming_argv
from cli.processes import ManagedProcess, free_port, wait_until
from ttsq.settings import settings_env

HOST: Final = "127.0.0.1"
READ_TIMEOUT_S: Final = 60.0


def wyoming(stack: BenchStack, root: Path, quick: bool) -> dict[str, Any]:
    settings = stack.start_workers(1)
    texts = corpus.short_messages()
    port = free_port()
    env = {**os.environ, **settings_env(settings)}
    server = ManagedProcess("wyoming", wyoming_argv(f"tcp://{HOST}:{port}"), root / "wyoming.log", env).start()
    peer = PeerServer(root, settings)
    try:
        wait_until(lambda: _answers(port), 60, "wyoming server", server)
        ask_peer = peer_request(peer.url)
        first_chunk: list[float] = []
        whole: list[float] = []
        with httpx.Client(timeout=60) as client:
            ask_peer(client, texts[0])  # both warm: the voice loaded on each side
            asyncio.run(_first_chunk_ms(port, texts[0]))
            for _ in range(1 if quick else 3):
                for text in texts:
                    first_chunk.append(asyncio.run(_first_chunk_ms(port, text)))
                    started = time.perf_counter()
                    ask_peer(client, text)
                    whole.append(1000 * (time.perf_counter() - started))
    finally:
        peer.stop()
        server.stop()
    ttfc, peer_ms = ms_percentiles(first_chunk), ms_percentiles(whole)
    return {
        "texts": len(texts),
        "wyoming_first_chunk_ms": ttfc,
        "peer_whole_ms": peer_ms,
        "ratio_p50": ttfc["p50"] / peer_ms["p50"],
        "ratio_p99": ttfc["p99"] / peer_ms["p99"],
    }


def _answers(port: int) -> bool:
    """A describe answered: the server has its clients and checked its key."""
    try:
        return asyncio.run(_describe(port))
    except OSError:
        return False


async def _describe(port: int) -> bool:
    async with AsyncTcpClient(HOST, port, connect_timeout=2, read_timeout=5) as client:
        await client.write_event(Describe().event())
        event = await client.read_event()
        return event is not None and event.type == "info"


async def _first_chunk_ms(port: int, text: str) -> float:
    """Connect, synthesize, time to the first audio chunk; then read the rest of the answer."""
    started = time.perf_counter()
    first: float | None = None
    async with AsyncTcpClient(HOST, port, connect_timeout=5, read_timeout=READ_TIMEOUT_S) as client:
        await client.write_event(Synthesize(text=text).event())
        while (event := await client.read_event()) is not None:
            if first is None and AudioChunk.is_type(event.type):
                first = 1000 * (time.perf_counter() - started)
            if AudioStop.is_type(event.type):
                break
            if event.type == "error":
                raise RuntimeError(f"wyoming error: {event.data}")
    if first is None:
        raise RuntimeError("no audio chunk")
    return first


def wyoming_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    ttfc, peer = result["wyoming_first_chunk_ms"], result["peer_whole_ms"]
    return [
        (
            f"Wyoming time to first chunk ({result['texts']} short texts)",
            f"p50 {ttfc['p50']:.0f} ms, p99 {ttfc['p99']:.0f} ms",
        ),
        (
            "Piper HTTP server, whole answer (same texts)",
            f"p50 {peer['p50']:.0f} ms, p99 {peer['p99']:.0f} ms; Wyoming/Piper **{result['ratio_p50']:.2f}x** p50, "
            f"{result['ratio_p99']:.2f}x p99",
        ),
    ]
