"""Issue 35's done-when for sweeping and the service worker, on the whole stack of real processes
(``bench/fault_stack.py``) at production's sweep and lease settings: Redis SIGKILLed right after
submits (restarted half a second later, as ``ttsq dev``'s supervisor does) with beat frozen, and two
service workers of which one is frozen and kept frozen while it holds a batch's finishing task, the
sweeping lease or a webhook attempt. Behind the ``faults`` marker (minutes each):
``make faults`` runs them. What they showed is in docs/RELIABILITY.md."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Final, cast

import httpx
import pytest
from pydantic import SecretStr

from cli.commands import webhook_worker_argv
from cli.processes import ManagedProcess, wait_until
from cli.workerpool import wait_for_node
from tests.conftest import TEST_WEBHOOK_SECRET, create_record
from tests.faults_support import FaultStack, fault_stack, record_figures, short_texts, wait_terminal
from tests.receiver import Receiver
from tests.test_sweeper import create_batch
from ttsq.batches import BatchRecord, BatchStore
from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import SERVICE_UNACKED_PREFIX, SWEEP_LEADER_KEY
from ttsq.job_record import JobStatus
from ttsq.settings import settings_env

pytestmark = pytest.mark.faults

RECOVERY_BOUND_S: Final = 15.0
"""Issue 35: every accepted job succeeds, and no sweep or batch finish waits, longer than this after
the fault."""

SUPERVISOR_RESTART_S: Final = 0.5
"""``ttsq dev``'s supervisor starts a dead child again after 0.5 s (``cli/supervisor.py``)."""

JOBS: Final = 8


def _ended_after(moment: float, finished: list[datetime | None]) -> float:
    """Seconds from ``moment`` (Unix time) to the last of ``finished``; infinite if one is missing."""
    if any(at is None for at in finished):
        return float("inf")
    return max(at.timestamp() for at in finished if at is not None) - moment


@pytest.mark.timeout(600)
def test_redis_killed_right_after_submits_with_beat_frozen(tmp_path: Path) -> None:
    """Eight jobs accepted, then at once Redis SIGKILLed (restarted 0.5 s later from its append-only
    file) while beat is frozen: what Redis lost (messages taken and not yet held, entry tasks) is found
    by the sweep loop of the service worker, which notices the restart, and every job succeeds within
    15 s of the kill (150 s and more before issue 35: the sweeper waited 120 s, then for beat)."""
    with fault_stack(tmp_path) as stack, httpx.Client(base_url=stack.api_url, timeout=30) as api:
        beat = stack.processes["beat"]
        beat.kill(signal.SIGSTOP)
        try:
            ids = []
            for text in short_texts(JOBS):
                response = api.post("/v1/jobs", json={"text": text})
                assert response.status_code == 202, response.text
                ids.append(response.json()["id"])
            killed_at = time.time()
            stack.redis_server.kill()
            time.sleep(SUPERVISOR_RESTART_S)
            stack.redis_server.start()
            found = wait_terminal(stack.jobs, ids, 120)
        finally:
            beat.kill(signal.SIGCONT)
        statuses = sorted(r.status.value if r is not None else "missing" for r in found.values())
        last_end = _ended_after(killed_at, [r.finished_at if r is not None else None for r in found.values()])
        requeued = sum(r.requeues for r in found.values() if r is not None)
        log = stack.log_path("service").read_text(errors="replace")
        record_figures(
            "redis_kill_after_submits_beat_frozen",
            {
                "jobs": len(ids),
                "statuses": statuses,
                "last_success_after_kill_s": round(last_end, 1),
                "requeued_by_the_sweeper": requeued,
                "restart_noticed": "Redis restarted or failed over" in log,
            },
        )
    assert statuses == ["succeeded"] * JOBS, statuses
    assert last_end <= RECOVERY_BOUND_S, f"the last job succeeded {last_end:.1f} s after the kill"


def _second_service_worker(stack: FaultStack) -> ManagedProcess:
    """Another service worker beside the stack's, once it answers a ping."""
    env = {**os.environ, **settings_env(stack.settings)}
    argv = webhook_worker_argv(4, "service2@%h")
    second = stack.processes["service2"] = ManagedProcess("service2", argv, stack.log_path("service2"), env)
    wait_for_node(stack.settings, "service2@", second.start(), 60)
    return second


def _leader_pid(stack: FaultStack) -> int | None:
    """The pid of the service worker holding the sweeping lease (its token is ``host:pid:…``)."""
    token = cast(bytes | None, stack.redis_client.get(SWEEP_LEADER_KEY))
    return None if token is None else int(token.decode().split(":")[1])


def _held(stack: FaultStack, batch_id: str) -> bool:
    """Whether a service worker holds a message naming the batch (its finishing task)."""
    return any(batch_id.encode() in message for message in stack.redis_client.hvals(SERVICE_UNACKED_PREFIX))


def _finished_batch(stack: FaultStack, size: int) -> BatchRecord:
    """A batch whose items are all canceled, written straight to Redis: its finishing task is all it
    needs, and reading that many items keeps the task running long enough to be caught holding it."""
    batches = BatchStore(stack.redis_client, stack.settings.job_ttl_s)
    batch, items = create_batch(stack.jobs, batches, size)
    for item in items:
        stack.jobs.transition(item.id, {JobStatus.QUEUED}, JobStatus.CANCELED, {})
    return batch


def _catch_holding(stack: FaultStack, holder: ManagedProcess, tries: int = 10) -> tuple[BatchRecord, float, int]:
    """Send batches' finishing tasks until ``holder`` (the only service worker not frozen) is frozen
    while it holds one that has not finished: the batch, when it was frozen, and the tries it took."""
    batches = BatchStore(stack.redis_client, stack.settings.job_ttl_s)
    send = TaskPublisher(make_producer(stack.settings), stack.settings.queue)
    for attempt in range(1, tries + 1):
        batch = _finished_batch(stack, 300)
        send.finish_batch(batch.id)
        deadline = time.monotonic() + 30
        while not _held(stack, batch.id) and time.monotonic() < deadline:
            time.sleep(0.001)
        holder.kill(signal.SIGSTOP)
        frozen_at = time.time()
        if _held(stack, batch.id) and batches.get(batch.id).manifest_key is None:
            return batch, frozen_at, attempt
        holder.kill(signal.SIGCONT)  # it finished first: once more
    raise AssertionError(f"never caught the service worker holding an unfinished batch in {tries} tries")


@pytest.mark.timeout(600)
def test_a_frozen_service_worker_delays_no_sweep_and_no_batch_finish(tmp_path: Path) -> None:
    """Two service workers; the one leading the sweeps is frozen (SIGSTOP, kept frozen) while it holds
    a batch's finishing task, and a job loses its work at the same moment: the other takes the
    sweeping lease within 3 s and re-queues the job, and gets the finishing task back (8 s visibility
    timeout, 5 s claim, both no longer renewed): both end within 15 s of the freeze (before: the
    finishing task waited for a 2 h visibility timeout and a 10 min claim, the job for beat's sweep).
    Resumed, the frozen one finds its lease lost and acts on nothing it saw before."""
    with fault_stack(tmp_path) as stack:
        first = stack.processes["service"]
        wait_until(lambda: _leader_pid(stack) == first.pid, 30, "the first service worker leading")
        second = _second_service_worker(stack)
        second.kill(signal.SIGSTOP)
        try:
            batch, frozen_at, tries = _catch_holding(stack, first)
        finally:
            second.kill(signal.SIGCONT)
        lost = create_record(stack.jobs)  # stored, never queued: work lost at the freeze
        try:
            batches = BatchStore(stack.redis_client, stack.settings.job_ttl_s)
            wait_until(lambda: batches.get(batch.id).manifest_key is not None, 60, "the batch finished")
            job = wait_terminal(stack.jobs, [lost.id], 60)[lost.id]
            leader = _leader_pid(stack)
        finally:
            first.kill(signal.SIGCONT)
        finished = batches.get(batch.id).finished_at
        batch_after = _ended_after(frozen_at, [finished])
        job_after = _ended_after(frozen_at, [job.finished_at if job is not None else None])
        wait_until(lambda: "lost the lease" in stack.log_path("service").read_text(errors="replace"), 30, "resumed")
        time.sleep(2 * stack.settings.sweep_interval_s)  # the resumed worker's sweeps, if it made any
        after_resume = stack.jobs.get(lost.id)
        record_figures(
            "frozen_service_worker",
            {
                "tries_to_catch_it_holding_a_finish": tries,
                "batch_finished_after_freeze_s": round(batch_after, 1),
                "lost_job_ended_after_freeze_s": round(job_after, 1),
                "lost_job_status": None if job is None else job.status.value,
                "leader_after_freeze_is_the_other": leader == second.pid,
                "requeues_after_resume": after_resume.requeues,
            },
        )
    assert leader == second.pid
    assert job is not None
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert batch_after <= RECOVERY_BOUND_S, f"the batch finished {batch_after:.1f} s after the freeze"
    assert job_after <= RECOVERY_BOUND_S, f"the lost job ended {job_after:.1f} s after the freeze"
    assert after_resume.requeues == 1, "the resumed worker re-queued the job again"


@pytest.mark.timeout(600)
def test_a_frozen_service_worker_delays_no_webhook(tmp_path: Path) -> None:
    """Two service workers; the one attempting a job's webhook (its receiver keeps the first attempt
    waiting) is frozen and kept frozen: the event's claim (5 s, no longer renewed) lapses and the other
    delivers it within 15 s of the freeze (before: 75 s, the claim was the attempt's deadline plus
    60 s)."""
    receiver = Receiver()
    url = receiver.path("hang", 204)
    hooks = {"webhook_secret": SecretStr(TEST_WEBHOOK_SECRET), "webhook_allow_private": True}
    with fault_stack(tmp_path, **hooks) as stack, httpx.Client(base_url=stack.api_url, timeout=30) as api:
        first = stack.processes["service"]
        second = _second_service_worker(stack)
        second.kill(signal.SIGSTOP)
        try:
            response = api.post("/v1/jobs", json={"text": "Tell the receiver.", "webhook_url": url})
            assert response.status_code == 202, response.text
            job_id = response.json()["id"]
            wait_until(lambda: len(receiver.at(url)) == 1, 120, "the first attempt, held by the first worker")
            first.kill(signal.SIGSTOP)
            frozen_at = time.time()
        finally:
            second.kill(signal.SIGCONT)
        try:
            wait_until(lambda: api.get(f"/v1/jobs/{job_id}").json()["webhook"]["state"] == "delivered", 120, "sent")
            attempts = receiver.at(url)
        finally:
            first.kill(signal.SIGCONT)
        delivered_after = attempts[-1].at - frozen_at
        record_figures(
            "frozen_service_worker_webhook",
            {"attempts": len(attempts), "delivered_after_freeze_s": round(delivered_after, 1)},
        )
    receiver.close()
    assert len(attempts) == 2
    assert delivered_after <= RECOVERY_BOUND_S, f"the webhook arrived {delivered_after:.1f} s after the freeze"
