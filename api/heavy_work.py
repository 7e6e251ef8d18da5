"""The API's CPU-heavy request work (reading a long text, checking a big or new lexicon) in helper
processes of their own, at a low OS priority, at most ``TTSQ_HEAVY_REQUESTS_PER_TENANT`` of a
tenant's at once.

Threads of one Python process share its interpreter's lock: while a request thread checked, split
and estimated another tenant's 150,000-character text (or parsed its 1 MiB lexicon), a short job's
answer waited for the lock at each of its Redis calls, 0.01 s idle against 0.08-0.18 s (issue 34's
noisy neighbour). In processes of their own, niced (:data:`HEAVY_NICE`), that work takes what the
cores have left after the API's and the workers' own; the request thread that sent it waits without
the lock. A tenant's heavy requests past its share wait for a place, as many again at most (each
holds one of the API's threads); one more is answered ``429 heavy_requests_exceeded`` with a
``Retry-After``. So one tenant fills neither the processes (another's heavy request waits behind at
most its share) nor the API's threads.

Short requests (under ``TTSQ_HEAVY_REQUEST_CHARS`` and no lexicons named) run in the request's own
thread, as before: the round trip to a process would only add to them. What runs in a process
reads its own :class:`Drafting` (the stores reconnected there) and gives back its result or its
coded error (the errors pickle: ``tts_core.base.errors.rebuilt``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Final, TypeVar

from tts_core.voices.catalog import VoiceCatalog
from ttsq.cpu_priority import lower_process_priority
from ttsq.errors import QuotaExceeded, StoreUnavailable
from ttsq.lexicons import LexiconStore
from ttsq.settings import Settings
from ttsq.stores import Stores

log = logging.getLogger(__name__)

T = TypeVar("T")

HEAVY_NICE: Final = 10
"""OS niceness of the helper processes, and of the session group each starts for itself
(``ttsq.cpu_priority``): 10 gives them about a tenth of a core that the API's or a worker's own
threads want at the same time (Linux's weights, 1024 against 110), and a whole idle core."""

BUSY_RETRY_AFTER_S: Final = 1
"""``Retry-After`` of a heavy request refused for its tenant's share: a long text takes about a
second to read."""

SHARE_WAIT_S: Final = 10.0
"""Longest wait of a heavy request for a place of its tenant's share: a few long texts' reading."""

PARENT_CHECK_S: Final = 1.0
"""How often a helper process looks whether its API process is still there."""

HEAVY_LIMIT: Final = "heavy_requests"
"""The limit's name in the refusal's code (``heavy_requests_exceeded``)."""


@dataclass(frozen=True)
class Drafting:
    """What reading a request needs: the settings, the voices and the tenant's lexicons."""

    settings: Settings
    catalog: VoiceCatalog
    lexicons: LexiconStore


_process_drafting: Drafting | None = None
"""The helper process's own :class:`Drafting` (made by :func:`_start_process`)."""


def _start_process(settings: Settings, connect_timeout_s: float) -> None:
    """Each helper process: lower its priority (in a session of its own, so signals to the API's
    process group pass it by), outlive its API process by a second at most, then connect its own
    stores (nothing is contacted until first use)."""
    global _process_drafting
    lower_process_priority(HEAVY_NICE)
    atexit.register(_end_at_once)
    threading.Thread(target=_exit_with, args=(os.getppid(),), name="ttsq-heavy-parent", daemon=True).start()
    stores = Stores.connect(settings, settings.ready_timeout_s, connect_timeout_s)
    _process_drafting = Drafting(settings, VoiceCatalog.discover(settings.voices_dir), stores.lexicons)


def _end_at_once() -> None:
    """A helper's exit, without the interpreter's teardown: it holds nothing to flush but its logs,
    and the teardown's full collection, at :data:`HEAVY_NICE` while the rest of a stack stops too,
    took 3 of the 4 seconds an API needed to stop."""
    logging.shutdown()
    os._exit(0)


def _exit_with(parent: int) -> None:
    """Exit once the API process is gone: one killed outright (SIGKILL, out of memory) closes no
    pool, and its helpers would wait for work forever."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _started() -> None:
    """Nothing: submitted at start so that the processes start."""


def _in_process(work: Callable[[Drafting], T]) -> T:
    assert _process_drafting is not None, "a helper process runs _start_process first"
    return work(_process_drafting)


def _decrement(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


class HeavyWork:
    """The helper processes and each tenant's requests in them."""

    def __init__(self, drafting: Drafting, connect_timeout_s: float) -> None:
        self._drafting = drafting
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._freed = threading.Condition()
        self._in_flight: Counter[str] = Counter()
        self._waiting: Counter[str] = Counter()
        self._pool: ProcessPoolExecutor | None = None

    def run(self, tenant_id: str, heavy: bool, work: Callable[[Drafting], T]) -> T:
        """``work`` in this thread if it is light, else in a helper process within the tenant's share
        (refused with :class:`QuotaExceeded` past it). ``work`` must pickle (a module's function,
        or a ``functools.partial`` of one)."""
        if not heavy:
            return work(self._drafting)
        with self._share(tenant_id):
            pool = self._processes()
            try:
                return pool.submit(_in_process, work).result()
            except BrokenProcessPool as e:  # a helper died (killed, out of memory): new ones next time
                self._replace(pool)
                raise StoreUnavailable("the API's text processes restarted; retry") from e

    @contextlib.contextmanager
    def _share(self, tenant_id: str) -> Iterator[None]:
        """One of the tenant's places: at once if it has one free, else after waiting (up to
        :data:`SHARE_WAIT_S`) as one of at most as many waiting requests of its own; refused past that."""
        limit = self._drafting.settings.heavy_requests_per_tenant
        with self._freed:
            if self._waiting[tenant_id] >= limit:
                raise self._refusal(limit)
            self._waiting[tenant_id] += 1
            try:
                free = self._freed.wait_for(lambda: self._in_flight[tenant_id] < limit, SHARE_WAIT_S)
            finally:
                _decrement(self._waiting, tenant_id)
            if not free:
                raise self._refusal(limit)
            self._in_flight[tenant_id] += 1
        try:
            yield
        finally:
            with self._freed:
                _decrement(self._in_flight, tenant_id)
                self._freed.notify_all()

    @staticmethod
    def _refusal(limit: int) -> QuotaExceeded:
        message = (
            f"{limit} long texts or big lexicons of yours are being read and {limit} more wait; "
            f"at most {limit} at once (TTSQ_HEAVY_REQUESTS_PER_TENANT)"
        )
        return QuotaExceeded(HEAVY_LIMIT, message, BUSY_RETRY_AFTER_S)

    def start(self) -> None:
        """Start the helper processes now, in the background (each imports the text stack, a second
        or more): the first long request would wait for them."""
        pool = self._processes()
        for _ in range(self._drafting.settings.heavy_request_processes):
            pool.submit(_started)

    def _processes(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                settings = self._drafting.settings
                self._pool = ProcessPoolExecutor(
                    settings.heavy_request_processes,
                    mp_context=multiprocessing.get_context("spawn"),  # the API's threads make fork unsafe
                    initializer=_start_process,
                    initargs=(settings, self._connect_timeout_s),
                )
            return self._pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)
        log.warning("a text process of the API died; new ones start with the next long request")

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
