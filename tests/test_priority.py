"""Interactive jobs ahead of bulk work, on one real worker."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import psutil
import redis

from cli.processes import ManagedProcess
from tests.conftest import JOB_TIMEOUT_S, IdleQueueApi, wait_for, wait_for_job
from tests.test_segment_jobs import PARAGRAPH, THREE_SEGMENTS
from ttsq.cpu_priority import threads_can_come_back
from ttsq.settings import Settings


def test_short_jobs_default_to_interactive_and_long_ones_to_bulk(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis, settings: Settings
) -> None:
    """Each job's entry message waits in the queue of its class (no worker reads these): interactive
    first, bulk behind. That such jobs then run is every other test's business
    (``test_bulk_work_steps_back…`` below runs a bulk job)."""
    just_over = " ".join([PARAGRAPH] * 2)[: settings.interactive_max_chars + 1]
    client = idle_queue_api.client
    short = client.post("/v1/jobs", json={"text": "Quick."}).json()
    long = client.post("/v1/jobs", json={"text": just_over}).json()
    asked = client.post("/v1/jobs", json={"text": just_over, "priority": "interactive"}).json()
    assert (short["priority"], long["priority"], asked["priority"]) == ("interactive", "bulk", "interactive")
    bulk_queue = idle_queue_api.queue.removesuffix(".interactive")
    waiting = {queue: str(redis_client.lrange(queue, 0, -1)) for queue in (idle_queue_api.queue, bulk_queue)}
    assert [job["id"] in waiting[idle_queue_api.queue] for job in (short, long, asked)] == [True, False, True]
    assert [job["id"] in waiting[bulk_queue] for job in (short, long, asked)] == [False, True, False]


def test_an_interactive_job_overtakes_a_running_bulk_job(client: httpx.Client) -> None:
    """Submitted while a long bulk job has a dozen segments queued, the interactive job is done
    while the bulk job is still running: it did not wait behind the bulk segments."""
    bulk = client.post("/v1/jobs", json={"text": " ".join([PARAGRAPH] * 3), "priority": "bulk"}).json()
    wait_for(
        lambda: client.get(f"/v1/jobs/{bulk['id']}").json(),
        lambda job: job["status"] != "queued" and job["progress"]["segments_total"] > 0,
        JOB_TIMEOUT_S,
        "the bulk job planned",
    )
    quick = client.post("/v1/jobs", json={"text": "Me first, please."}).json()
    quick_done = client.get(f"/v1/jobs/{quick['id']}", params={"wait": 60}).json()
    assert quick_done["status"] == "succeeded"
    bulk_then = client.get(f"/v1/jobs/{bulk['id']}").json()
    assert bulk_then["status"] == "running", "the bulk job finished first: nothing was overtaken"
    assert bulk_then["progress"]["segments_done"] < bulk_then["progress"]["segments_total"]
    # Its rest is not needed: a bulk job that an interactive one overtook goes on to succeed, which
    # tests/test_interactive_slot.py checks on a worker of these settings (the slot, preemption).
    assert client.delete(f"/v1/jobs/{bulk['id']}").status_code == 200
    assert wait_for_job(client, bulk["id"])["status"] == "canceled"


def test_the_worker_asks_redis_for_interactive_work_first(redis_client: redis.Redis, worker: ManagedProcess) -> None:
    """What the worker really sends (Redis MONITOR): one BRPOP over its queues, interactive first
    (the fixed queue, then its models' interactive queues), then bulk entries, then bulk segments;
    Redis answers from the first non-empty list."""
    deadline = time.monotonic() + 30
    with redis_client.monitor() as monitor:  # type: ignore[no-untyped-call]
        for entry in monitor.listen():
            words = entry["command"].split()
            if words[0] == "BRPOP" and "tts" in words:
                fixed = [w for w in words[1:] if w in ("tts.interactive", "tts", "tts.segments")]
                assert fixed[:3] == ["tts.interactive", "tts", "tts.segments"]
                before_entry = words[1 : words.index("tts")]
                assert all(w == "tts.interactive" or w.endswith(".interactive") for w in before_entry)
                return
            assert time.monotonic() < deadline, "no BRPOP from the worker within 30 s"


BULK_BATCHER_THREADS: Final = ("ttsq-batcher", "ttsq-batcher-2")
"""The OS names of the bulk batcher's threads (``parallel_calls`` 2, the CPU default): lowered for good."""


def _lowered_threads(pid: int) -> list[str]:
    """OS names of the threads of the worker process (and of its children) running at a lower
    priority than its main thread."""
    root = psutil.Process(pid)
    base = os.getpriority(os.PRIO_PROCESS, pid)
    lowered = []
    for process in [root, *root.children(recursive=True)]:
        for thread in process.threads():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                if os.getpriority(os.PRIO_PROCESS, thread.id) > base:
                    lowered.append(Path(f"/proc/{process.pid}/task/{thread.id}/comm").read_text().strip())
    return lowered


def _others_lowered(pid: int) -> int:
    """Lowered threads that are not the bulk batcher's."""
    return sum(name not in BULK_BATCHER_THREADS for name in _lowered_threads(pid))


def _only_the_batcher_lowered(pid: int, quiet_s: float) -> bool:
    """Whether only the bulk batcher's threads stay lowered for ``quiet_s`` (at least one of them: it
    ran the bulk job's calls): no bulk step runs, an earlier test's included (a canceled job's queued
    segments are each taken, and skipped, as a step)."""
    end = time.monotonic() + quiet_s
    while time.monotonic() < end:
        lowered = _lowered_threads(pid)
        if not lowered or any(name not in BULK_BATCHER_THREADS for name in lowered):
            return False
        time.sleep(0.01)
    return True


@contextlib.contextmanager
def _sampled(pid: int, seen: list[int]) -> Iterator[None]:
    """Count the worker's lowered threads every few milliseconds during the block, into ``seen``."""
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            seen.append(_others_lowered(pid))
            time.sleep(0.003)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield
    finally:
        done.set()
        sampler.join()


def test_bulk_work_steps_back_on_the_cores_and_gives_its_threads_back(
    client: httpx.Client, worker: ManagedProcess
) -> None:
    """A bulk job's batcher threads are lowered for good and each bulk step's task thread for the step
    (where the worker may raise a thread back, as here when its user may); after it, only the batcher's
    threads stay lowered, and an interactive job runs with nothing of its own lowered
    (``ttsq.cpu_priority``). Threads are told apart by the names the batcher gives them in the OS."""
    during_bulk: list[int] = []
    with _sampled(worker.pid, during_bulk):
        bulk = client.post("/v1/jobs", json={"text": THREE_SEGMENTS, "priority": "bulk"}).json()
        assert wait_for_job(client, bulk["id"])["status"] == "succeeded"
    assert max(during_bulk) >= (1 if threads_can_come_back() else 0), "no bulk task thread was lowered"
    wait_for(lambda: _only_the_batcher_lowered(worker.pid, 1.0), bool, 60, "only the bulk batcher's threads lowered")
    during_interactive: list[int] = []
    with _sampled(worker.pid, during_interactive):
        quick = client.post("/v1/jobs", json={"text": "Me first, please."}).json()
        assert wait_for_job(client, quick["id"])["status"] == "succeeded"
    assert max(during_interactive) == 0, "an interactive job's thread ran lowered"
