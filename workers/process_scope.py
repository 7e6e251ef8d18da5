"""What a worker process builds once as it starts and its tasks and threads read: built by the start
handlers (``workers.worker_start``), never by an import or a task; a forked child builds its own."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class NotStarted(RuntimeError):
    """Read before this process built it: a task or thread ran outside a started worker."""


class ProcessScope(Generic[T]):
    """One value per process, set as the process starts and read afterwards."""

    def __init__(self, what: str, *, forks: bool = False) -> None:
        """``forks``: a forked child reads its parent's value (plain data such as the settings);
        otherwise it builds its own (threads, connections, loaded models)."""
        self._what = what
        self._forks = forks
        self._value: T | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def start(self, build: Callable[[], T]) -> T:
        """This process's value, built by ``build`` if it has none yet (a second start handler of the
        same process, or a thread pool's main process after its ``celeryd_after_setup``, reuses it)."""
        with self._lock:
            if self.started:
                return self.get()
            value = build()
            self._value, self._pid = value, os.getpid()
            return value

    def get(self) -> T:
        value = self._value
        if value is None or not self.started:
            raise NotStarted(f"{self._what} was read before this process started it")
        return value

    @property
    def started(self) -> bool:
        return self._value is not None and (self._forks or self._pid == os.getpid())
