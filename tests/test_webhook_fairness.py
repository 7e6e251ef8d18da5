"""One tenant's misbehaving receivers take nothing that another tenant or maintenance needs (issue 19,
findings 9 and 10): jobs finished through a real API (canceled while queued: the terminal write is
the one every job makes), the real service worker with its dispatcher, and receivers on loopback
that never answer, trickle headers that never end, or answer tens of megabytes.

The suite's delivery deadline is 2 s (``tests/conftest.py``); ``tests/test_webhook_faults.py`` runs
the 200-job form with the production 15 s.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis

from api.main import create_app
from cli.commands import webhook_worker_argv
from cli.processes import ManagedProcess, wait_until
from cli.workerpool import wait_for_node
from tests.conftest import serve, wait_for
from tests.receiver import RawReceiver, Receiver, answers_with, never_answers, trickles
from ttsq.broker import make_producer
from ttsq.constants import CLEANUP_TASK, MAINTENANCE_QUEUE, SWEEPS_KEY, WEBHOOK_TENANTS_KEY, consumed_queues
from ttsq.settings import Settings, settings_env
from ttsq.tenants import Limits, TenantStore

SHORT = "Tell my receiver."
STUCK_EVENTS = 96
"""Events of the tenant whose receivers misbehave: three times its own limit of attempts in flight."""
PROMPT_S = 10.0
"""How soon after its job finished another tenant's event must arrive (the issue's bound). Behind the
stuck deliveries, each holding an attempt for the 2 s deadline, it would wait about 50 s."""
MAINTENANCE_PROMPT_S = 20.0
"""How soon a cleanup sent meanwhile must have run, and a sweep have ended (the leader sweeps every
2 s); behind the stuck deliveries, about 50 s."""


@dataclass(frozen=True)
class TenantApi:
    """An API that requires keys and sends to queues no worker reads: its jobs stay queued until canceled."""

    url: str
    tenants: TenantStore

    def tenant(self) -> tuple[str, httpx.Client]:
        """A new tenant's id and a client with its key."""
        key, tenant = self.tenants.create(f"hooks-{uuid.uuid4().hex[:6]}", Limits())
        return tenant.id, httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture(scope="module")
def tenant_api(settings: Settings, webhook_worker: ManagedProcess) -> Iterator[TenantApi]:
    """One for the module (each app starts its own helper processes): every test makes tenants of its
    own, and its jobs, canceled while queued, leave only their messages in the idle queues."""
    queue = f"idle-{uuid.uuid4()}"
    client = redis.Redis.from_url(settings.redis_url)
    with serve(
        create_app(settings.model_copy(update={"auth_required": True, "queue": queue, "model_affinity": False}))
    ) as url:
        yield TenantApi(url, TenantStore(client))
    client.delete(*consumed_queues(queue))
    client.close()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def finish(client: httpx.Client, webhook_url: str) -> dict[str, Any]:
    """Submit a job with a receiver and cancel it while it is queued: it is finished, and its
    ``job.canceled`` event due. Returns the job as the cancel answered."""
    submitted = client.post("/v1/jobs", json={"text": SHORT, "webhook_url": webhook_url})
    assert submitted.status_code == 202, submitted.text
    canceled = client.delete(f"/v1/jobs/{submitted.json()['id']}")
    assert canceled.status_code == 200, canceled.text
    job: dict[str, Any] = canceled.json()
    assert job["status"] == "canceled"
    return job


def finished_at(job: dict[str, Any]) -> float:
    return datetime.fromisoformat(job["finished_at"]).timestamp()


def first_arrival(receiver: Receiver, url: str, timeout_s: float) -> float | None:
    """When the receiver got its first request at ``url`` (Unix seconds), or None within ``timeout_s``."""
    try:
        wait_until(lambda: bool(receiver.at(url)), timeout_s, f"a request at {url}")
    except TimeoutError:
        return None
    return receiver.at(url)[0].at


def send_maintenance(settings: Settings) -> dict[str, float]:
    """A cleanup, as beat sends it; task id → when sent (Unix seconds). (Sweeps run on the leading
    service worker's own thread, not as tasks: see :func:`sweeps_go_on`.)"""
    producer = make_producer(settings)
    try:
        task = producer.send_task(CLEANUP_TASK, queue=MAINTENANCE_QUEUE)
        return {str(task.id): time.time()}
    finally:
        producer.close()


def sweeps_go_on(client: redis.Redis, timeout_s: float) -> float | None:
    """Seconds until the sweep count grew by two (a whole sweep begun and ended after this call),
    None if it did not within ``timeout_s``."""
    start = time.monotonic()
    first = int(client.get(SWEEPS_KEY) or 0)
    try:
        wait_until(lambda: int(client.get(SWEEPS_KEY) or 0) >= first + 2, timeout_s, "two sweeps")
    except TimeoutError:
        return None
    return round(time.monotonic() - start, 2)


def ran_within(worker: ManagedProcess, sent: dict[str, float], timeout_s: float) -> dict[str, float | None]:
    """Task id → seconds from its sending until the service worker logged it done (None: not within
    ``timeout_s``). The log is read as it grows, so a time is when the line was first seen."""
    log_path = worker.log_path
    assert log_path is not None
    seen: dict[str, float | None] = dict.fromkeys(sent)

    def all_seen() -> bool:
        text = log_path.read_text(errors="replace")
        for task_id, at in sent.items():
            if seen[task_id] is None and f"[{task_id}] succeeded" in text:
                seen[task_id] = round(time.time() - at, 2)
        return None not in seen.values()

    with contextlib.suppress(TimeoutError):
        wait_until(all_seen, timeout_s, "the maintenance tasks")
    return seen


def close_and_drain(stuck: list[RawReceiver], client: redis.Redis, tenant: str) -> None:
    """Close the stuck receivers (their events' next attempts fail at once) and wait until the
    tenant has nothing scheduled, so later tests find the dispatcher idle."""
    for server in stuck:
        server.close()
    wait_until(lambda: client.zscore(WEBHOOK_TENANTS_KEY, tenant) is None, 60, "the stuck tenant's events to end")


SHAPES: dict[str, Callable[[], list[RawReceiver]]] = {
    "a receiver that never answers and one whose headers never end": lambda: [
        RawReceiver(never_answers),
        RawReceiver(trickles),
    ],
    "twelve receivers that never answer": lambda: [RawReceiver(never_answers) for _ in range(12)],
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_tenants_stuck_receivers_delay_neither_another_tenants_event_nor_maintenance(
    shape: str,
    tenant_api: TenantApi,
    receiver: Receiver,
    settings: Settings,
    webhook_worker: ManagedProcess,
    redis_client: redis.Redis,
) -> None:
    stuck = SHAPES[shape]()
    hostile, a = tenant_api.tenant()
    _, b = tenant_api.tenant()
    try:
        for n in range(STUCK_EVENTS):
            finish(a, stuck[n % len(stuck)].url)
        wait_until(lambda: sum(s.accepted for s in stuck) >= 4, 30, "the stuck receivers' first connections")
        url = receiver.path(204)
        sent = send_maintenance(settings)
        job = finish(b, url)
        swept = sweeps_go_on(redis_client, 30)
        arrived = first_arrival(receiver, url, 30)
        maintenance = ran_within(webhook_worker, sent, 30)
        in_flight = sum(s.accepted for s in stuck)
    finally:
        close_and_drain(stuck, redis_client, hostile)
        a.close()
        b.close()
    assert arrived is not None, "the other tenant's event never arrived"
    late = arrived - finished_at(job)
    assert late < PROMPT_S, f"the other tenant's event arrived {late:.1f}s after its job finished"
    assert all(s is not None and s < MAINTENANCE_PROMPT_S for s in maintenance.values()), (
        f"maintenance waited behind deliveries: seconds to run {maintenance}"
    )
    assert swept is not None, "no sweep ended while the deliveries were stuck"
    assert swept < MAINTENANCE_PROMPT_S, f"sweeps waited behind deliveries: {swept} s"
    assert in_flight >= 4, "the stuck receivers never held an attempt: nothing was tested"


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


class PeakRss:
    """The largest resident size of a process, sampled every 20 ms while in use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss(self.pid))


HUGE_ANSWER_BYTES = 32 * 1024 * 1024
HUGE_EVENTS = 16
MIB = 1024 * 1024


def test_answers_of_tens_of_megabytes_leave_the_delivering_process_as_it_was(
    tenant_api: TenantApi, receiver: Receiver, webhook_worker: ManagedProcess, redis_client: redis.Redis
) -> None:
    """Finding 10: the whole answer was read into memory (32 receivers answering 50 MB took the
    service worker from 202 MB to 1,586 MB, and 1,530 MB stayed). Only a few KiB are read now."""
    servers = [RawReceiver(answers_with(HUGE_ANSWER_BYTES)) for _ in range(2)]
    _, client = tenant_api.tenant()
    warm = finish(client, receiver.path(204))  # the dispatcher's code paths loaded before the baseline
    wait_until(lambda: delivery(client, warm["id"])["state"] == "delivered", 30, "a first delivery")
    before = rss(webhook_worker.pid)
    try:
        with PeakRss(webhook_worker.pid) as peak:
            jobs = [finish(client, servers[n % len(servers)].url) for n in range(HUGE_EVENTS)]
            wait_until(
                lambda: all(delivery(client, job["id"])["state"] != "pending" for job in jobs), 60, "the deliveries"
            )
        after = rss(webhook_worker.pid)
        states = {delivery(client, job["id"])["state"] for job in jobs}
        answered = sum(s.accepted for s in servers)
    finally:
        for server in servers:
            server.close()
        client.close()
    assert states == {"delivered"}
    assert answered == HUGE_EVENTS
    grew = (peak.peak - before) / MIB
    kept = (after - before) / MIB
    total = HUGE_EVENTS * HUGE_ANSWER_BYTES / MIB
    assert grew < 32, f"the service worker grew {grew:.0f} MiB at its peak receiving {total:.0f} MiB of answers"
    assert kept < 16, f"the service worker kept {kept:.0f} MiB after receiving {total:.0f} MiB of answers"


def delivery(client: httpx.Client, job_id: str) -> dict[str, Any]:
    hook: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()["webhook"]
    return hook


def test_two_service_workers_deliver_every_event_once(
    tenant_api: TenantApi, receiver: Receiver, settings: Settings, tmp_path: Path, webhook_worker: ManagedProcess
) -> None:
    """Several dispatchers take from one schedule: each attempt at an event is claimed by one of them.
    The receiver answers after ``SLOW_S``, so that both dispatchers hold attempts at once."""
    env = {**os.environ, **settings_env(settings)}
    second = ManagedProcess("service-2", webhook_worker_argv(2, "service-2@%h"), tmp_path / "service-2.log", env)
    wait_for_node(settings, "service-2@", second.start(), 60)
    _, client = tenant_api.tenant()
    try:
        urls = {finish(client, url)["id"]: url for url in [receiver.path("slow") for _ in range(48)]}
        # Watched at the receiver (in this process): asking the API for 48 jobs ten times a second
        # took the CPU that the receiver needed to answer within the suite's 2 s delivery deadline.
        wait_until(lambda: all(receiver.at(url) for url in urls.values()), 60, "an attempt at every event")
        states = wait_for(
            lambda: {job_id: delivery(client, job_id) for job_id in urls},
            lambda hooks: all(hook["state"] != "pending" for hook in hooks.values()),
            60,
            "the deliveries",
        )
        second_log = (tmp_path / "service-2.log").read_text()
    finally:
        second.stop()
        client.close()
    assert webhook_worker.log_path is not None
    logs = webhook_worker.log_path.read_text() + second_log
    assert {hook["state"] for hook in states.values()} == {"delivered"}
    # An event claimed by both would reach the receiver once more than its attempts say, and the
    # later of the two would be logged as overtaken. (An attempt that ran past the deadline on a
    # loaded machine is attempted again: one claim after another, not two at once.)
    overtaken = set(re.findall(r"job (\S+): webhook attempt \d+ overtaken", logs))
    for job_id, url in urls.items():
        attempts = states[job_id]["attempts"]
        assert len(receiver.at(url)) <= attempts, (job_id, states[job_id])
        assert f"job {job_id}: webhook attempt {attempts}: delivered" in logs  # the lines read as above
        assert job_id not in overtaken
    assert "webhook attempt 1: delivered" in second_log, "the second dispatcher delivered nothing: nothing was shared"
