"""The thread that proves this synthesis worker is alive (``ttsq.liveness``).

It runs beside the task threads, so a long inference call never stops it; only the process stopping
(killed, frozen, cut off from Redis) or the worker being unable to work (its engine stopped, its
store refusing its settings: ``workers.fitness``) does. While unable it does not beat, so
``/readyz`` does not count it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import redis

from ttsq.constants import HEARTBEAT_INTERVAL_S, HEARTBEAT_TTL_S
from ttsq.liveness import WorkerLiveness

log = logging.getLogger(__name__)


class Heartbeat:
    """Renews ``worker``'s heartbeat every :data:`HEARTBEAT_INTERVAL_S` while ``able()`` holds."""

    def __init__(self, liveness: WorkerLiveness, worker: str, able: Callable[[], bool]) -> None:
        self._liveness = liveness
        self._worker = worker
        self._able = able
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ttsq-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and leave at once, so a worker stopped on purpose is not counted until its
        heartbeat expires."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(HEARTBEAT_TTL_S)
        with contextlib.suppress(redis.RedisError):  # expires within HEARTBEAT_TTL_S anyway
            self._liveness.leave(self._worker)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self._able():
                    self._liveness.beat(self._worker, HEARTBEAT_TTL_S)
                else:
                    self._liveness.leave(self._worker)
            except redis.RedisError as e:  # an outage: the entry expires, and the next beat restores it
                log.debug("heartbeat not renewed: %s", e)
            self._stop.wait(HEARTBEAT_INTERVAL_S)
