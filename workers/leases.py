"""Leases that a live worker renews every second: a dead or frozen worker's work back in seconds,
a long step never redelivered while its worker lives.

Redis (kombu's transport) gives a message back to the queue when it has been unacknowledged for the
visibility timeout, counted from the time recorded in its ``unacked_index`` entry. This keeper, a
thread in every synthesis worker, moves the recorded time of each message the worker holds (running,
waiting for a thread, or waiting for a retry's ETA) to now every :data:`~ttsq.constants.
HEARTBEAT_INTERVAL_S`, and renews the step claims (``JobStore.step_lock``) at the same pace. So both
can be short (``TTSQ_VISIBILITY_TIMEOUT_S`` 8 s, ``TTSQ_STEP_LEASE_S`` 5 s): a worker that is killed,
frozen or cut off stops renewing, its claims expire within the lease and its messages come back
within the visibility timeout, while a step that runs for an hour keeps both as long as its worker
lives. The keeper runs on its own thread, so a long inference call (which releases the GIL) never
looks like death.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

import redis
from celery.worker import state as worker_state
from redis.exceptions import LockError
from redis.lock import Lock

from ttsq.constants import HEARTBEAT_INTERVAL_S

log = logging.getLogger(__name__)

UNACKED_INDEX_KEY: Final = "unacked_index"
"""kombu's Redis transport default: sorted set of held delivery tags, scored by delivery time."""


def held_delivery_tags() -> list[str]:
    """Delivery tags of the messages this worker process holds: running, reserved for a thread, or
    scheduled (a retry waiting for its ETA, which would otherwise come back while it waits)."""
    scheduled = worker_state.scheduled_requests  # type: ignore[attr-defined]  # celery-types lacks it (Celery 5.3+)
    requests = [*worker_state.reserved_requests, *worker_state.active_requests, *scheduled]
    return sorted({tag for r in requests if (tag := delivery_tag(r)) is not None})


def delivery_tag(request: Any) -> str | None:
    """A Celery request's delivery tag, read off its kombu message: the request's own
    ``delivery_info`` keeps only the exchange, routing key, priority and redelivered flag, so a
    keeper that read the tag there renewed nothing, and every message held past the visibility
    timeout came back while its worker lived (a redelivery met the live claim and was dropped; if
    the worker then died, the step waited for the sweeper)."""
    tag = getattr(getattr(request, "message", None), "delivery_tag", None)
    return None if tag is None else str(tag)


class LeaseKeeper:
    """Renews this worker's step claims and held messages until it stops."""

    def __init__(self, client: redis.Redis, lease_s: int, index_key: str = UNACKED_INDEX_KEY) -> None:
        self._redis = client
        self._lease_s = lease_s
        self._index_key = index_key
        self._claims: set[Lock] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_s(self) -> float:
        """Every second, or a third of a lease set shorter than three seconds."""
        return min(HEARTBEAT_INTERVAL_S, self._lease_s / 3)

    @contextlib.contextmanager
    def holding(self, claim: Lock) -> Iterator[None]:
        """Keep ``claim`` renewed while the block runs."""
        with self._guard:
            self._claims.add(claim)
        try:
            yield
        finally:
            with self._guard:
                self._claims.discard(claim)

    def renew(self) -> None:
        """One round: push every held claim's expiry and every held message's time forward."""
        with self._guard:
            claims = list(self._claims)
        for claim in claims:
            with contextlib.suppress(LockError):  # released meanwhile, or lost: the step notices
                claim.extend(self._lease_s, replace_ttl=True)
        tags = held_delivery_tags()
        if tags:
            # XX: only entries still there; a message acknowledged meanwhile must not come back.
            self._redis.zadd(self._index_key, dict.fromkeys(tags, time.time()), xx=True)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ttsq-leases", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.renew()
            except redis.RedisError as e:  # an outage: the next round tries again
                log.warning("could not renew leases: %s", e)
