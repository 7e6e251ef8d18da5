"""One leader among many processes, by a short lease in Redis: who sweeps (``workers.sweeping``).

Every candidate tries to take the lease key (``SET NX PX``) with a token of its own; the holder
renews it from a thread of its own every second (or a third of the lease), only while the key still
holds its token. A holder that is killed, frozen or cut off stops renewing, and another candidate
takes the key once it expires: the work it leads waits the lease at most.

**Fenced.** A frozen holder may come back after its lease was taken, and must not act on what it saw
before. Each taking draws a new token, and a renewal only extends the key while it holds that token,
so the key holding the token at some moment proves that nobody else led since the token was drawn.
A write that must not come from a lost term names its :class:`Fence`: it is checked inside the
write's own ``WATCH``/``MULTI`` transaction (``ttsq.job_store.JobStore.update_by``), which fails if the
key changed or expired meanwhile, and raises :class:`LeaseLost`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Final, cast

import redis

from ttsq.constants import HEARTBEAT_INTERVAL_S

log = logging.getLogger(__name__)

_RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
"""KEYS: the lease key. ARGV: the holder's token, the lease in ms. 1 if renewed, 0 if lost."""

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
"""KEYS: the lease key. ARGV: the holder's token. Deletes it only if it is still the holder's."""


class LeaseLost(Exception):
    """A fenced write found the lease no longer held by the term that asked for it: a holder that was
    frozen past its lease came back. What it decided before is stale; it stops."""


@dataclass(frozen=True)
class Fence:
    """One term of a lease: its key and the token drawn when it was taken."""

    key: str
    token: str

    def check(self, pipe: redis.client.Pipeline) -> None:
        """Inside a ``WATCH`` of :attr:`key` (before ``MULTI``): raise :class:`LeaseLost` unless the
        term still holds. A change after this read fails the transaction, which is read again."""
        held = cast(bytes | None, pipe.get(self.key))
        if held is None or held.decode() != self.token:
            raise LeaseLost(f"the lease {self.key} is no longer this term's")


class Elector:
    """A candidate for the lease ``key``: :meth:`start` keeps trying to take it and, once taken,
    renewing it every :attr:`interval_s`; :meth:`term` is the current term, if it leads."""

    def __init__(self, client: redis.Redis, key: str, lease_s: float, name: str) -> None:
        self._redis = client
        self._key = key
        self._lease_ms = int(lease_s * 1000)
        self._name = name
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._term: Fence | None = None
        self._valid_until = 0.0
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_s(self) -> float:
        """Every second, or a third of a lease shorter than three seconds."""
        return min(HEARTBEAT_INTERVAL_S, self._lease_ms / 3000)

    def term(self) -> Fence | None:
        """The term this candidate holds, or None. A term not renewed within its lease (Redis out of
        reach, this process stalled) is not held, whatever Redis says later."""
        with self._guard:
            if self._term is not None and time.monotonic() >= self._valid_until:
                log.warning("%s lost the lease %s: not renewed within it", self._name, self._key)
                self._term = None
            return self._term

    def round(self) -> Fence | None:
        """One renewal of a held term, or one try to take the lease: the term held afterwards."""
        started = time.monotonic()
        held = self.term()
        if held is not None and not self._renew(keys=[self._key], args=[held.token, self._lease_ms]):
            log.warning("%s lost the lease %s: another holds it, or Redis lost it", self._name, self._key)
            held = None
        if held is None:
            token = f"{self._name}:{uuid.uuid4().hex}"
            if self._redis.set(self._key, token, nx=True, px=self._lease_ms):
                held = Fence(self._key, token)
                log.info("%s took the lease %s", self._name, self._key)
        with self._guard:
            self._term = held
            self._valid_until = started + self._lease_ms / 1000
        return held

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ttsq-elector", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop renewing and give the lease up at once, so another candidate need not wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._lease_ms / 1000)
        held = self.term()
        with self._guard:
            self._term = None
        if held is not None:
            with contextlib.suppress(redis.RedisError):  # it expires within the lease anyway
                self._release(keys=[self._key], args=[held.token])

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except redis.RedisError as e:  # an outage: the term lapses with its lease
                log.debug("lease %s not renewed: %s", self._key, e)
            self._stop.wait(self.interval_s)
