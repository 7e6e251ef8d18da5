"""``waiters`` section: one API process holding 1,000 event streams, then 1,000 long polls.

Jobs are submitted while no worker runs, so they wait; the waiters connect from one event loop in
this process; the API's RSS and CPU time are read with psutil before, during a 10-second hold
(where a polling design would burn CPU) and after a worker is started and every job finishes, when
each waiter must have heard the terminal state. Both processes need an open-files limit above the
waiter count: this one raises its own soft limit, and the API's (a child, same user) if it is lower.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any, Final

import httpx
import psutil

from bench.stack import BenchStack
from ttsq.job_record import JobStatus

WAITERS: Final = 1000
JOBS: Final = 50
HOLD_S: Final = 10.0
WAIT_S: Final = 60
FD_HEADROOM: Final = 256
"""Descriptors besides the waiters' sockets: Redis, logs, the interpreter's own."""
CONNECT_TIMEOUT_S: Final = 60.0
SETTLE_CPU_S: Final = 0.05
"""The API counts as settled once it spends less than this CPU time in a second: every request has
then reached its wait. A design that polls never settles, and the hold starts after the timeout."""


def _cpu_s(process: psutil.Process) -> float:
    user, system = process.cpu_times()[:2]
    return user + system


def raise_own_open_files(needed: int) -> dict[str, int]:
    """This process's soft RLIMIT_NOFILE raised to ``needed`` (at most the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"soft": soft, "hard": hard}


def api_open_files(api: psutil.Process, needed: int) -> dict[str, int]:
    """The API's RLIMIT_NOFILE as it was started, raised (prlimit) if below ``needed``."""
    soft, hard = api.rlimit(psutil.RLIMIT_NOFILE)
    limits = {"soft": soft, "hard": hard}
    if soft != psutil.RLIM_INFINITY and soft < needed:
        raised = needed if hard == psutil.RLIM_INFINITY else min(needed, hard)
        api.rlimit(psutil.RLIMIT_NOFILE, (raised, hard))
        limits["raised_soft_to"] = raised
    return limits


async def _sse(client: httpx.AsyncClient, job_id: str, opened: asyncio.Event) -> str:
    """The name of the last event the stream sent before it ended."""
    last = ""
    async with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
        response.raise_for_status()
        opened.set()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                last = line.removeprefix("event: ")
    return last


async def _poll(client: httpx.AsyncClient, job_id: str, opened: asyncio.Event) -> str:
    """The status a long poll answered terminal with, asking again when a wait runs out."""
    opened.set()
    while True:
        response = await client.get(f"/v1/jobs/{job_id}", params={"wait": WAIT_S})
        status = JobStatus(response.raise_for_status().json()["status"])
        if status.terminal:
            return status.value


async def _connected(api: psutil.Process, port: int, count: int) -> int:
    """Waits until the API holds ``count`` established connections on its listening ``port``."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        held = sum(
            c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port for c in api.net_connections(kind="tcp")
        )
        if held >= count or time.monotonic() > deadline:
            return held
        await asyncio.sleep(0.5)


async def _settled(api: psutil.Process) -> float:
    """Seconds until the API's CPU use falls to ``SETTLE_CPU_S`` per second (or the timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < CONNECT_TIMEOUT_S:
        before = _cpu_s(api)
        await asyncio.sleep(1.0)
        if _cpu_s(api) - before < SETTLE_CPU_S:
            break
    return time.monotonic() - started


async def _hold(stack: BenchStack, kind: str, job_ids: list[str]) -> dict[str, Any]:
    api = psutil.Process(stack.api.pid)
    rss_before = api.memory_info().rss
    limits = httpx.Limits(max_connections=WAITERS + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=stack.url, timeout=WAIT_S + 60, limits=limits) as client:
        waiter = _sse if kind == "sse" else _poll
        events = [asyncio.Event() for _ in range(WAITERS)]
        tasks = [asyncio.create_task(waiter(client, job_ids[n % len(job_ids)], events[n])) for n in range(WAITERS)]
        await asyncio.gather(*(e.wait() for e in events))
        connections = await _connected(api, httpx.URL(stack.url).port or 80, WAITERS)
        settle = await _settled(api)
        cpu_before = _cpu_s(api)
        await asyncio.sleep(HOLD_S)
        cpu_hold = _cpu_s(api) - cpu_before
        rss_held = api.memory_info().rss
        started = time.monotonic()
        stack.start_workers(1)
        finals = await asyncio.gather(*tasks)
        drained = time.monotonic() - started
    return {"waiters": WAITERS, "jobs": len(job_ids), "api_connections_held": connections,
            "settle_s": settle,
            "rss_before_mib": rss_before / 2**20, "rss_held_mib": rss_held / 2**20,
            "rss_per_waiter_kib": (rss_held - rss_before) / WAITERS / 1024,
            "api_cpu_s_over_hold": cpu_hold, "hold_s": HOLD_S,
            "all_heard_succeeded": all(f == JobStatus.SUCCEEDED for f in finals),
            "finals": sorted(set(finals)), "worker_start_to_all_answered_s": drained}  # fmt: skip


def waiters(stack: BenchStack) -> dict[str, Any]:
    needed = WAITERS + FD_HEADROOM
    limits = {"bench": raise_own_open_files(needed), "api": api_open_files(psutil.Process(stack.api.pid), needed)}
    results: dict[str, Any] = {}
    for kind in ("sse", "long_poll"):
        stack.stop_workers()
        job_ids = [stack.submit(f"Waiter number {n} is listening.").job_id for n in range(JOBS)]
        results[kind] = asyncio.run(_hold(stack, kind, job_ids))
    return {**results, "open_files": limits}
