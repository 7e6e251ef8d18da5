"""``tracing``: the corpus end to end with OpenTelemetry tracing off and on (every trace sampled,
exported over OTLP/HTTP to a local sink), in alternating rounds on two stacks that differ only by
the standard ``OTEL_*`` variables; the median of the per-round throughput ratios (issue 39: on ≥ 0.97x
off). The sink accepts and counts what is exported, so a run shows that tracing was really on.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.stack import BenchStack
from cli.processes import free_port

EndToEnd = Callable[[BenchStack, list[str]], dict[str, Any]]


@dataclass
class SpanSink:
    """What the sink was sent: export requests and their bytes."""

    requests: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(sink: SpanSink) -> type[BaseHTTPRequestHandler]:
    class Export(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with sink.lock:
                sink.requests += 1
                sink.bytes += len(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Export


@contextmanager
def span_sink() -> Iterator[tuple[str, SpanSink]]:
    """An OTLP/HTTP endpoint on a free local port that answers every export with 200."""
    sink = SpanSink()
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _handler(sink))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", sink
    finally:
        server.shutdown()
        server.server_close()


def tracing(root: Path, texts: list[str], rounds: int, end_to_end: EndToEnd) -> dict[str, Any]:
    """Off and on, alternating, ``rounds`` each after a short warm-up round on each; the on stack
    samples every trace."""
    with span_sink() as (endpoint, sink):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_SAMPLER": "always_on"}
        off = BenchStack(root / "tracing-off")
        on = BenchStack(root / "tracing-on", env=env)
        try:
            for stack in (off, on):  # a first round on each, not counted: page cache, first model load
                end_to_end(stack, texts[:4])
                stack.stop_workers()
            offs: list[dict[str, Any]] = []
            ons: list[dict[str, Any]] = []
            for _ in range(rounds):
                for stack, runs in ((off, offs), (on, ons)):
                    runs.append(end_to_end(stack, texts))
                    stack.stop_workers()  # the other stack's round runs alone
        finally:
            off.close()
            on.close()
        ratios = [b["audio_per_wall"] / a["audio_per_wall"] for a, b in zip(offs, ons, strict=True)]
        return {
            "off_audio_per_wall": statistics.median(r["audio_per_wall"] for r in offs),
            "on_audio_per_wall": statistics.median(r["audio_per_wall"] for r in ons),
            "ratios": ratios,
            "ratio": statistics.median(ratios),
            "jobs": offs[0]["jobs"],
            "exports": sink.requests,
            "exported_bytes": sink.bytes,
        }


def tracing_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    label = f"tracing on (every trace, OTLP/HTTP) / off, end to end ({result['jobs']} jobs, goal >= 0.97x)"
    value = (
        f"**{result['ratio']:.2f}x** ({result['on_audio_per_wall']:.1f} against {result['off_audio_per_wall']:.1f}"
        f" s audio/s; {result['exports']} exports, {result['exported_bytes'] / 1024:.0f} KiB)"
    )
    return [(label, value)]
