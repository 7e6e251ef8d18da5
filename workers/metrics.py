"""A worker's own Prometheus metrics, and the small HTTP server that serves them with its probes.

Each worker process serves ``/metrics``, ``/healthz`` (the process and its batcher threads live) and
``/readyz`` (the model is loaded and Celery's consumer is ready) on ``TTSQ_WORKER__METRICS_PORT``.
The metrics live in a registry of their own, so Flower, which imports the task modules, never shows
them empty. Labels are devices, voices, lanes and error codes: never text, never job ids.

Every label value comes from a closed set: the device and lane enums, the batch size of the device's
plan, the voices of this worker's catalog and their model keys (a voice or model is labelled once
loaded, or once it made audio)
and the error classes' codes. The server labels nothing by request, and closes a connection idle for
:data:`IDLE_TIMEOUT_S`, since each open one holds a thread.
"""

from __future__ import annotations

import logging
import socketserver
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.process_collector import ProcessCollector

from tts_core.voices.batching import CallRecord

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S: Final = 5.0
"""A probe or scrape sends its request at once; a connection silent this long is closed."""

REGISTRY: Final = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

INFERENCE_SECONDS: Final = Histogram(
    "ttsq_inference_seconds",
    "Wall time of one inference call (a whole batch).",
    ["device", "lane"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
BATCH_SIZE: Final = Histogram(
    "ttsq_batch_size",
    "Items (utterances) in one inference call.",
    ["device", "lane"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
PADDING_SHARE: Final = Histogram(
    "ttsq_batch_padding_share",
    "Share of a call's padded input that was padding (compute spent on nothing).",
    ["device", "lane"],
    buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75),
    registry=REGISTRY,
)
AUDIO_SECONDS: Final = Counter(
    "ttsq_audio_seconds", "Seconds of speech produced by inference.", ["device", "voice"], registry=REGISTRY
)
REAL_TIME_FACTOR: Final = Histogram(
    "ttsq_real_time_factor",
    "Inference time over audio time of one call (lower is faster).",
    ["device"],
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2),
    registry=REGISTRY,
)
MODEL_LOAD_SECONDS: Final = Gauge(
    "ttsq_model_load_seconds", "Time to load and warm one voice.", ["device", "voice"], registry=REGISTRY
)
MODEL_LOADS: Final = Counter(
    "ttsq_model_loads",
    "Models loaded by this process (voices that are styles of one model load it once).",
    ["device", "model"],
    registry=REGISTRY,
)
MODEL_EVICTIONS: Final = Counter(
    "ttsq_model_evictions",
    "Models unloaded to stay within TTSQ_WORKER__MAX_LOADED_MODELS (least recently used first).",
    ["device", "model"],
    registry=REGISTRY,
)
MODELS_LOADED: Final = Gauge("ttsq_models_loaded", "Models this process holds now.", ["device"], registry=REGISTRY)
LEXICON_INDEXES: Final = Counter(
    "ttsq_lexicon_indexes",
    "Lexicon versions and operator lexicon files indexed for matching (once per version and process).",
    registry=REGISTRY,
)
TASK_FAILURES: Final = Counter(
    "ttsq_task_failures", "Job steps that failed their job, by error code.", ["code"], registry=REGISTRY
)
SEGMENTS_IN_FLIGHT: Final = Gauge(
    "ttsq_segments_in_flight", "Segments being synthesised in this process now.", ["device"], registry=REGISTRY
)
WORKER_INFO: Final = Gauge(
    "ttsq_worker_info", "Always 1; labels describe the worker.", ["device", "max_batch"], registry=REGISTRY
)


def observe_call(device: str, lane: str, sample_rate: int, record: CallRecord, voice: str) -> None:
    """Count one inference call of a batcher."""
    INFERENCE_SECONDS.labels(device, lane).observe(record.run_ms / 1000.0)
    BATCH_SIZE.labels(device, lane).observe(record.size)
    PADDING_SHARE.labels(device, lane).observe(record.padding_share)
    if record.ok and record.output_samples:
        audio_s = record.output_samples / sample_rate
        AUDIO_SECONDS.labels(device, voice).inc(audio_s)
        REAL_TIME_FACTOR.labels(device).observe(record.run_ms / 1000.0 / audio_s)


class WorkerProbes:
    """What ``/healthz`` and ``/readyz`` answer: set by the worker's start-up signals."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.healthy: Callable[[], bool] = lambda: True
        self.able: Callable[[], bool] = lambda: True
        """The worker's settings let it do the work (``workers.fitness``): ``/readyz`` only, since a
        restart would not fix them."""


PROBES: Final = WorkerProbes()


def _text(start_response: StartResponse, status: str, body: str) -> Iterable[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]


def make_app(probes: WorkerProbes) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """The worker's WSGI app: the Prometheus exposition plus the two probes."""
    metrics_app = make_wsgi_app(REGISTRY)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            exposition: Iterable[bytes] = metrics_app(environ, start_response)
            return exposition
        if path == "/healthz":
            ok = probes.healthy()
            return _text(start_response, "200 OK" if ok else "503 Service Unavailable", "ok\n" if ok else "unhealthy\n")
        if path == "/readyz":
            ready = probes.ready.is_set() and probes.healthy() and probes.able()
            return _text(start_response, "200 OK" if ready else "503 Service Unavailable", f"ready: {ready}\n")
        return _text(start_response, "404 Not Found", "not found: try /metrics, /healthz or /readyz\n")

    return app


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client silent past the timeout, or gone
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class _QuietHandler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: no log lines
        pass


def serve(port: int, host: str, probes: WorkerProbes = PROBES) -> WSGIServer | None:
    """Serve metrics and probes on ``port`` in a daemon thread; a port in use is logged, not fatal
    (the worker still works; its readiness probe then fails, which shows the problem)."""
    try:
        server = make_server(host, port, make_app(probes), _ThreadingServer, _QuietHandler)
    except OSError as e:
        log.error("worker metrics: cannot listen on port %d (%s); no /metrics, /healthz or /readyz", port, e)
        return None
    threading.Thread(target=server.serve_forever, name="ttsq-metrics", daemon=True).start()
    log.info("worker metrics and probes on http://%s:%d/metrics", host, port)
    return server
