"""Every FastAPI dependency of the routes, as ``Annotated`` aliases: the app's state, the caller's
tenant, the JSON content type, ids in paths, paging, and the ``Idempotency-Key`` header.

The tenant is the one selected by the request's API key (``Authorization: Bearer ttsq_…``). With keys
required (``TTSQ_AUTH_REQUIRED``, production by default) a request without a live key is refused with
401. Without, a request whose bearer token is not a known key is the anonymous tenant: clients such as
the OpenAI SDK always send some token. Every request of a tenant is counted against its
requests-per-second limit here.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Final

from fastapi import Depends, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.errors import ApiError
from api.idempotency import IN_FLIGHT_WAIT_S
from api.state import AppState
from ttsq.batches import BatchRecord
from ttsq.errors import BatchNotFound, JobNotFound, Unauthorized
from ttsq.job_record import JobRecord
from ttsq.tenants import ANONYMOUS, Tenant

MAX_PAGE: Final = 200
"""Most jobs, batches or batch items in one page."""


async def get_state(request: Request) -> AppState:
    """The app's state. This and the other dependencies that only look at the request are ``async``:
    FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop (two context switches and
    the event loop's wake-up) for a few attribute reads, on every request (issue 38)."""
    state: AppState = request.app.state.ttsq
    return state


StateDep = Annotated[AppState, Depends(get_state)]
"""Long-lived clients the API shares between requests, built once at start-up."""

_bearer = HTTPBearer(auto_error=False, description="An API key from `ttsq keys create`: `Bearer ttsq_…`.")


KEY_TENANT: Final = "ttsq_key_tenant"
"""Where the key check (``api.key_check``) leaves, in the request's state, the tenant the request's
key selected a moment before, with the key: the dependency then reads it once, not twice."""


async def current_tenant(
    request: Request, state: StateDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Tenant:
    token = credentials.credentials if credentials is not None else None
    checked: tuple[str, Tenant] | None = getattr(request.state, KEY_TENANT, None)
    known = checked[1] if checked is not None and checked[0] == token else None
    if _reads_store(state, token, known):
        return await run_in_threadpool(tenant_of, state, token, known)
    return tenant_of(state, token, known)  # no Redis call: no thread hop


def _reads_store(state: AppState, token: str | None, known: Tenant | None) -> bool:
    """Whether :func:`tenant_of` calls Redis (a blocking call, made off the event loop): to look a
    key up that the key check did not, or to count the request against a per-second limit."""
    if token is not None and known is None:
        return True
    tenant = known or ANONYMOUS
    return tenant.limits.over(state.settings.default_limits).requests_per_second is not None


def tenant_of(state: AppState, token: str | None, known: Tenant | None = None) -> Tenant:
    """The tenant ``token`` selects (``known``: as the key check found it for this same request), its
    limits merged with the server's defaults, with this request counted; the anonymous tenant where
    keys are not required. Shared by every protocol that carries a key (the Wyoming server's comes
    from its settings)."""
    tenant = known or (state.stores.tenants.by_key(token) if token else None)
    if tenant is None:
        if state.settings.keys_required:
            raise key_refused(token)
        tenant = ANONYMOUS
    limits = tenant.limits.over(state.settings.default_limits)
    state.stores.quotas.count_request(tenant.id, limits)
    return tenant.model_copy(update={"limits": limits})


def key_refused(token: str | None) -> Unauthorized:
    """The 401 of a request whose key (``token``, None when it sent none) selects no tenant."""
    reason = "no API key given" if token is None else "the API key is unknown or revoked"
    return Unauthorized(f"{reason}; send 'Authorization: Bearer <key>' with a key from 'ttsq keys create'")


TenantDep = Annotated[Tenant, Depends(current_tenant)]
"""The caller's tenant, its limits already merged with the server's defaults."""


async def require_json(content_type: Annotated[str | None, Header()] = None) -> None:
    """Refuse bodies that are not declared as JSON, before anything else looks at them."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(415, "unsupported_media_type", "Content-Type must be application/json")


async def _job_id(job_id: Annotated[str, Path(description="Job id (UUID)")]) -> str:
    try:
        return str(uuid.UUID(job_id))
    except ValueError:
        raise JobNotFound(job_id) from None


JobId = Annotated[str, Depends(_job_id)]
"""A job id from the path, in canonical form; anything that is no UUID is an unknown job (404)."""


def owned_job(state: AppState, tenant: Tenant, job_id: str) -> JobRecord:
    """The tenant's job; another tenant's id is as unknown as an id that never existed."""
    record = state.stores.jobs.get(job_id)
    if record.tenant != tenant.id:
        raise JobNotFound(job_id)
    return record


async def _existing_job_id(job_id: JobId, state: StateDep, tenant: TenantDep) -> str:
    """404 before a stream starts, not inside it."""
    await run_in_threadpool(owned_job, state, tenant, job_id)
    return job_id


ExistingJobId = Annotated[str, Depends(_existing_job_id)]
"""A job id of the caller's that exists now."""


async def _batch_id(batch_id: Annotated[str, Path(description="Batch id (UUID)")]) -> str:
    try:
        return str(uuid.UUID(batch_id))
    except ValueError:
        raise BatchNotFound(batch_id) from None


BatchId = Annotated[str, Depends(_batch_id)]
"""A batch id from the path, in canonical form."""


def owned_batch(state: AppState, tenant: Tenant, batch_id: str) -> BatchRecord:
    """The tenant's batch; another tenant's id is as unknown as an id that never existed."""
    record = state.stores.batches.get(batch_id)
    if record.tenant != tenant.id:
        raise BatchNotFound(batch_id)
    return record


PageLimit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Entries per page.")]
PageCursor = Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page.")]

IdempotencyKey = Annotated[
    str | None,
    Header(
        description="Makes retries safe: the same key and body within 24 h answer with what the first request "
        "created (200); the same key with another body is refused (409 idempotency_conflict); a repeat while the "
        f"first is still being handled waits for it up to {IN_FLIGHT_WAIT_S:g} s, then answers 409 "
        "idempotency_in_flight with Retry-After.",
    ),
]
