"""Request bodies capped before anything parses them (``TTSQ_MAX_REQUEST_BYTES``).

A declared ``Content-Length`` over the cap is answered 413 at once, without reading the body; a
body without one (chunked) is counted as it streams in and refused as soon as it passes the cap, so
no more than the cap plus one chunk is ever held, by whoever reads it. What the client still sends
after the answer is read and dropped by uvicorn, never buffered.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError, error_response

CODE = "request_too_large"


def too_large(max_bytes: int, size: int | None = None) -> ApiError:
    found = f"request body of {size} bytes" if size is not None else "request body"
    return ApiError(413, CODE, f"{found} is larger than the limit of {max_bytes} bytes")


def declared_length(scope: Scope) -> int | None:
    """The ``Content-Length`` the client sent, if it is a number (uvicorn refuses malformed ones)."""
    value = Headers(scope=scope).get("content-length", "")
    return int(value) if value.isdigit() else None


class BodyLimitMiddleware:
    """Pure ASGI, so that it sees each chunk as it arrives and keeps none of them.

    Past the cap, reading the body raises :func:`too_large`'s ``ApiError`` inside the app, where the
    error handlers answer it (FastAPI hands it over as the cause of its 400); if nothing answered
    it, this middleware does, as long as no response has started."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = declared_length(scope)
        if size is not None and size > self.max_bytes:
            await self._refuse(too_large(self.max_bytes, size), scope, receive, send)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large(self.max_bytes)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except ApiError as e:
            if e.code != CODE or started:
                raise
            await self._refuse(e, scope, receive, send)

    @staticmethod
    async def _refuse(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
        await error_response(error.status_code, error.code, error.message)(scope, receive, send)
