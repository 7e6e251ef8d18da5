"""Task events, what Flower follows: a synthesis worker sends each task's received, started and
succeeded events, held a moment so that a short job's leave together (``workers.task_events``), and
a worker stopping right after a job still sends them."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx
from celery import Celery

from cli.processes import wait_until
from tests.conftest import create_record, enqueue, start_worker, wait_for_job
from ttsq.broker import celery_config
from ttsq.job_record import JobStatus
from ttsq.job_store import JobStore
from ttsq.settings import Settings
from workers.task_events import EVENT_FLUSH_DELAY_S, REARM_AFTER_S, PacedEventsConsumer

TASK_STATES: Final = ("task-received", "task-started", "task-succeeded")


class EventLog:
    """Every task event published on the broker while it listens, each with when it arrived."""

    def __init__(self, settings: Settings) -> None:
        self._app = Celery("ttsq-test-events", config_source=celery_config(settings), set_as_current=False)
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._receiver: Any = None

    def _on_event(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append({**event, "arrived": time.time()})

    def _run(self) -> None:
        with self._app.connection_for_read() as connection:
            self._receiver = self._app.events.Receiver(connection, handlers={"*": self._on_event})
            self._receiver.on_iteration = self._ready.set  # first called once subscribed
            self._receiver.capture(limit=None, timeout=None, wakeup=False)

    @contextmanager
    def listening(self) -> Iterator[EventLog]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        assert self._ready.wait(10), "the event receiver did not subscribe"
        try:
            yield self
        finally:
            self._receiver.should_stop = True
            thread.join(5)

    def of_task(self, task_id: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {e["type"]: e for e in self._events if e.get("uuid") == task_id}

    def wait_for(self, task_id: str, types: tuple[str, ...] = TASK_STATES) -> dict[str, dict[str, Any]]:
        wait_until(lambda: set(types) <= set(self.of_task(task_id)), 10, f"events {types} of task {task_id}")
        return self.of_task(task_id)


def test_a_jobs_task_events_reach_a_monitor_held_a_moment(
    settings: Settings, worker: Any, client: httpx.Client
) -> None:
    with EventLog(settings).listening() as log:
        job = client.post("/v1/jobs", json={"text": "Events for the monitor."}).raise_for_status().json()
        assert wait_for_job(client, job["id"])["status"] == JobStatus.SUCCEEDED
        events = log.wait_for(job["id"])  # the entry task's id is the job's
    received = events["task-received"]
    # Sent when the message came, published with the events that followed it within the delay.
    assert received["arrived"] - received["timestamp"] >= EVENT_FLUSH_DELAY_S * 0.8, received
    assert events["task-succeeded"]["timestamp"] >= events["task-started"]["timestamp"] >= received["timestamp"]


def test_a_worker_stopped_right_after_a_job_still_sends_its_events(
    settings: Settings, store: JobStore, tmp_path: Path
) -> None:
    own = settings.model_copy(update={"queue": f"events-{uuid.uuid4().hex[:8]}"})
    worker = start_worker(own, tmp_path / "worker.log", "events-worker")
    try:
        with EventLog(own).listening() as log:
            record = create_record(store, "Stopped at once.")
            task_id = enqueue(own, record.id)
            deadline = time.monotonic() + 60
            while not store.get(record.id).status.terminal:
                assert time.monotonic() < deadline, "the job did not end"
                time.sleep(0.005)
            worker.kill(signal.SIGTERM)  # a warm shutdown, well within the events' delay
            worker.stop()
            assert store.get(record.id).status is JobStatus.SUCCEEDED
            log.wait_for(task_id)
    finally:
        worker.stop()


class RecordingHub:
    """The two calls of kombu's hub the consumer makes, recorded to be run by hand."""

    def __init__(self) -> None:
        self.soon: list[Any] = []
        self.later: list[tuple[float, Any]] = []

    def call_soon(self, callback: Any) -> None:
        self.soon.append(callback)

    def call_later(self, delay_s: float, callback: Any) -> None:
        self.later.append((delay_s, callback))


class CountingDispatcher:
    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1


def _consumer() -> tuple[PacedEventsConsumer, RecordingHub, CountingDispatcher]:
    consumer = PacedEventsConsumer.__new__(PacedEventsConsumer)  # only its pacing is under test
    hub, dispatcher = RecordingHub(), CountingDispatcher()
    consumer.hub, consumer.event_dispatcher = hub, dispatcher
    return consumer, hub, dispatcher


def test_events_sent_together_are_flushed_once_after_the_delay() -> None:
    consumer, hub, dispatcher = _consumer()
    for _ in range(3):
        consumer.on_send_event_buffered()
    assert len(hub.soon) == 1
    hub.soon[0]()
    ((delay_s, flush),) = hub.later
    assert delay_s == EVENT_FLUSH_DELAY_S
    flush()
    assert dispatcher.flushes == 1
    consumer.on_send_event_buffered()  # after the flush, the next event arms the next one
    assert len(hub.soon) == 2


def test_a_flush_whose_timer_was_lost_is_armed_again() -> None:
    consumer, hub, _ = _consumer()
    consumer.on_send_event_buffered()
    assert consumer._flush_armed_at is not None
    consumer._flush_armed_at -= REARM_AFTER_S  # its timer never ran: a consumer restarted meanwhile
    consumer.on_send_event_buffered()
    assert len(hub.soon) == 2
