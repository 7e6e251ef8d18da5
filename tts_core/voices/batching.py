"""Dynamic batching: many threads hand in phoneme ids, one thread runs the model.

Task threads call :meth:`DynamicBatcher.submit` and wait on the returned future. The batcher thread
takes the first waiting item (lowest ``priority`` value first, then oldest), collects more until
``max_batch`` items or ``max_wait_ms`` (whichever comes first), splits them by batch key (voice and
options must match to share one call) and by length (to bound padding), and runs each group as one
inference call. With ``parallel_calls`` above one, as many batcher threads take items from the one
queue: a second call starts only while one runs and another item waits, so a lone call is as it was
(the run function is told, through :class:`CallStop`'s ``beside``, how many calls ran when it began).

A batcher may be *preemptible* by the one it defers to: when an item arrives there while a call
runs here, that call is stopped (its run function says how, through :class:`CallStop`) and, once
the preferred batcher is idle again (or ``MAX_DEFER_S`` passed), run again, this time to the end.
So preferred work waits for no long call, and each call is stopped at most once: a stream of
preferred work slows the other batcher but never starves it.

Preferred work may be announced before its items exist (:meth:`DynamicBatcher.expect`: a task that
will submit once it has read and planned its job): the other batcher defers and stops its call from
then on, so that task's own preparation has the cores too, for at most ``MAX_EXPECT_S``.
"""

from __future__ import annotations

import contextlib
import ctypes
import heapq
import itertools
import logging
import math
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from tts_core.base.audio import FloatAudio
from tts_core.base.timing import IdSamples, TimedAudio

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

DEFAULT_MAX_PADDING: Final = 0.3
"""Largest share of padded (wasted) positions a batch may carry before it is split by length."""


class CallStop:
    """How one thread stops an inference call another thread runs: the run function says how
    (:meth:`when_requested`, e.g. set ONNX Runtime's ``RunOptions.terminate``), the batcher asks
    (:meth:`request`). A request that comes before the run function registered stops it at once."""

    def __init__(self, beside: int = 0, lately_beside: bool = False) -> None:
        self._lock = threading.Lock()
        self._stop: Callable[[], None] | None = None
        self.requested = False
        self.beside = beside
        """Other calls of the batcher running when this one began (0: it began alone)."""
        self.lately_beside = lately_beside or beside > 0
        """Whether calls of the batcher ran two at a time until :data:`BESIDE_MEMORY_S` before this
        one began (or it began beside another): the batcher is under load, and a call that begins
        alone now soon has another beside it."""

    def when_requested(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` (from the requesting thread) when a stop is requested, now if it was."""
        with self._lock:
            self._stop = stop
            if self.requested:
                stop()

    def request(self) -> None:
        with self._lock:
            self.requested = True
            if self._stop is not None:
                self._stop()


RunBatch = Callable[[K, list[Sequence[int]], CallStop], Sequence[FloatAudio | TimedAudio]]
"""Runs one inference call for items sharing a key; returns one trimmed audio array per item, with
each input id's share of it where the model says (``TimedAudio``). It may raise once its
:class:`CallStop` is requested (a stopped call); it may as well ignore the request and finish."""

ObserveCall = Callable[[K, "CallRecord"], None]
"""Told of every inference call once it ended (e.g. to count it in metrics); must not raise."""


@dataclass(frozen=True)
class BatchResult:
    """What a waiting task gets back: its audio and what its share of the call cost."""

    audio: FloatAudio
    batch_size: int
    run_ms: float
    """Wall time of the whole inference call."""
    share_ms: float
    """This item's share of ``run_ms``, in proportion to its phoneme ids."""
    wait_ms: float
    """Time from submit to the start of the call."""
    id_samples: IdSamples | None = None
    """Samples each input id lasts in ``audio``, if the model says (Piper does)."""
    call_id: str = ""
    """The inference call's id, the same for every item it served (a trace shows one call serving
    several jobs by it)."""


@dataclass(frozen=True)
class CallRecord:
    """One inference call, as kept in the batcher's history (tags identify items, never text)."""

    started_at: float
    size: int
    tags: tuple[str, ...]
    max_ids: int
    total_ids: int
    wait_ms: float
    """How long the oldest item in the call had waited."""
    run_ms: float
    ok: bool
    output_samples: int = 0
    """Samples of audio the call returned, all items together (0 if it failed)."""
    stopped: bool = False
    """Stopped for preferred work (``ok`` is False): its items ran again in a later call; neither a
    failure nor counted as a call by observers."""
    beside: int = 0
    """Other calls of its batcher running when it began (``parallel_calls``)."""
    call_id: str = ""
    """The id its items' results carry (:attr:`BatchResult.call_id`)."""

    @property
    def padding_share(self) -> float:
        """Share of the padded input (``size`` x ``max_ids``) that was padding: compute spent on nothing."""
        padded = self.size * self.max_ids
        return 1.0 - self.total_ids / padded if padded else 0.0


@dataclass
class BatchItem(Generic[K]):
    """One waiting item: its batch key, phoneme ids, a tag naming it in the history, its future."""

    key: K
    ids: Sequence[int]
    tag: str
    priority: int = 0
    """Lower runs sooner: a worker's interactive items overtake its queued bulk items."""
    submitted: float = field(default_factory=time.perf_counter)
    future: Future[BatchResult] = field(default_factory=Future)


def plan_batches(items: Sequence[BatchItem[K]], max_batch: int, max_padding: float) -> list[list[BatchItem[K]]]:
    """Group items by key, then cut each key's items (sorted by length) so that no group exceeds
    ``max_batch`` items or ``max_padding`` wasted positions."""
    groups: list[list[BatchItem[K]]] = []
    by_key: dict[K, list[BatchItem[K]]] = {}
    for item in items:
        by_key.setdefault(item.key, []).append(item)
    for same_key in by_key.values():
        current: list[BatchItem[K]] = []
        total = 0
        for item in sorted(same_key, key=lambda r: len(r.ids)):
            length = len(item.ids)
            padded = (len(current) + 1) * length
            if current and (len(current) >= max_batch or 1.0 - (total + length) / padded > max_padding):
                groups.append(current)
                current, total = [], 0
            current.append(item)
            total += length
        if current:
            groups.append(current)
    return groups


MAX_EXPECT_S: Final = 1.0
"""Longest an announced piece of work (:meth:`DynamicBatcher.expect`) counts as queued: an interactive
task reads, plans and submits in milliseconds, so this covers a loaded worker while a task that
hangs (a store outage) holds the other batcher no longer than this."""
MAX_DEFER_S: Final = 2.0
"""Longest a deferring batcher waits for the other to go idle before each call, so a flood of
preferred work slows the other's calls but never stops them."""

BESIDE_MEMORY_S: Final = 0.1
"""How long after two calls last ran at once a batcher still counts as under load
(:attr:`CallStop.lately_beside`): under load from many clients a call begins alone only in the
moments between two others, and the next begins beside it a few milliseconds later; a lone message
that comes later than this (or a job's segments made one after another) has the model's own session."""

_STOP: Final = object()
_STOP_PRIORITY: Final = 2**31
"""After every item: closing finishes what is queued first."""

_Queued = tuple[int, int, "BatchItem[Any] | object"]
"""(priority, arrival number, item): the queue's order; the arrival number breaks ties, so items
themselves are never compared."""


class _Lapses:
    """Functions called at their deadlines by one thread, started at the first: an announcement's
    lapse (:meth:`DynamicBatcher.expect`) once cost a timer thread of its own, whose start waited for
    the interpreter's lock on a busy worker (each interactive step announces itself)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, deadline: float, call: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._due, (deadline, next(self._order), call))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._due[0][2] is call:
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._changed.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, call = heapq.heappop(self._due)
            call()


class DynamicBatcher(Generic[K]):
    """Collects items from many threads into batched inference calls on one thread."""

    def __init__(
        self,
        run: RunBatch[K],
        max_batch: int = 1,
        max_wait_ms: float = 0.0,
        max_padding: float = DEFAULT_MAX_PADDING,
        history: int = 1000,
        name: str = "ttsq-batcher",
        defer_to: DynamicBatcher[K] | None = None,
        observe: ObserveCall[K] | None = None,
        preemptible: bool = False,
        parallel_calls: int = 1,
    ) -> None:
        """``defer_to``: another batcher whose work goes first: before each call this one waits
        (up to ``MAX_DEFER_S``) until that one is idle, so the two do not share the cores.
        ``preemptible`` (with ``defer_to``): an item arriving there also stops the calls running
        here, which run again once that one is idle (each call at most once).
        ``observe``: told of each call with its key and record.
        ``parallel_calls``: most calls running at once (a thread each); meant for ``max_batch`` 1,
        where a second thread would otherwise split batches the first was still collecting."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if parallel_calls < 1:
            raise ValueError("parallel_calls must be at least 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must not be negative")
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self.parallel_calls = parallel_calls
        self.max_padding = max_padding
        self._run = run
        self._queue: queue.PriorityQueue[_Queued] = queue.PriorityQueue()
        self._history: deque[CallRecord] = deque(maxlen=history)
        self._history_lock = threading.Lock()
        self._counter = itertools.count()
        self.calls = 0
        self.items = 0
        self.stopped_calls = 0
        self._defer_to = defer_to
        self._followers: list[DynamicBatcher[K]] = []
        self._stoppable_calls: set[CallStop] = set()
        """The running calls' stops, while they may still be stopped (first runs of a preemptible batcher)."""
        self._calls_running = 0
        self._beside_at = -math.inf
        """When (``time.monotonic``) two calls last ran at once: one began or ended beside another."""
        self._running_lock = threading.Lock()
        self._preemptible = preemptible and defer_to is not None
        if defer_to is not None and self._preemptible:
            defer_to._followers.append(self)
        self._observe = observe
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._lapses = _Lapses(f"{name}-lapses")
        self._threads = [
            threading.Thread(target=self._loop, name=name if n == 0 else f"{name}-{n + 1}", daemon=True)
            for n in range(parallel_calls)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, key: K, ids: Sequence[int], tag: str = "", priority: int = 0) -> Future[BatchResult]:
        """Queue one item; the future resolves with its audio or the call's exception."""
        if not self.alive:
            raise RuntimeError("batcher is stopped")
        arrival = next(self._counter)
        request: BatchItem[K] = BatchItem(key, ids, tag or str(arrival), priority)
        with self._pending_lock:
            self._pending += 1
            self._idle.clear()
        request.future.add_done_callback(self._settled)
        self._queue.put((priority, arrival, request))
        for follower in self._followers:
            follower.preempt()
        return request.future

    def expect(self) -> Callable[[], None]:
        """Count work on its way here as queued until the returned function is called (or for
        :data:`MAX_EXPECT_S`): batchers that defer to this one wait, and their running call is
        stopped, as if an item had arrived. The function may be called more than once."""
        with self._pending_lock:
            self._pending += 1
            self._idle.clear()
        for follower in self._followers:
            follower.preempt()
        once = threading.Lock()

        def release() -> None:
            if once.acquire(blocking=False):
                self._settled(None)

        self._lapses.add(time.monotonic() + MAX_EXPECT_S, release)
        return release

    def preempt(self) -> None:
        """Stop the calls running now, those that may be stopped (see ``preemptible``)."""
        with self._running_lock:
            running, self._stoppable_calls = self._stoppable_calls, set()
        for stop in running:
            stop.request()

    def _settled(self, _: Future[BatchResult] | None) -> None:
        with self._pending_lock:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()

    @property
    def alive(self) -> bool:
        """Whether every batcher thread still runs (a dead one would leave tasks waiting)."""
        return all(thread.is_alive() for thread in self._threads)

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no item is queued or running here (or ``timeout_s`` passed); True if idle."""
        return self._idle.wait(timeout_s)

    def run_all(self, key: K, batch: Sequence[Sequence[int]], tag: str = "", priority: int = 0) -> list[BatchResult]:
        """Submit several items at once (so they can share calls) and wait for all of them."""
        futures = [self.submit(key, ids, f"{tag}/{n}" if tag else "", priority) for n, ids in enumerate(batch)]
        return [f.result() for f in futures]

    def records(self) -> list[CallRecord]:
        """Recent calls, oldest first."""
        with self._history_lock:
            return list(self._history)

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish what is queued, then stop the threads (each takes one stop)."""
        for _ in self._threads:
            self._queue.put((_STOP_PRIORITY, next(self._counter), _STOP))
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _collect(self, first: BatchItem[K]) -> tuple[list[BatchItem[K]], bool]:
        pending = [first]
        deadline = time.perf_counter() + self.max_wait_ms / 1000.0
        while len(pending) < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                _, _, item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return pending, True
            assert isinstance(item, BatchItem)
            pending.append(item)
        return pending, False

    def _loop(self) -> None:
        name_native_thread(threading.current_thread().name)
        stopping = False
        while not stopping:
            _, _, first = self._queue.get()
            if first is _STOP:
                break
            assert isinstance(first, BatchItem)
            pending, stopping = self._collect(first)
            for group in plan_batches(pending, self.max_batch, self.max_padding):
                if self._defer_to is not None:
                    self._defer_to.wait_idle(MAX_DEFER_S)
                self._execute(group)

    def _execute(self, group: list[BatchItem[K]]) -> None:
        if self._call(group, stoppable=self._preemptible):
            return
        if self._defer_to is not None:  # stopped for preferred work: let it run, then finish this
            self._defer_to.wait_idle(MAX_DEFER_S)
        self._call(group, stoppable=False)

    def _call(self, group: list[BatchItem[K]], stoppable: bool) -> bool:
        """One inference call for ``group``; False if it was stopped (its items still wait)."""
        with self._running_lock:
            now = time.monotonic()
            if self._calls_running:
                self._beside_at = now
            stop = CallStop(self._calls_running, now - self._beside_at < BESIDE_MEMORY_S)
            self._calls_running += 1
        if stoppable:
            self._stoppable(stop)
        started_wall = time.time()
        started = time.perf_counter()
        call_id = uuid.uuid4().hex[:16]
        outputs: Sequence[FloatAudio | TimedAudio] = ()
        try:
            outputs = self._run(group[0].key, [r.ids for r in group], stop)
            if len(outputs) != len(group):
                raise RuntimeError(f"model returned {len(outputs)} outputs for {len(group)} inputs")
        except Exception as e:
            outputs = ()
            if not stop.requested:
                self._fail(group, e)
        except BaseException as e:  # every waiting task must learn of the failure
            self._fail(group, e)
            raise
        finally:
            with self._running_lock:
                self._stoppable_calls.discard(stop)
                if self._calls_running > 1 or stop.beside:  # two ran at once until now
                    self._beside_at = time.monotonic()
                self._calls_running -= 1
        run_ms = (time.perf_counter() - started) * 1000.0
        ok = bool(outputs)
        if ok:
            self._settle(group, outputs, started, run_ms, call_id)
        self._remember(group, started_wall, started, run_ms, outputs, stop, call_id)
        return ok or not stop.requested

    def _stoppable(self, stop: CallStop) -> None:
        with self._running_lock:
            self._stoppable_calls.add(stop)
        # Preferred work that arrived after this batcher's deferral but before the line above
        # found no call to stop: it is stopped here, before it starts.
        if self._defer_to is not None and not self._defer_to.wait_idle(0):
            self.preempt()

    @staticmethod
    def _settle(
        group: list[BatchItem[K]],
        outputs: Sequence[FloatAudio | TimedAudio],
        started: float,
        run_ms: float,
        call_id: str,
    ) -> None:
        total_ids = sum(len(r.ids) for r in group)
        for request, output in zip(group, outputs, strict=True):
            share = run_ms * len(request.ids) / total_ids if total_ids else run_ms / len(group)
            wait = (started - request.submitted) * 1000.0
            id_samples = output.id_samples if isinstance(output, TimedAudio) else None
            result = BatchResult(_audio(output), len(group), run_ms, share, wait, id_samples, call_id)
            request.future.set_result(result)

    def _remember(
        self,
        group: list[BatchItem[K]],
        started_wall: float,
        started: float,
        run_ms: float,
        outputs: Sequence[FloatAudio | TimedAudio],
        stop: CallStop,
        call_id: str,
    ) -> None:
        """Keep the call in the history and tell the observer (of calls that ran to their end)."""
        stopped = not outputs and stop.requested
        lengths = [len(r.ids) for r in group]
        record = CallRecord(
            started_at=started_wall,
            size=len(group),
            tags=tuple(r.tag for r in group),
            max_ids=max(lengths),
            total_ids=sum(lengths),
            wait_ms=(started - min(r.submitted for r in group)) * 1000.0,
            run_ms=run_ms,
            ok=bool(outputs),
            output_samples=sum(len(_audio(output)) for output in outputs),
            stopped=stopped,
            beside=stop.beside,
            call_id=call_id,
        )
        with self._history_lock:
            self._history.append(record)
            if stopped:
                self.stopped_calls += 1
            else:
                self.calls += 1
                self.items += len(group)
        if self._observe is not None and not stopped:
            try:
                self._observe(group[0].key, record)
            except Exception:  # an observer's fault must never stop the batcher
                log.exception("batch observer failed")

    @staticmethod
    def _fail(group: list[BatchItem[K]], error: BaseException) -> None:
        for request in group:
            request.future.set_exception(error)


def name_native_thread(name: str) -> None:
    """Give the calling thread ``name`` where the OS shows it (``top -H``, ``/proc/<pid>/task/*/comm``;
    Linux keeps 15 bytes), so an operator can tell a worker's batcher threads apart; elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.pthread_setname_np(ctypes.c_ulong(threading.get_ident()), name.encode()[:15])


def _audio(output: FloatAudio | TimedAudio) -> FloatAudio:
    return output.audio if isinstance(output, TimedAudio) else output
