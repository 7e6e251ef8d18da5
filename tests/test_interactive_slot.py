"""The interactive slot: an interactive job is taken while every task thread of the worker holds a
bulk segment, on one real worker; with the slot off it is not (the old behaviour).

The evidence is the order of the worker's own log lines, never a time: when Celery logs the
interactive task as received, how many bulk segment tasks had it received and not yet finished.
Without the slot the task threads' channel holds one message per thread, so it can only receive the
interactive task with fewer than ``concurrency`` bulk segments in hand.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import httpx
import pytest
from celery.utils.timer2 import Timer
from celery.worker.consumer import Consumer
from kombu.common import QoS

from api.main import create_app
from bench.corpus import narration
from cli.processes import ManagedProcess, wait_until
from tests.conftest import JOB_TIMEOUT_S, serve, start_workers, stop_all, wait_for, wait_for_job
from tests.faults_support import fault_stack, wait_terminal
from tts_core.base.device import Device
from ttsq.broker import make_producer
from ttsq.constants import SEGMENT_TASK, SYNTHESIZE_TASK
from ttsq.settings import Settings, WorkerSettings
from workers.interactive_slot import _SlotConsumer, _SlotPool
from workers.tuning import batch_plan

_TASK_LINE = re.compile(r"Task ([\w.]+)\[([0-9a-f-]+)\] (received|succeeded|failed|retry|raised)")


def bulk_in_hand_when_interactive_received(log: str) -> int:
    """From a worker log holding one bulk job then one interactive job: bulk segment tasks received
    and not yet ended when the second entry task (the interactive job's) was received."""
    in_hand: set[str] = set()
    entries = 0
    for name, task, event in _TASK_LINE.findall(log):
        if name == SYNTHESIZE_TASK and event == "received":
            entries += 1
            if entries == 2:
                return len(in_hand)
        elif name == SEGMENT_TASK:
            (in_hand.add if event == "received" else in_hand.discard)(task)
    raise AssertionError("the interactive entry task was never received")


BULK_CHARS: Final = 1300
"""The bulk job's text: ten segments. The interactive job is sent once two are done, so eight are
left: four turns of the two task threads (a CPU worker's ``concurrency``), each turn a segment's
synthesis. The interactive job needs under half a second and, without the slot, waits at most one
turn for a thread: the bulk job is still running when the interactive one has succeeded, as
``interactive_beside_bulk`` checks, with two turns or more to spare; and three rounds stay cheap."""


def interactive_beside_bulk(
    client: httpx.Client, settings: Settings, worker: ManagedProcess, *, bulk_to_the_end: bool = True
) -> tuple[int, list[Any]]:
    """A bulk job keeping every task thread busy, an interactive job submitted meanwhile; both must
    succeed (without ``bulk_to_the_end``, the bulk job is canceled once the interactive one is done,
    and no records are read). Returns the bulk segments in hand when the interactive task came, and
    the worker's records of the bulk job's inference calls."""
    assert worker.log_path is not None
    before = worker.log_path.stat().st_size
    bulk = client.post("/v1/jobs", json={"text": narration()[:BULK_CHARS], "priority": "bulk"}).json()
    wait_for(
        lambda: client.get(f"/v1/jobs/{bulk['id']}").json(),
        lambda job: job["progress"]["segments_done"] >= 2,
        JOB_TIMEOUT_S,
        "the bulk job under way",
    )
    quick = client.post("/v1/jobs", json={"text": "Me first, please.", "priority": "interactive"}).json()
    assert client.get(f"/v1/jobs/{quick['id']}", params={"wait": 60}).json()["status"] == "succeeded"
    assert client.get(f"/v1/jobs/{bulk['id']}").json()["status"] == "running", "the bulk job ended too soon"
    if not bulk_to_the_end:
        assert client.delete(f"/v1/jobs/{bulk['id']}").status_code == 200
    assert wait_for_job(client, bulk["id"])["status"] == ("succeeded" if bulk_to_the_end else "canceled")
    with worker.log_path.open() as log:
        log.seek(before)
        in_hand = bulk_in_hand_when_interactive_received(log.read())
    if not bulk_to_the_end:
        return in_hand, []
    producer = make_producer(settings)
    try:
        replies = producer.control.broadcast("batches", reply=True, arguments={"limit": 1000}, timeout=5)
    finally:
        producer.close()
    records = [r for reply in replies or [] for stats in reply.values() for r in stats.get("recent", [])]
    return in_hand, [r for r in records if any(t.startswith(bulk["id"]) for t in r["tags"])]


SLOT_ROUNDS = 3
"""Bulk-then-interactive rounds at most, until one shows the slot taking the interactive job."""


def threads(settings: Settings) -> int:
    return batch_plan(settings.worker, Device.CPU).concurrency


@dataclass(frozen=True)
class OwnWorker:
    """A worker of this module's, on a queue of its own, and the settings it runs on."""

    settings: Settings
    process: ManagedProcess
    log_path: Path


@pytest.fixture(scope="module")
def own_workers(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, OwnWorker]]:
    """The two workers of the tests below, one with the slot and one without, started at once so that
    their start-ups overlap (``start_workers``); each test uses its own, the other waits idle on a
    queue of its own."""
    slot = {"interactive_slot": True, "preempt_bulk": True}
    own = {
        name: settings.model_copy(
            update={"queue": f"{name}-{uuid.uuid4().hex[:8]}", "worker": settings.worker.model_copy(update=worker)}
        )
        for name, worker in (("slot", slot), ("noslot", {"interactive_slot": False}))
    }
    folder = tmp_path_factory.mktemp("slot-workers")
    started = start_workers(folder, own)
    yield {name: OwnWorker(own[name], started[name], folder / f"{name}.log") for name in own}
    stop_all(started.values())


def test_an_interactive_job_runs_while_every_task_thread_holds_bulk(own_workers: dict[str, OwnWorker]) -> None:
    """With the slot, the interactive job was taken while all ``concurrency`` task threads had bulk
    segments in hand; bulk calls it stopped ran again (none failed)."""
    own, worker = own_workers["slot"].settings, own_workers["slot"].process
    seen: list[int] = []
    try:
        with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
            # The task threads take interactive work too: one that is between two bulk segments when
            # the interactive message comes may take it first. Without the slot the count can never
            # reach ``concurrency`` (the test below); with it, it does in one of a few rounds.
            for _ in range(SLOT_ROUNDS):
                beside, bulk_records = interactive_beside_bulk(client, own, worker)
                assert all(r["ok"] or r["stopped"] for r in bulk_records)
                seen.append(beside)
                if beside == threads(own):
                    break
    finally:
        worker.stop()
    assert worker.returncode == 0, "no warm shutdown: the slot's thread held the worker until SIGKILL"
    assert threads(own) in seen, seen
    assert "interactive slot consuming" in own_workers["slot"].log_path.read_text()


def test_without_the_slot_an_interactive_job_waits_for_a_task_thread(own_workers: dict[str, OwnWorker]) -> None:
    """``TTSQ_WORKER__INTERACTIVE_SLOT=false``: the old behaviour, the interactive job took one of the
    task threads' channel, which took it only with a thread free of bulk work."""
    own, worker = own_workers["noslot"].settings, own_workers["noslot"].process
    with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
        # What the bulk job does after the interactive one came is the test above's.
        beside, _ = interactive_beside_bulk(client, own, worker, bulk_to_the_end=False)
    assert beside < threads(own)
    assert "interactive slot" not in own_workers["noslot"].log_path.read_text()


@pytest.mark.recovery
def test_the_slot_reconnects_after_a_redis_restart(tmp_path: Path) -> None:
    """Redis SIGKILLed and restarted on the same port and data: the slot's own connection is lost and
    taken again by its own drain thread (its log says so), the worker lives, and interactive jobs
    run after."""
    with fault_stack(tmp_path, worker=WorkerSettings(interactive_slot=True)) as stack:
        log_path = stack.log_path("worker")
        assert log_path.read_text().count("interactive slot consuming") == 1
        stack.redis_server.kill()
        time.sleep(3)
        stack.redis_server.start()
        wait_until(lambda: log_path.read_text().count("interactive slot consuming") == 2, 60, "the slot reconnected")
        with httpx.Client(base_url=stack.api_url, timeout=30) as api:
            ids = [
                api.post("/v1/jobs", json={"text": f"Back again, {n}.", "priority": "interactive"}).json()["id"]
                for n in range(3)
            ]
        found = wait_terminal(stack.jobs, ids, JOB_TIMEOUT_S)
        alive = stack.alive()
    assert all(alive.values()), alive
    assert [r.status.value if r else None for r in found.values()] == ["succeeded"] * 3
    assert "interactive slot lost its broker connection" in log_path.read_text()


def test_the_slot_announces_its_task_to_the_interactive_lane_until_it_ends() -> None:
    """The slot's pool calls ``announce`` as it hands a task to its thread, before the task runs, and
    what that returned once the task has ended (``workers.voice_host``'s interactive lane holds bulk
    calls in between)."""
    events: list[str] = []
    ended = threading.Event()

    def end() -> None:
        events.append("ended")
        ended.set()

    def announce() -> Callable[[], None]:
        events.append("announced")
        return end

    pool = _SlotPool(lambda: events.append("slot free"), announce)
    pool.start()
    try:
        pool.apply_async(lambda: events.append("task ran"))
        assert ended.wait(10)
    finally:
        pool.stop()
    assert events[:3] == ["announced", "task ran", "ended"]


class _LoopOnlyConsumer:
    """A worker consumer whose acknowledgements would wait for its main loop (the old path)."""

    def call_soon_ack(self, *_: Any, **__: Any) -> None:
        raise AssertionError("the slot's acknowledgement went to the worker's main loop")

    call_soon = call_soon_ack


def test_the_slot_acknowledges_on_its_own_thread_not_the_workers_main_loop() -> None:
    """Celery's task handler acknowledges through ``call_soon_ack``; the consumer's queues it for the
    worker's main loop, and until that loop came round the slot, its one message unacknowledged,
    took no next one (up to ``BUSY_RECHECK_S`` later). The slot hands it to its drain thread."""
    deferred: list[Callable[[], Any]] = []
    acknowledged: list[str] = []
    slot = _SlotConsumer(
        cast(Consumer, _LoopOnlyConsumer()), _SlotPool(lambda: None, lambda: lambda: None), cast(QoS, None),
        Timer(), deferred.append,
    )  # fmt: skip
    slot.call_soon_ack(acknowledged.append, "message 1")
    assert acknowledged == []  # made by the drain thread, not the task's thread
    (pending,) = deferred
    pending()
    assert acknowledged == ["message 1"]
