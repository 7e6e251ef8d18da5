"""The trace context of every API request, for the jobs it submits (``ttsq.tracing``) and for its
caller, who gets it back in a ``traceparent`` response header.

FastAPI makes the request's server span itself (its native OpenTelemetry support: the span, named by
method and route, continues the caller's W3C ``traceparent``, with spans of the dependencies and the
endpoint under it) wherever this process traces. Where it does not, nothing makes a span, and this
middleware makes the caller's context current on its own, so that a job still keeps the caller's
trace id and the workers' log lines still join the caller's trace.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ttsq import tracing


class TraceContextMiddleware:
    """Pure ASGI (as ``api.request_ids``), inside FastAPI's server span."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if tracing.current_traceparent() is None:  # not traced here: the caller's context, if it sent one
            carrier = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if tracing.has_context(carrier):
                with tracing.attached(tracing.extract(carrier)):
                    await self._answer(scope, receive, send)
                return
        await self._answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        traceparent = tracing.current_traceparent()
        if traceparent is None:
            await self.app(scope, receive, send)
            return

        async def send_with_context(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[tracing.TRACEPARENT] = traceparent
            await send(message)

        await self.app(scope, receive, send_with_context)
