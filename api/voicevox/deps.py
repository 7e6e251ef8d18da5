"""What every VOICEVOX route shares: the caller's tenant (a bearer key, or the facade's own key for
clients that send no header) and refusals in VOICEVOX's error shape.

``TTSQ_VOICEVOX_API_KEY`` exists because most VOICEVOX clients (Discord read-aloud bots, editors)
cannot send an ``Authorization`` header: requests without one are then the key's tenant. Anyone who
can reach the facade's port speaks as that tenant, so set it only where the port is private (docs/VOICEVOX.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from api.deps import StateDep, current_tenant
from api.errors import error_status
from tts_core.base.errors import TTSError
from ttsq.errors import ServiceError
from ttsq.settings import Settings
from ttsq.tenants import Tenant

Loc = tuple[str | int, ...]
"""Where a refused value is, as FastAPI's validation errors say it: ``("query", "speaker")``."""


class Refused(Exception):
    """Bad input, answered with VOICEVOX's 422 ``{"detail": [{"loc", "msg", "type"}]}``."""

    def __init__(self, loc: Loc, msg: str, kind: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg
        self.kind = kind


@contextmanager
def refused_at(loc: Loc) -> Iterator[None]:
    """ttsq's own refusals of bad input (text too long, text the voice cannot read, an unknown
    option) as :class:`Refused` at ``loc``; other errors (quotas, outages) keep their status."""
    try:
        yield
    except (TTSError, ServiceError) as e:
        if error_status(e) not in (413, 422):
            raise
        raise Refused(loc, str(e), e.code) from e


_bearer = HTTPBearer(auto_error=False, description="An API key from `ttsq keys create`: `Bearer ttsq_…`.")


def facade_key(settings: Settings) -> SecretStr | None:
    """The key of a request that sends no ``Authorization`` header."""
    return settings.voicevox_api_key


async def voicevox_tenant(
    request: Request, state: StateDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Tenant:
    """The header's key, else ``voicevox_api_key``, else none (anonymous when keys are not required)."""
    key = facade_key(state.settings)
    if credentials is None and key is not None:
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=key.get_secret_value())
    return await current_tenant(request, state, credentials)


VoicevoxTenantDep = Annotated[Tenant, Depends(voicevox_tenant)]
"""The caller's tenant, its limits merged with the server's defaults, its request counted."""
