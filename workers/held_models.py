"""Which models each live worker holds, shared through Redis, so that a worker leaves the work of a
model another worker holds to that worker (voice affinity, ``ttsq.broker_transport``).

Every few seconds each worker process writes the models it holds, with the time, into one hash, and
reads everyone's: the models held by other workers whose entry is fresh (and not by itself) become
the queues its transport asks for last. An entry older than :data:`STALE_S` (a worker that died or
froze) counts for nothing and is removed; a worker that comes back writes its entry again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Final, cast

import redis

from ttsq import broker_transport
from ttsq.constants import HELD_MODELS_KEY, model_queue

log = logging.getLogger(__name__)

INTERVAL_S: Final = 2.0
"""How often a worker writes its entry and reads the others'."""
STALE_S: Final = 30.0
"""An entry not written for this long is a worker that is gone (or frozen)."""


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def others_models(entries: dict[str, str], me: str, now: float) -> tuple[set[str], list[str]]:
    """The models fresh entries of other workers hold, and the ids of stale entries."""
    held: set[str] = set()
    stale: list[str] = []
    for worker, raw in entries.items():
        try:
            entry = json.loads(raw)
            at, models = float(entry["at"]), [str(m) for m in entry["models"]]
        except (ValueError, KeyError, TypeError):
            stale.append(worker)
            continue
        if now - at > STALE_S:
            stale.append(worker)
        elif worker != me:
            held.update(models)
    return held, stale


class HeldModels:
    """The thread that shares this process's held models and learns the other workers'."""

    def __init__(self, client: redis.Redis, queue: str, held: Callable[[], list[str]]) -> None:
        self._redis = client
        self._queue = queue
        self._held = held
        self._me = worker_id()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ttsq-held-models", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (if it ever started) and remove this worker's entry."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with contextlib.suppress(redis.RedisError):  # stale in 30 s anyway
            self._redis.hdel(HELD_MODELS_KEY, self._me)

    def exchange(self, now: float) -> set[str]:
        """Write this worker's entry, read the others', drop stale ones; tell the transport which
        model queues only others hold. Returns those models."""
        mine = self._held()
        self._redis.hset(HELD_MODELS_KEY, self._me, json.dumps({"at": now, "models": mine}))
        raw = cast(dict[bytes, bytes], self._redis.hgetall(HELD_MODELS_KEY))
        held, stale = others_models({k.decode(): v.decode() for k, v in raw.items()}, self._me, now)
        if stale:
            self._redis.hdel(HELD_MODELS_KEY, *stale)
        elsewhere = held - set(mine)
        broker_transport.held_elsewhere(
            model_queue(self._queue, key, interactive) for key in elsewhere for interactive in (True, False)
        )
        return elsewhere

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.exchange(time.time())
            except redis.RedisError as e:  # an outage: keep the last picture, try again
                log.debug("held models not exchanged: %s", e)
            self._stop.wait(INTERVAL_S)
