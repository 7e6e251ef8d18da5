"""API keys checked before any body is read, where keys are required (``TTSQ_AUTH_REQUIRED``).

FastAPI reads and parses a request's body before it runs the route's dependencies, so that without
this an unauthenticated client could make the API receive and parse bodies up to the body cap
(``TTSQ_MAX_REQUEST_BYTES``) only to answer 401. This pure ASGI middleware finds the route a
request goes to, and where that route takes the caller's tenant (a dependency on the app's tenant
function, at any depth) it looks the key up first: a missing, unknown or revoked key is answered
401 by the app's own error handler (the same body as the route's dependency gives) before the body
is received. Routes that take no tenant (health, docs, the web page) are passed on untouched, as is
every request where keys are not required; the route's dependency still selects and counts the
tenant as before.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import SecretStr
from starlette._utils import get_route_path
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from api.deps import KEY_TENANT, key_refused
from api.state import AppState
from ttsq.settings import Settings

FallbackKey = Callable[[Settings], SecretStr | None]
"""The key a request without an ``Authorization`` header speaks with (the VOICEVOX facade's own)."""


def bearer_token(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, as FastAPI's ``HTTPBearer`` reads it."""
    scheme, token = get_authorization_scheme_param(Headers(scope=scope).get("authorization"))
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _calls(dependant: Dependant) -> set[Callable[..., Any]]:
    """Every callable a route's dependencies run, sub-dependencies included."""
    found: set[Callable[..., Any]] = set()
    pending = [dependant]
    while pending:
        current = pending.pop()
        if current.call is not None:
            found.add(current.call)
        pending.extend(current.dependencies)
    return found


@dataclass(frozen=True)
class Endpoint:
    """A route as the middleware matches it: its full path's pattern, methods, and whether it takes
    the caller's tenant."""

    pattern: re.Pattern[str]
    methods: frozenset[str]
    needs_key: bool


def endpoints(routes: Iterable[BaseRoute], tenant_dependency: Callable[..., Any]) -> list[Endpoint]:
    """The app's routes in the order the router tries them, those of included routers with their
    prefixes (FastAPI gives them through ``effective_route_contexts``); mounts are left to their
    own apps."""
    found = []
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        for member in contexts() if callable(contexts) else [route]:
            pattern, dependant = getattr(member, "path_regex", None), getattr(member, "dependant", None)
            if pattern is None or isinstance(member, Mount):
                continue
            needs_key = dependant is not None and tenant_dependency in _calls(dependant)
            methods = frozenset(getattr(member, "methods", None) or ())
            found.append(Endpoint(pattern, methods, needs_key))
    return found


class KeyCheckMiddleware:
    """401 before the body, for the routes that depend on ``tenant_dependency``."""

    def __init__(
        self, app: ASGIApp, tenant_dependency: Callable[..., Any], fallback_key: FallbackKey | None = None
    ) -> None:
        self.app = app
        self.tenant_dependency = tenant_dependency
        self.fallback_key = fallback_key
        self._endpoints: list[Endpoint] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._protected(scope):
            refusal = await self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _protected(self, scope: Scope) -> bool:
        """Whether the first route that the request's path and method match takes the caller's tenant
        (the routes are read at the first request, when they are all there)."""
        if self._endpoints is None:
            self._endpoints = endpoints(scope["app"].routes, self.tenant_dependency)
        path, method = get_route_path(scope), scope["method"]
        for endpoint in self._endpoints:
            if method in endpoint.methods and endpoint.pattern.match(path):
                return endpoint.needs_key
        return False

    async def _refusal(self, scope: Scope) -> Response | None:
        """The app's 401 answer where keys are required and the request's key selects no tenant."""
        state: AppState = scope["app"].state.ttsq
        if not state.settings.keys_required:
            return None
        token = bearer_token(scope)
        if token is None and self.fallback_key is not None:
            fallback = self.fallback_key(state.settings)
            token = fallback.get_secret_value() if fallback is not None else None
        if token is not None:
            try:
                tenant = await run_in_threadpool(state.stores.tenants.by_key, token)
            except Exception:  # an outage: the route's own dependency answers it
                return None
            if tenant is not None:
                scope.setdefault("state", {})[KEY_TENANT] = (token, tenant)
                return None
        return await _handled(Request(scope), key_refused(token))


async def _handled(request: Request, error: Exception) -> Response:
    """``error`` answered by the app's handler for it, as if a route had raised it."""
    handlers: dict[Any, Callable[[Request, Exception], Response | Awaitable[Response]]]
    handlers = request.app.exception_handlers
    handler = next(handlers[kind] for kind in type(error).__mro__ if kind in handlers)
    answer = handler(request, error)
    return await answer if isinstance(answer, Awaitable) else answer
