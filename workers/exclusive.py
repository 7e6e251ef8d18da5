"""One run at a time of a step, a batch's finish or a periodic task, across every worker: take its
Redis lock without waiting, skip the delivery when another task holds it, and release it after (a
lock that expired meanwhile is reported, not raised: the run outlived its lease)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from redis.exceptions import LockError
from redis.lock import Lock

log = logging.getLogger(__name__)


@contextlib.contextmanager
def exclusive(lock: Lock, what: str) -> Iterator[bool]:
    """Yields whether this task holds ``lock`` (``what`` names the work in the log lines); when it
    does not, the caller drops this delivery."""
    if not lock.acquire():
        log.info("%s is already running in another task; skipping this delivery", what)
        yield False
        return
    try:
        yield True
    finally:
        try:
            lock.release()
        except LockError:
            log.warning("%s outlived its lock", what)
