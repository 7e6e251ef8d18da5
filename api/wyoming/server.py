"""The Wyoming server process: the API's long-lived clients (``AppState``: stores, catalog, event hub)
on its own event loop, and the wyoming library's server handing each connection to a
:class:`~api.wyoming.handler.WyomingHandler`.

Wyoming carries no credentials: the tenant is the one ``TTSQ_WYOMING_API_KEY`` selects, for every
client that can reach the port (bind it to a private address); without a key, the anonymous tenant,
which is refused at start where keys are required.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from wyoming.error import Error
from wyoming.event import Event
from wyoming.server import AsyncEventHandler, AsyncServer

from api.metrics import ApiMetrics
from api.state import AppState
from api.wyoming.handler import WyomingHandler
from ttsq import logs, tracing
from ttsq.errors import Unauthorized
from ttsq.settings import Settings

log = logging.getLogger(__name__)

TOO_MANY_CONNECTIONS: Final = "too_many_connections"


class WyomingService:
    """The clients every connection shares, and the key whose tenant they speak as."""

    def __init__(self, state: AppState, key: str | None) -> None:
        self.state = state
        self.key = key
        self.open_connections = 0

    @classmethod
    async def open(cls, settings: Settings) -> WyomingService:
        """Connect, and refuse to serve with no usable key where keys are required, or with a key
        that selects no tenant (a typo would otherwise speak as anonymous)."""
        key = settings.wyoming_api_key.get_secret_value() if settings.wyoming_api_key else None
        state = await asyncio.to_thread(AppState.build, settings, ApiMetrics())
        try:
            await asyncio.to_thread(_check_key, state, key)
            await state.hub.start()
        except BaseException:
            await state.close()
            raise
        return cls(state, key)

    def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> AsyncEventHandler:
        """A connection's handler; past ``wyoming_max_connections`` open, one that only says so."""
        limit = self.state.settings.wyoming_max_connections
        if self.open_connections >= limit:
            log.warning("wyoming: %d connections open; refusing one more", self.open_connections)
            return TurnedAway(reader, writer, limit)
        self.open_connections += 1
        return WyomingHandler(self.state, self.key, reader, writer, on_close=self._closed)

    def _closed(self) -> None:
        self.open_connections -= 1

    async def close(self) -> None:
        await self.state.close()


class TurnedAway(AsyncEventHandler):
    """A connection past the limit: told so with an error event, then closed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int) -> None:
        super().__init__(reader, writer)
        self.limit = limit

    async def run(self) -> None:
        message = f"the server holds its limit of {self.limit} connections (wyoming_max_connections); retry later"
        try:
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(self.write_event(Error(text=message, code=TOO_MANY_CONNECTIONS).event()), 5)
        finally:
            self.writer.close()

    async def handle_event(self, event: Event) -> bool:
        return False


def _check_key(state: AppState, key: str | None) -> None:
    if key is None:
        if state.settings.keys_required:
            raise Unauthorized(
                "keys are required (TTSQ_AUTH_REQUIRED) and TTSQ_WYOMING_API_KEY is not set: set it to the key "
                "of the tenant the Wyoming server speaks as ('ttsq keys create')"
            )
        return
    if state.stores.tenants.by_key(key) is None:
        raise Unauthorized("TTSQ_WYOMING_API_KEY selects no tenant: the key is unknown or revoked")


async def serve(settings: Settings, uri: str) -> None:
    """Serve until SIGTERM or Ctrl-C; connections open then are closed and their jobs canceled."""
    service = await WyomingService.open(settings)
    server = AsyncServer.from_uri(uri)
    log.info("wyoming: serving %s", uri)
    try:
        await server.run(service.handler)
    finally:
        await server.stop()
        await service.close()


def run(settings: Settings, uri: str) -> None:
    """``ttsq wyoming``: the server in the foreground, each utterance a span of its job's trace where
    an OTLP endpoint is set (``ttsq.tracing``)."""
    logs.configure(settings.log_format)
    tracing.start(tracing.WYOMING_SERVICE)
    try:
        asyncio.run(serve(settings, uri))
    finally:
        tracing.flush()
