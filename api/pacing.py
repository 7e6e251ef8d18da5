"""A submission waits for its tenant's turn while other tenants submit too (``ttsq.pacing``): on the
event loop, so a waiting flood holds no thread, only its connection."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from api.deps import StateDep, TenantDep
from api.state import AppState
from ttsq.errors import QuotaExceeded
from ttsq.pacing import MAX_WAIT_S, submission_cost
from ttsq.tenants import Tenant


async def wait_for_turn(state: AppState, tenant: Tenant, body_bytes: int) -> None:
    """Wait for the tenant's turn to submit ``body_bytes``. When it is too far away the refusal
    (429) also comes after the longest wait: a client that asks again at once is held to its share
    by the waits themselves, and costs the API a request every few seconds, not hundreds a second."""
    cost = submission_cost(body_bytes)
    try:
        wait = await run_in_threadpool(state.stores.pacer.turn, tenant.id, cost, tenant.limits.submits_per_second)
    except QuotaExceeded:
        await asyncio.sleep(MAX_WAIT_S)
        raise
    if wait > 0:
        await asyncio.sleep(wait)


async def _paced(request: Request, state: StateDep, tenant: TenantDep) -> None:
    await wait_for_turn(state, tenant, len(await request.body()))


PacedSubmission = Annotated[None, Depends(_paced)]
"""A route that submits work: it runs once the tenant's turn has come."""
