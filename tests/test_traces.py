"""One trace per job: an API process and a worker process exporting over OTLP/HTTP to a real receiver
(the protobuf decoded with ``opentelemetry-proto``); spans parented across the processes, the S3
calls among them, one inference call's id in every job it served, a redelivered step in the same
trace, a caller's ``traceparent`` continued, JSON log lines joined by trace id. Tracing off: no
exporter thread."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from api.main import create_app
from cli.commands import api_argv
from cli.processes import wait_until
from tests.conftest import enqueue, serve, start_on_a_free_port, start_worker, stop_all, wait_for_job
from tests.test_json_logs import SECRET_WORDS, json_lines
from tests.test_segment_jobs import THREE_SEGMENTS
from ttsq.settings import Settings, settings_env


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class Receiver:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` with an ``ExportTraceServiceRequest``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def add(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(
                                service=resource["service.name"],
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_id=span.parent_span_id.hex(),
                                attributes={a.key: _value(a.value) for a in span.attributes},
                            )
                        )

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class TracedStack:
    receiver: Receiver
    client: httpx.Client
    settings: Settings
    api_log: Path
    worker_log: Path


@pytest.fixture(scope="module")
def traced(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedStack]:
    """An API process and a worker process on a queue of their own, both exporting to the receiver and
    logging JSON. The worker batches up to 4 segments, an item waiting 300 ms for company, so the
    segments of two jobs sent together share inference calls."""
    folder = tmp_path_factory.mktemp("traces")
    worker = settings.worker.model_copy(update={"max_batch": 4, "max_wait_ms": 300.0})
    own = settings.model_copy(update={"queue": f"traces-{uuid.uuid4().hex[:8]}", "worker": worker})
    with Receiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # spans reach the receiver within a tenth of a second
            "TTSQ_LOG_FORMAT": "json",
        }
        worker_log = folder / "worker.log"
        processes = [start_worker(own, worker_log, "traced-worker", env)]
        try:
            api_env = {**os.environ, **settings_env(own), **env}
            api, url = start_on_a_free_port(
                "traced-api", lambda port: api_argv("127.0.0.1", port), folder / "api.log", api_env, "/healthz"
            )
            processes.append(api)
            with httpx.Client(base_url=url, timeout=30) as client:
                yield TracedStack(receiver, client, own, folder / "api.log", worker_log)
        finally:
            stop_all(processes)


def _wait_for_spans(receiver: Receiver, trace_id: str, *names: str) -> list[ReceivedSpan]:
    """The trace's spans once every name in ``names`` arrived (as many times as it is named)."""
    wanted = {name: names.count(name) for name in names}

    def arrived() -> bool:
        got = [s.name for s in receiver.of_trace(trace_id)]
        return all(got.count(name) >= count for name, count in wanted.items())

    wait_until(arrived, 30, f"spans {wanted} of trace {trace_id}")
    return receiver.of_trace(trace_id)


def _submit(stack: TracedStack, text: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    answer = stack.client.post("/v1/jobs", json={"text": text, "priority": "bulk"}, headers=headers or {})
    assert answer.status_code == 202, answer.text
    job: dict[str, Any] = answer.json()
    assert job["trace_id"] is not None
    assert answer.headers["traceparent"].split("-")[1] == job["trace_id"]
    return job


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    found = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        found.append(span)
    return found


STEP_SPANS = ("ttsq.entry", "ttsq.segment", "ttsq.segment", "ttsq.segment", "ttsq.assemble")


def test_a_job_is_one_trace_across_the_api_and_the_worker(traced: TracedStack) -> None:
    job = _submit(traced, THREE_SEGMENTS)
    done = wait_for_job(traced.client, job["id"])
    assert done["status"] == "succeeded"
    assert done["progress"]["segments_total"] == 3
    assert done["trace_id"] == job["trace_id"]
    spans = _wait_for_spans(traced.receiver, job["trace_id"], "POST /v1/jobs", *STEP_SPANS, "S3.PutObject")
    by_id = {s.span_id: s for s in spans}

    (request,) = [s for s in spans if s.name == "POST /v1/jobs"]
    assert request.service == "ttsq-api"
    assert request.parent_id == ""  # the trace's root: no caller's context
    assert request.attributes["http.response.status_code"] == 202
    (entry,) = [s for s in spans if s.name == "ttsq.entry"]
    assert entry.service == "ttsq-worker"
    # across processes, through the task message: under the request (in FastAPI's endpoint span)
    assert request in _ancestors(entry, by_id)
    assert by_id[entry.parent_id].service == "ttsq-api"
    assert entry.attributes["ttsq.job.id"] == job["id"]
    assert entry.attributes["ttsq.step.unended_starts"] == 1  # no earlier run died in it
    assert entry.attributes["messaging.message.redelivered"] is False
    assert entry.attributes["ttsq.tenant.id"] == "anonymous"
    (plan,) = [s for s in spans if s.name == "ttsq.plan"]
    assert plan.parent_id == entry.span_id
    assert plan.attributes["ttsq.segments"] == 3

    segments = sorted((s for s in spans if s.name == "ttsq.segment"), key=lambda s: s.attributes["ttsq.segment.index"])
    assert [s.attributes["ttsq.segment.index"] for s in segments] == [0, 1, 2]
    assert all(s.parent_id == entry.span_id for s in segments)  # sent by the entry's fan-out
    synthesized = [s for s in spans if s.name == "ttsq.synthesize"]
    assert sorted(by_id[s.parent_id].attributes["ttsq.segment.index"] for s in synthesized) == [0, 1, 2]
    for span in synthesized:
        assert span.attributes["ttsq.voice"] == done["voice"]
        assert span.attributes["ttsq.batch.call_ids"]
        assert all(size >= 1 for size in span.attributes["ttsq.batch.sizes"])
        assert all(ms > 0 for ms in span.attributes["ttsq.batch.call_ms"])

    (assemble,) = [s for s in spans if s.name == "ttsq.assemble"]
    assert by_id[assemble.parent_id].name == "ttsq.segment"  # sent by the segment that finished last
    (encode,) = [s for s in spans if s.name == "ttsq.encode"]
    assert encode.parent_id == assemble.span_id
    (upload,) = [s for s in spans if s.name == "S3.PutObject"]
    assert upload.parent_id == assemble.span_id
    assert upload.attributes["aws.s3.key"] == done["result"]["key"]
    assert upload.attributes["ttsq.bytes"] == done["result"]["bytes"]


def test_a_redelivered_step_is_a_second_attempt_in_the_same_trace(traced: TracedStack) -> None:
    """The entry task delivered again (as the sweeper or a lost acknowledgement would) carries no trace
    context of its own: its step continues the job's, from the record."""
    job = _submit(traced, "A short job, delivered twice.")
    assert wait_for_job(traced.client, job["id"])["status"] == "succeeded"
    enqueue(traced.settings, job["id"])
    spans = _wait_for_spans(traced.receiver, job["trace_id"], "ttsq.entry", "ttsq.entry")
    entries = [s for s in spans if s.name == "ttsq.entry"]
    assert len({s.attributes["ttsq.step.attempt_id"] for s in entries}) == 2
    assert {s.attributes["celery.task_id"] for s in entries} > {job["id"]}  # two messages, the API's first
    assert entries[1].parent_id == entries[0].parent_id  # the record's context: the submitting request's


def test_one_inference_call_serving_two_jobs_shows_in_both_traces(traced: TracedStack) -> None:
    first, second = _submit(traced, THREE_SEGMENTS), _submit(traced, THREE_SEGMENTS)
    assert first["trace_id"] != second["trace_id"]
    for job in (first, second):
        assert wait_for_job(traced.client, job["id"])["status"] == "succeeded"

    def calls(job: dict[str, Any]) -> dict[str, int]:
        spans = _wait_for_spans(traced.receiver, job["trace_id"], *(["ttsq.synthesize"] * 3))
        found: dict[str, int] = {}
        for span in (s for s in spans if s.name == "ttsq.synthesize"):
            found.update(zip(span.attributes["ttsq.batch.call_ids"], span.attributes["ttsq.batch.sizes"], strict=True))
        return found

    shared = calls(first).keys() & calls(second).keys()
    assert shared, "no inference call served both jobs"
    assert all(calls(first)[call] >= 2 for call in shared)


def test_a_callers_traceparent_is_continued(traced: TracedStack) -> None:
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    job = _submit(traced, "Continue my trace.", {"traceparent": f"00-{caller_trace}-{caller_span}-01"})
    assert job["trace_id"] == caller_trace
    assert wait_for_job(traced.client, job["id"])["trace_id"] == caller_trace
    spans = _wait_for_spans(traced.receiver, caller_trace, "POST /v1/jobs", "ttsq.entry")
    (request,) = [s for s in spans if s.name == "POST /v1/jobs"]
    assert request.parent_id == caller_span


def test_json_logs_of_a_job_join_by_trace_id(traced: TracedStack) -> None:
    job = _submit(traced, f"{SECRET_WORDS} and {THREE_SEGMENTS}")
    assert wait_for_job(traced.client, job["id"])["status"] == "succeeded"
    trace_id = job["trace_id"]

    def lines(path: Path) -> list[dict[str, Any]]:
        return [r for r in json_lines(path) if r.get("trace_id") == trace_id]

    wait_until(lambda: any("succeeded" in r["message"] for r in lines(traced.worker_log)), 30, "the worker's lines")
    api_lines, worker_lines = lines(traced.api_log), lines(traced.worker_log)
    assert any(f"job {job['id']} queued" in r["message"] for r in api_lines)
    assert any(f"job {job['id']} planned" in r["message"] for r in worker_lines)
    assert all(r["job_id"] == job["id"] for r in worker_lines)
    assert all(len(r["span_id"]) == 16 for r in api_lines + worker_lines)
    assert SECRET_WORDS not in traced.api_log.read_text() + traced.worker_log.read_text()


OTEL_THREAD = "OtelBatch"


def test_tracing_off_starts_no_exporter_thread(settings: Settings) -> None:
    """The API as the suite runs it (no ``OTEL_EXPORTER_OTLP_ENDPOINT``): no exporter thread, no trace
    id of its own; a caller's trace id still travels into the job."""
    idle = settings.model_copy(update={"queue": f"idle-{uuid.uuid4().hex[:8]}"})  # no worker reads it
    with serve(create_app(idle)) as url, httpx.Client(base_url=url, timeout=30) as client:
        plain = client.post("/v1/jobs", json={"text": "Not traced.", "priority": "bulk"})
        caller = secrets.token_hex(16)
        continued = client.post(
            "/v1/jobs", json={"text": "Not traced."}, headers={"traceparent": f"00-{caller}-{secrets.token_hex(8)}-01"}
        )
        threads = [t.name for t in threading.enumerate()]
    assert plain.json()["trace_id"] is None
    assert "traceparent" not in plain.headers
    assert continued.json()["trace_id"] == caller
    assert not [name for name in threads if name.startswith(OTEL_THREAD)]


START_AND_LIST_THREADS = (
    "import threading, json; from ttsq import tracing; tracing.start('ttsq-worker'); "
    "print(json.dumps([t.name for t in threading.enumerate()]))"
)


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:9"])
def test_a_process_starts_the_exporter_only_when_an_endpoint_is_set(endpoint: str | None) -> None:
    """The call every worker process makes as it sets up its logging (``workers.log_context``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    out = subprocess.run(
        [sys.executable, "-c", START_AND_LIST_THREADS], env=env, capture_output=True, text=True, check=True
    )
    threads = json.loads(out.stdout)
    assert any(name.startswith(OTEL_THREAD) for name in threads) is (endpoint is not None)
