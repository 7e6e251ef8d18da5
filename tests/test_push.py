"""Waiting without polling: Server-Sent Events and the long poll, against a real worker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
import redis

from cli.processes import ManagedProcess
from tests.conftest import IdleQueueApi, paused
from tests.test_segment_jobs import PARAGRAPH
from ttsq.constants import job_events_channel
from ttsq.events import status_message
from ttsq.job_record import JobStatus, utcnow
from ttsq.job_store import JobStore

SENTENCE = "Pushed, not polled: this job tells its listeners when it changes."


def events_of(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(event name, data, id) of each event as it comes, until the server ends the stream."""
    name, data, event_id = "message", "", ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data += line.removeprefix("data: ")
        elif line.startswith("id: "):
            event_id = line.removeprefix("id: ")
        elif line == "" and data:
            yield name, json.loads(data), event_id
            name, data, event_id = "message", "", ""


def read_events(response: httpx.Response) -> list[tuple[str, dict[str, Any], str]]:
    return list(events_of(response))


def test_events_stream_a_job_from_queued_to_succeeded_in_order(client: httpx.Client) -> None:
    """A paragraph: four segments, two turns of the worker's two task threads, so segments end while
    the job runs and the stream reports progress between running and succeeded."""
    job = client.post("/v1/jobs", json={"text": PARAGRAPH}).json()
    with client.stream("GET", f"/v1/jobs/{job['id']}/events", timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = read_events(response)
    names = [name for name, _, _ in events]
    statuses = [data["status"] for _, data, _ in events]
    assert names[-1] == "succeeded"
    assert "running" in names
    # Statuses only move forward, each event is the job's JSON, ids count up from 0.
    order = ["queued", "running", "succeeded"]
    assert statuses == sorted(statuses, key=order.index)
    assert [event_id for _, _, event_id in events] == [str(n) for n in range(len(events))]
    assert events[-1][1]["result"]["url"].startswith("http")
    done = [data["progress"]["segments_done"] for name, data, _ in events if name == "progress"]
    assert done == sorted(done)
    assert done, "a multi-segment job reports progress between running and succeeded"
    assert events[-1][1]["progress"]["segments_done"] == events[-1][1]["progress"]["segments_total"] > 1


def test_events_of_a_finished_job_end_after_one_event(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json={"text": SENTENCE}).json()
    client.get(f"/v1/jobs/{job['id']}", params={"wait": 30})
    with client.stream("GET", f"/v1/jobs/{job['id']}/events") as response:
        events = read_events(response)
    assert [name for name, _, _ in events] == ["succeeded"]


def test_events_of_an_unknown_job_are_a_404_not_a_stream(client: httpx.Client) -> None:
    response = client.get("/v1/jobs/00000000-0000-4000-8000-000000000000/events")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "job_not_found"


def test_long_poll_answers_as_soon_as_the_job_finishes(client: httpx.Client) -> None:
    """The answer comes as the job finishes (same host, same clock): the event wakes the wait, which
    would otherwise re-read the job only after RESYNC_S (30 s). The bound leaves room for a loaded
    machine's stalls; speed itself is make bench's to measure."""
    lags = []
    for _ in range(3):
        job = client.post("/v1/jobs", json={"text": SENTENCE}).json()
        response = client.get(f"/v1/jobs/{job['id']}", params={"wait": 30})
        answered = time.time()
        done = response.json()
        assert done["status"] == "succeeded"
        lags.append(answered - datetime.fromisoformat(done["finished_at"]).timestamp())
    assert max(lags) < 10.0, lags  # far below the 30 s resync that a missed event would cost


def test_long_poll_of_a_job_that_does_not_finish_returns_after_wait(idle_queue_api: IdleQueueApi) -> None:
    job = idle_queue_api.client.post("/v1/jobs", json={"text": SENTENCE}).json()
    started = time.monotonic()
    response = idle_queue_api.client.get(f"/v1/jobs/{job['id']}", params={"wait": 1.5}, timeout=10)
    waited = time.monotonic() - started
    assert response.status_code == 200
    assert response.json()["status"] == "queued"
    assert 1.4 <= waited < 15  # the wait's own end, not the 30 s resync


@pytest.mark.parametrize(
    ("wait", "problem"),
    [(-1, "greater than or equal to 0"), (61, "less than or equal to 60"), ("soon", "valid number"),
     ("nan", "finite number"), ("inf", "finite number")],
)  # fmt: skip
def test_long_poll_refuses_waits_out_of_range(client: httpx.Client, wait: int | str, problem: str) -> None:
    response = client.get("/v1/jobs/00000000-0000-4000-8000-000000000000", params={"wait": wait})
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "wait" in message
    assert problem in message


def test_many_waiters_share_one_job_and_all_hear_the_end(
    client: httpx.Client, api_url: str, worker: ManagedProcess
) -> None:
    """Twenty long polls and twenty event streams on one job, from threads, all waiting while it
    runs (the worker held until every stream has its first event): all get the final state."""
    finals: list[str] = []
    lock = threading.Lock()
    streaming = threading.Semaphore(0)

    def poll() -> None:
        with httpx.Client(base_url=api_url, timeout=60) as own:
            status = own.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()["status"]
        with lock:
            finals.append(status)

    def stream() -> None:
        names: list[str] = []
        with httpx.Client(base_url=api_url, timeout=60) as own, own.stream("GET", f"/v1/jobs/{job['id']}/events") as r:
            for name, _, _ in events_of(r):
                if not names:
                    streaming.release()
                names.append(name)
        with lock:
            finals.append(names[-1])

    threads = [threading.Thread(target=poll) for _ in range(20)] + [threading.Thread(target=stream) for _ in range(20)]
    with paused(worker):
        job = client.post("/v1/jobs", json={"text": SENTENCE}).json()
        for thread in threads:
            thread.start()
        for _ in range(20):
            assert streaming.acquire(timeout=30), "an event stream got no first event"
        assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"
    for thread in threads:
        thread.join(90)
    assert finals == ["succeeded"] * 40


def test_long_poll_answers_from_the_record_its_terminal_event_carries(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    """A terminal status event carries the record as written (``ttsq.events``), and the long poll
    answers from it: here the record in Redis still says queued while the event says succeeded, so
    an answer read from Redis would have waited out its wait instead."""
    job = idle_queue_api.client.post("/v1/jobs", json={"text": SENTENCE}).json()
    queued = JobStore(redis_client, 600).get(job["id"])
    ended = queued.model_copy(update={"status": JobStatus.SUCCEEDED, "finished_at": utcnow()})
    answer: list[httpx.Response] = []
    poll = threading.Thread(
        target=lambda: answer.append(idle_queue_api.client.get(f"/v1/jobs/{job['id']}", params={"wait": 20}))
    )
    poll.start()
    started = time.monotonic()
    while poll.is_alive() and time.monotonic() - started < 10:  # again until the poll, once waiting, hears it
        redis_client.publish(job_events_channel(job["id"]), status_message(ended.status, ended.model_dump_json()))
        poll.join(timeout=0.2)
    poll.join(timeout=15)
    assert answer
    assert answer[0].status_code == 200
    assert answer[0].json()["status"] == "succeeded"
    assert JobStore(redis_client, 600).get(job["id"]).status is JobStatus.QUEUED  # Redis was never changed
    assert time.monotonic() - started < 15
