"""One trace per job: an API process, a synthesis worker and a service worker exporting over OTLP/HTTP
to a real receiver (the protobuf decoded with ``opentelemetry-proto``); spans parented across the
processes, the S3 calls among them, one inference call's id in every job it served, a redelivered
step in the same trace (delivered twice, and after a real kill of its worker), the webhook's
attempts, a caller's ``traceparent`` continued, a Wyoming utterance as its job's root, JSON log
lines joined by trace id and naming the job and its tenant. Tracing off (no endpoint, or an empty
one): no exporter thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, cast
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

from api.main import create_app
from api.wyoming.speech import UTTERANCE_SPAN
from cli.commands import api_argv, webhook_worker_argv, wyoming_argv
from cli.processes import ManagedProcess, free_port, wait_until
from cli.workerpool import wait_for_node
from tests.conftest import (
    database_url,
    enqueue,
    production_sweep,
    serve,
    start_on_a_free_port,
    start_worker,
    stop_all,
    wait_for,
    wait_for_job,
)
from tests.receiver import Receiver as WebhookReceiver
from tests.test_json_logs import SECRET_WORDS, json_lines
from tests.test_segment_jobs import PARAGRAPH, THREE_SEGMENTS
from ttsq.constants import ENTRY_STEP, job_claim_key, job_step_starts_key, segment_step
from ttsq.job_store import JobStore
from ttsq.settings import Settings, settings_env
from ttsq.tenants import ANONYMOUS_TENANT


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int


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
                                start_ns=span.start_time_unix_nano,
                                end_ns=span.end_time_unix_nano,
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
    service_log: Path
    env: dict[str, str]
    """What makes a process export to the receiver and log JSON."""


TRACED_DATABASE: Final = 11
"""The module's Redis database: its own service worker (exporting, to show the webhook's spans) takes
the webhook events and sweeps there, at the production's settings, which the suite's records (left
unqueued on purpose by other tests) must not meet."""


@pytest.fixture(scope="module")
def traced(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedStack]:
    """An API process, a synthesis worker on a queue of its own and a service worker, on a Redis
    database of their own, all exporting to the receiver and logging JSON. The worker batches up to 4
    segments, an item waiting 300 ms for company, so the segments of two jobs sent together share
    inference calls."""
    folder = tmp_path_factory.mktemp("traces")
    worker = settings.worker.model_copy(update={"max_batch": 4, "max_wait_ms": 300.0})
    own = production_sweep(
        settings.model_copy(
            update={
                "queue": f"traces-{uuid.uuid4().hex[:8]}",
                "worker": worker,
                "redis_url": database_url(settings.redis_url, TRACED_DATABASE),
            }
        )
    )
    database = redis.Redis.from_url(own.redis_url)
    database.flushdb()
    with Receiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # spans reach the receiver within a tenth of a second
            "TTSQ_LOG_FORMAT": "json",
        }
        full_env = {**os.environ, **settings_env(own), **env}
        logs = {name: folder / f"{name}.log" for name in ("api", "worker", "service")}
        argv = webhook_worker_argv(2, "traced-service@%h")
        service = ManagedProcess("traced-service", argv, logs["service"], full_env)
        processes = [service.start()]
        try:
            processes.append(start_worker(own, logs["worker"], "traced-worker", env))
            api, url = start_on_a_free_port(
                "traced-api", lambda port: api_argv("127.0.0.1", port), logs["api"], full_env, "/healthz"
            )
            processes.append(api)
            wait_for_node(own, "traced-service", service, 60)
            with httpx.Client(base_url=url, timeout=30) as client:
                yield TracedStack(receiver, client, own, logs["api"], logs["worker"], logs["service"], env)
        finally:
            stop_all(processes)
            database.flushdb()
            database.close()


def _wait_for_spans(receiver: Receiver, trace_id: str, *names: str) -> list[ReceivedSpan]:
    """The trace's spans once every name in ``names`` arrived (as many times as it is named)."""
    wanted = {name: names.count(name) for name in names}

    def arrived() -> bool:
        got = [s.name for s in receiver.of_trace(trace_id)]
        return all(got.count(name) >= count for name, count in wanted.items())

    wait_until(arrived, 30, f"spans {wanted} of trace {trace_id}")
    return receiver.of_trace(trace_id)


def _submit(stack: TracedStack, text: str, headers: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    body = {"text": text, "priority": "bulk", **fields}
    answer = stack.client.post("/v1/jobs", json=body, headers=headers or {})
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
    job = _submit(traced, THREE_SEGMENTS, loudness={"preset": "podcast"})
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
    (admission,) = [s for s in spans if s.name == "ttsq.admission"]
    assert admission.service == "ttsq-api"
    assert request in _ancestors(admission, by_id)
    assert admission.attributes["ttsq.jobs"] == 1
    (plan,) = [s for s in spans if s.name == "ttsq.plan"]
    assert plan.parent_id == entry.span_id
    lexicons = [s for s in spans if s.name == "ttsq.lexicons"]
    assert lexicons
    assert all(entry in _ancestors(s, by_id) for s in lexicons)
    assert plan.attributes["ttsq.segments"] == 3

    segments = sorted((s for s in spans if s.name == "ttsq.segment"), key=lambda s: s.attributes["ttsq.segment.index"])
    assert [s.attributes["ttsq.segment.index"] for s in segments] == [0, 1, 2]
    assert all(s.parent_id == entry.span_id for s in segments)  # sent by the entry's fan-out
    for step in (entry, *segments):  # each delivery's wait in the queue, from its send to its start
        assert 0 <= step.attributes["ttsq.queue_wait_ms"] < 60_000
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
    (loudness,) = [s for s in spans if s.name == "ttsq.loudness"]  # the whole job leveled to its target
    assert loudness.parent_id == assemble.span_id
    assert loudness.attributes["ttsq.segments"] == 3
    (upload,) = [s for s in spans if s.name == "S3.PutObject"]
    assert upload.parent_id == assemble.span_id
    assert upload.attributes["aws.s3.key"] == done["result"]["key"]
    assert upload.attributes["ttsq.bytes"] == done["result"]["bytes"]


def test_a_redelivered_step_is_a_second_attempt_in_the_same_trace(traced: TracedStack) -> None:
    """The entry task delivered again (as the sweeper or a lost acknowledgement would) carries no trace
    context of its own: its step continues the job's, from the record."""
    job = _submit(traced, "A short job, delivered twice.")
    assert wait_for_job(traced.client, job["id"])["status"] == "succeeded"
    # Delivered while the first run still holds the step (it tidies up after the success the client
    # saw), the copy is a duplicate and is skipped with no attempt of its own: like the sweeper, send
    # it once the step is free.
    with redis.Redis.from_url(traced.settings.redis_url) as database:
        claim = job_claim_key(job["id"], ENTRY_STEP)
        wait_until(lambda: not database.exists(claim), 10, "the first run's claim on its step released")
    enqueue(traced.settings, job["id"])
    spans = _wait_for_spans(traced.receiver, job["trace_id"], "ttsq.entry", "ttsq.entry")
    entries = [s for s in spans if s.name == "ttsq.entry"]
    assert len({s.attributes["ttsq.step.attempt_id"] for s in entries}) == 2
    assert {s.attributes["celery.task_id"] for s in entries} > {job["id"]}  # two messages, the API's first
    assert entries[1].parent_id == entries[0].parent_id  # the record's context: the submitting request's


def _caught_mid_step(victim: ManagedProcess, database: redis.Redis, job_id: str) -> tuple[str, str]:
    """Freeze the victim while it runs one of the job's segments, then kill it; returns the step and
    that run's attempt id. A run counts as running from its start's record until its end removes
    it (``JobStore.step_started``): still there once the worker is frozen, it was cut off mid-step."""
    pattern = job_step_starts_key(job_id, segment_step(0)).removesuffix("0") + "*"

    def running() -> tuple[str, str] | None:
        for key in database.scan_iter(match=pattern):
            for attempt in cast(set[bytes], database.smembers(key)):
                return key.decode().rpartition(":starts:")[2], attempt.decode()
        return None

    caught: tuple[str, str] | None = None
    while caught is None:
        found = wait_for(running, lambda run: run is not None, 60, "a segment running")
        assert found is not None
        victim.kill(signal.SIGSTOP)
        if database.sismember(job_step_starts_key(job_id, found[0]), found[1]):
            caught = found
        else:  # it ended between the look and the stop
            victim.kill(signal.SIGCONT)
    victim.kill(signal.SIGKILL)
    victim.stop()
    return caught


@pytest.mark.recovery
def test_a_step_cut_off_by_a_worker_kill_shows_both_runs_in_the_trace(traced: TracedStack, tmp_path: Path) -> None:
    """A worker SIGKILLed mid-segment takes that run's span with it (a span is sent when it ends): the
    next run of the step, on another worker, finds the run that never ended and reports it as a span
    of its own beside its own, from the dead run's start, failed."""
    own = traced.settings.model_copy(update={"queue": f"kill-{uuid.uuid4().hex[:8]}"})
    database = redis.Redis.from_url(own.redis_url)
    victim = start_worker(own, tmp_path / "victim.log", "trace-victim", traced.env)
    workers = [victim]
    caller = secrets.token_hex(16)
    try:
        with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
            # The API in this process exports nothing: the job keeps the caller's trace id.
            headers = {"traceparent": f"00-{caller}-{secrets.token_hex(8)}-01"}
            answer = client.post("/v1/jobs", json={"text": KILLED_TEXT, "priority": "bulk"}, headers=headers)
            assert answer.status_code == 202, answer.text
            job_id = answer.json()["id"]
            step, attempt = _caught_mid_step(victim, database, job_id)
            killed_at_ns = time.time_ns()
            workers.append(start_worker(own, tmp_path / "replacement.log", "trace-replacement", traced.env))
            done = wait_for_job(client, job_id, timeout_s=120)
    finally:
        stop_all(workers)
        database.close()
    assert done["status"] == "succeeded", done
    assert done["trace_id"] == caller

    def runs() -> list[ReceivedSpan]:
        """The spans of the step's runs that held it (a duplicate delivery finding it held has none)."""
        spans = traced.receiver.of_trace(caller)
        return [s for s in spans if s.attributes.get("ttsq.step") == step and "ttsq.step.attempt_id" in s.attributes]

    def found(spans: list[ReceivedSpan]) -> bool:
        """The dead run's span and the span of the run that reported it arrived."""
        ids = {s.attributes["ttsq.step.attempt_id"]: s for s in spans}
        return attempt in ids and ids[attempt].attributes["ttsq.step.found_by"] in ids

    both = wait_for(runs, found, 30, f"both runs of {step} in the trace")
    (died,) = [s for s in both if s.attributes["ttsq.step.attempt_id"] == attempt]
    (finished,) = [s for s in both if s.attributes["ttsq.step.attempt_id"] == died.attributes["ttsq.step.found_by"]]
    assert died.name == finished.name == "ttsq.segment"
    assert died.attributes["ttsq.segment.index"] == finished.attributes["ttsq.segment.index"] == int(step[8:])
    assert died.attributes["ttsq.step.died"] is True
    assert "ttsq.step.died" not in finished.attributes
    assert finished.attributes["ttsq.step.unended_starts"] == 2  # its own start and the dead run's
    assert died.parent_id == finished.parent_id != ""  # beside it, in the job's trace
    assert died.start_ns < killed_at_ns < died.end_ns <= finished.end_ns
    assert finished.service == died.service == "ttsq-worker"


KILLED_TEXT = " ".join([PARAGRAPH] * 2)
"""Several segments (a dozen), so a look at the job's steps finds one running."""


def test_each_run_that_died_is_reported_once(store: JobStore) -> None:
    """What a step's next run learns of the runs before it that never ended (``JobStore.take_died``):
    each once, with its start; a run that ended is not among them, and every one stays counted."""
    job_id = str(uuid.uuid4())
    before = time.time()
    store.step_started(job_id, ENTRY_STEP, "ended")
    store.step_ended(job_id, ENTRY_STEP, "ended")
    store.step_started(job_id, ENTRY_STEP, "died")
    assert store.step_started(job_id, ENTRY_STEP, "second") == 2
    died = store.take_died(job_id, ENTRY_STEP, "second")
    assert list(died) == ["died"]
    assert before <= died["died"] <= time.time()
    assert store.step_started(job_id, ENTRY_STEP, "third") == 3  # the second died too
    assert list(store.take_died(job_id, ENTRY_STEP, "third")) == ["second"]


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


def test_each_webhook_attempt_is_a_span_of_the_jobs_trace(traced: TracedStack) -> None:
    """The receiver fails the first attempt and takes the second: two ``ttsq.webhook`` spans from the
    service worker, numbered, with the status each answer had, under the job's request; the
    receiver's host is named, never its path or its query (which may hold a token)."""
    with contextlib.closing(WebhookReceiver()) as receiver:
        url = receiver.path(500, 204) + "?token=" + WEBHOOK_TOKEN
        answer = traced.client.post("/v1/jobs", json={"text": "Tell my receiver.", "webhook_url": url})
        assert answer.status_code == 202, answer.text
        job = answer.json()
        done = wait_for(
            lambda: traced.client.get(f"/v1/jobs/{job['id']}").json(),
            lambda job: job["webhook"] is not None and job["webhook"]["state"] != "pending",
            60,
            "the webhook delivered",
        )
        assert len(receiver.at(url)) == 2
    assert (done["webhook"]["state"], done["webhook"]["attempts"]) == ("delivered", 2)
    spans = _wait_for_spans(traced.receiver, job["trace_id"], "POST /v1/jobs", "ttsq.webhook", "ttsq.webhook")
    by_id = {s.span_id: s for s in spans}
    (request,) = [s for s in spans if s.name == "POST /v1/jobs"]
    hooks = sorted((s for s in spans if s.name == "ttsq.webhook"), key=lambda s: s.attributes["ttsq.webhook.attempt"])
    assert [h.attributes["ttsq.webhook.attempt"] for h in hooks] == [1, 2]
    assert [h.attributes["http.response.status_code"] for h in hooks] == [500, 204]
    assert [h.attributes["ttsq.webhook.delivered"] for h in hooks] == [False, True]
    for hook in hooks:
        assert hook.service == "ttsq-service-worker"
        assert request in _ancestors(hook, by_id)
        assert hook.attributes["ttsq.webhook.event"] == "job.succeeded"
        assert hook.attributes["ttsq.tenant.id"] == "anonymous"
        assert hook.attributes["server.address"] == "127.0.0.1"
    assert len({h.attributes["ttsq.webhook.event_id"] for h in hooks}) == 1
    attempts = wait_for(
        lambda: [r for r in json_lines(traced.service_log) if f"job {job['id']}: webhook attempt" in r["message"]],
        lambda lines: len(lines) == 2,
        10,
        "the service worker's line of each attempt",
    )
    assert [(r["job_id"], r["tenant_id"]) for r in attempts] == [(job["id"], ANONYMOUS_TENANT)] * 2
    path = urlsplit(url).path
    told = [str(value) for span in spans for value in span.attributes.values()]
    assert not [value for value in told if path in value or WEBHOOK_TOKEN in value]


WEBHOOK_TOKEN = "s3cr3t-webhook-token"


def test_a_callers_traceparent_is_continued(traced: TracedStack) -> None:
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    job = _submit(traced, "Continue my trace.", {"traceparent": f"00-{caller_trace}-{caller_span}-01"})
    assert job["trace_id"] == caller_trace
    assert wait_for_job(traced.client, job["id"])["trace_id"] == caller_trace
    spans = _wait_for_spans(traced.receiver, caller_trace, "POST /v1/jobs", "ttsq.entry")
    (request,) = [s for s in spans if s.name == "POST /v1/jobs"]
    assert request.parent_id == caller_span


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


async def _spoken_over_wyoming(port: int, text: str) -> list[str]:
    """The event types a Wyoming client is sent for ``text``, up to its ``audio-stop`` (or error)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Synthesize(text=text).event())
        types: list[str] = []
        while (event := await client.read_event()) is not None:
            types.append(event.type)
            if event.type in ("audio-stop", "error"):
                break
        return types


def test_a_wyoming_utterance_is_the_root_of_its_jobs_trace(traced: TracedStack, tmp_path: Path) -> None:
    """``ttsq wyoming`` exports too: its utterance's span, the trace's root, holds the job's steps."""
    port = free_port()
    env = {**os.environ, **settings_env(traced.settings), **traced.env}
    argv = wyoming_argv(f"tcp://127.0.0.1:{port}")
    server = ManagedProcess("traced-wyoming", argv, tmp_path / "wyoming.log", env).start()
    try:
        wait_until(lambda: _listening(port), 60, "the Wyoming server", server)
        assert asyncio.run(_spoken_over_wyoming(port, "Traced through Wyoming."))[-1] == "audio-stop"
        wait_until(
            lambda: any(s.name == UTTERANCE_SPAN for s in traced.receiver.spans), 30, "the utterance's span", server
        )
    finally:
        server.stop()
    (utterance,) = [s for s in traced.receiver.spans if s.name == UTTERANCE_SPAN]
    assert (utterance.service, utterance.parent_id) == ("ttsq-wyoming", "")
    assert utterance.attributes["ttsq.tenant.id"] == ANONYMOUS_TENANT
    job_id = utterance.attributes["ttsq.job.id"]
    spans = _wait_for_spans(traced.receiver, utterance.trace_id, UTTERANCE_SPAN, "ttsq.entry", "ttsq.synthesize")
    (entry,) = [s for s in spans if s.name == "ttsq.entry"]
    assert entry.attributes["ttsq.job.id"] == job_id
    assert utterance in _ancestors(entry, {s.span_id: s for s in spans})
    record = JobStore(redis.Redis.from_url(traced.settings.redis_url), 60).get(job_id)
    assert record.trace_id == utterance.trace_id
    assert all("Traced through" not in str(value) for span in spans for value in span.attributes.values())


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
    # the job's tenant too, on the API's lines about the job and on every line of its work
    about_the_job = [r for r in api_lines if r["job_id"] == job["id"]]
    assert about_the_job
    assert all(r["tenant_id"] == ANONYMOUS_TENANT for r in about_the_job + worker_lines)
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


@pytest.mark.parametrize("endpoint", [None, "", "http://127.0.0.1:9"])
def test_a_process_starts_the_exporter_only_when_an_endpoint_is_set(endpoint: str | None) -> None:
    """The call every worker process makes as it sets up its logging (``workers.log_context``); an
    empty endpoint (compose's default) is none."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    out = subprocess.run(
        [sys.executable, "-c", START_AND_LIST_THREADS], env=env, capture_output=True, text=True, check=True
    )
    threads = json.loads(out.stdout)
    assert any(name.startswith(OTEL_THREAD) for name in threads) is bool(endpoint)
