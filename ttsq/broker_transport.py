"""kombu's Redis transport with one fix: a channel of a closed connection fails as a lost connection.

When Redis goes away, Celery's consumer closes its broker connection, which detaches the transport
from it (``transport.client = None``) and may leave a channel half closed (closing one needs Redis,
which is gone). Any later use of such a channel (an acknowledgement, a cancel, a publish while the
consumer restarts) makes kombu build a new connection pool from ``transport.client.hostname`` and
raises ``AttributeError: 'NoneType' object has no attribute 'hostname'``. Celery treats that as an
unrecoverable error and the worker exits for good: after a Redis restart of a few seconds, every
worker and the service worker were gone (issue 19, finding 3). Raised as ``redis.ConnectionError``
instead, it is what it is, a lost connection, and Celery reconnects as it does for any other.

``ttsq.broker.celery_config`` names it (:data:`ALIAS`) as the broker transport of every ttsq process;
the URLs stay ``redis://`` ones.
"""

from __future__ import annotations

from typing import Any, Final

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

ALIAS: Final = "ttsq-redis"
"""The name ``broker_transport`` gives this transport (what kombu shows in its logs' URLs)."""


def register() -> str:
    """Make :data:`ALIAS` name :class:`Transport` for kombu in this process; returns the alias."""
    TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")
    return ALIAS


class Channel(kombu_redis.Channel):
    """kombu's Redis channel, refusing to connect on behalf of a connection that was closed."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport is None or transport.client is None:
            raise redis.ConnectionError("the broker connection of this channel was closed; reconnect")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
