"""Who is calling: the tenant selected by the request's API key (``Authorization: Bearer ttsq_…``).

With keys required (``TTSQ_AUTH_REQUIRED``, production by default) a request without a live key is
refused with 401. Without, a request whose bearer token is not a known key is the anonymous tenant:
clients such as the OpenAI SDK always send some token. Every request of a tenant is counted against
its requests-per-second limit here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Final

from fastapi import Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.deps import StateDep
from ttsq.errors import Unauthorized
from ttsq.tenants import ANONYMOUS_TENANT, Tenant

_bearer = HTTPBearer(auto_error=False, description="An API key from `ttsq keys create`: `Bearer ttsq_…`.")

ANONYMOUS: Final = Tenant(id=ANONYMOUS_TENANT, name=ANONYMOUS_TENANT, created_at=datetime(2026, 1, 1, tzinfo=UTC))


async def current_tenant(
    state: StateDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Tenant:
    token = credentials.credentials if credentials is not None else None
    tenant = await run_in_threadpool(state.tenants.by_key, token) if token else None
    if tenant is None:
        if state.settings.keys_required:
            reason = "no API key given" if token is None else "the API key is unknown or revoked"
            raise Unauthorized(f"{reason}; send 'Authorization: Bearer <key>' with a key from 'ttsq keys create'")
        tenant = ANONYMOUS
    limits = tenant.limits.over(state.settings.default_limits)
    await run_in_threadpool(state.quotas.count_request, tenant.id, limits)
    return tenant.model_copy(update={"limits": limits})


TenantDep = Annotated[Tenant, Depends(current_tenant)]
"""The caller's tenant, its limits already merged with the server's defaults."""
