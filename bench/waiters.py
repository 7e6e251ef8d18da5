"""``waiters`` section: one API process holding 1,000 event streams, then 1,000 long polls.

Jobs are submitted while no worker runs, so they wait; the waiters connect from one event loop in
this process; the API's RSS and CPU time are read with psutil before, during a 10-second hold
(where a polling design would burn CPU) and after a worker is started and every job finishes, when
each waiter must have heard the terminal state.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

import httpx
import psutil

from bench.stack import BenchStack

WAITERS: Final = 1000
JOBS: Final = 50
HOLD_S: Final = 10.0


async def _sse(client: httpx.AsyncClient, job_id: str, opened: asyncio.Event) -> str:
    last = ""
    async with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
        opened.set()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                last = line.removeprefix("event: ")
    return last


async def _poll(client: httpx.AsyncClient, job_id: str, opened: asyncio.Event) -> str:
    opened.set()
    response = await client.get(f"/v1/jobs/{job_id}", params={"wait": 60})
    status: str = response.json()["status"]
    return status


async def _hold(stack: BenchStack, kind: str, job_ids: list[str]) -> dict[str, Any]:
    api = psutil.Process(stack.api.pid)
    rss_before = api.memory_info().rss
    limits = httpx.Limits(max_connections=WAITERS + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=stack.url, timeout=120, limits=limits) as client:
        waiter = _sse if kind == "sse" else _poll
        events = [asyncio.Event() for _ in range(WAITERS)]
        tasks = [asyncio.create_task(waiter(client, job_ids[n % len(job_ids)], events[n])) for n in range(WAITERS)]
        await asyncio.gather(*(e.wait() for e in events))
        await asyncio.sleep(1.0)  # the last requests reach their wait
        cpu_before = sum(api.cpu_times()[:2])
        await asyncio.sleep(HOLD_S)
        cpu_hold = sum(api.cpu_times()[:2]) - cpu_before
        rss_held = api.memory_info().rss
        connections = len(api.net_connections(kind="tcp"))
        started = time.monotonic()
        stack.start_workers(1)
        finals = await asyncio.gather(*tasks)
        drained = time.monotonic() - started
    return {"waiters": WAITERS, "jobs": len(job_ids), "api_tcp_connections_held": connections,
            "rss_before_mib": rss_before / 2**20, "rss_held_mib": rss_held / 2**20,
            "rss_per_waiter_kib": (rss_held - rss_before) / WAITERS / 1024,
            "api_cpu_s_over_hold": cpu_hold, "hold_s": HOLD_S,
            "all_heard_succeeded": all(f == "succeeded" for f in finals),
            "finals": sorted(set(finals)), "worker_start_to_all_answered_s": drained}  # fmt: skip


def waiters(stack: BenchStack) -> dict[str, Any]:
    results = {}
    for kind in ("sse", "long_poll"):
        stack.stop_workers()
        job_ids = [stack.submit(f"Waiter number {n} is listening.").job_id for n in range(JOBS)]
        results[kind] = asyncio.run(_hold(stack, kind, job_ids))
    return results
