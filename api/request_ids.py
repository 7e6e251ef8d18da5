"""A request id for every API request: the client's ``X-Request-ID`` if it sent a sane one, else a new
one; set for the request's log lines (``ttsq.logs``) and echoed in the response header."""

from __future__ import annotations

import re
import uuid
from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ttsq.logs import request_id_var

HEADER: Final = "X-Request-ID"
_SANE: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
"""What a client-given id may look like; anything else (log injection, huge values) is replaced."""


class RequestIdMiddleware:
    """Pure ASGI, so streamed answers (SSE, speech) keep their id for their whole life."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k.decode("latin-1").lower() == "x-request-id"), ""
        )
        request_id = given if _SANE.fullmatch(given) else uuid.uuid4().hex
        token = request_id_var.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)
