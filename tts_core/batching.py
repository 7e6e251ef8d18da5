"""Dynamic batching: many threads hand in phoneme ids, one thread runs the model.

Task threads call :meth:`DynamicBatcher.submit` and wait on the returned future. The batcher thread
takes the first waiting item (lowest ``priority`` value first, then oldest), collects more until
``max_batch`` items or ``max_wait_ms`` (whichever comes first), splits them by batch key (voice and
options must match to share one call) and by length (to bound padding), and runs each group as one
inference call. Only this thread ever calls the model, so the session needs no locking and sees one
request at a time.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from tts_core.audio import FloatAudio
from tts_core.timing import IdSamples, TimedAudio

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

DEFAULT_MAX_PADDING: Final = 0.3
"""Largest share of padded (wasted) positions a batch may carry before it is split by length."""

RunBatch = Callable[[K, list[Sequence[int]]], Sequence[FloatAudio | TimedAudio]]
"""Runs one inference call for items sharing a key; returns one trimmed audio array per item, with
each input id's share of it where the model says (``TimedAudio``)."""

ObserveCall = Callable[[K, "BatchRecord"], None]
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


@dataclass(frozen=True)
class BatchRecord:
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


MAX_DEFER_S: Final = 2.0
"""Longest a deferring batcher waits for the other to go idle before each call, so a flood of
preferred work slows the other's calls but never stops them."""

_STOP: Final = object()
_STOP_PRIORITY: Final = 2**31
"""After every item: closing finishes what is queued first."""

_Queued = tuple[int, int, "BatchItem[Any] | object"]
"""(priority, arrival number, item): the queue's order; the arrival number breaks ties, so items
themselves are never compared."""


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
    ) -> None:
        """``defer_to``: another batcher whose work goes first: before each call this one waits
        (up to ``MAX_DEFER_S``) until that one is idle, so the two do not share the cores.
        ``observe``: told of each call with its key and record."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must not be negative")
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self.max_padding = max_padding
        self._run = run
        self._queue: queue.PriorityQueue[_Queued] = queue.PriorityQueue()
        self._history: deque[BatchRecord] = deque(maxlen=history)
        self._history_lock = threading.Lock()
        self._counter = itertools.count()
        self.calls = 0
        self.items = 0
        self._defer_to = defer_to
        self._observe = observe
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, key: K, ids: Sequence[int], tag: str = "", priority: int = 0) -> Future[BatchResult]:
        """Queue one item; the future resolves with its audio or the call's exception."""
        if not self._thread.is_alive():
            raise RuntimeError("batcher is stopped")
        arrival = next(self._counter)
        request: BatchItem[K] = BatchItem(key, ids, tag or str(arrival), priority)
        with self._pending_lock:
            self._pending += 1
            self._idle.clear()
        request.future.add_done_callback(self._settled)
        self._queue.put((priority, arrival, request))
        return request.future

    def _settled(self, _: Future[BatchResult]) -> None:
        with self._pending_lock:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()

    @property
    def alive(self) -> bool:
        """Whether the batcher thread still runs (a dead one would leave every task waiting)."""
        return self._thread.is_alive()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no item is queued or running here (or ``timeout_s`` passed); True if idle."""
        return self._idle.wait(timeout_s)

    def run_all(self, key: K, batch: Sequence[Sequence[int]], tag: str = "", priority: int = 0) -> list[BatchResult]:
        """Submit several items at once (so they can share calls) and wait for all of them."""
        futures = [self.submit(key, ids, f"{tag}/{n}" if tag else "", priority) for n, ids in enumerate(batch)]
        return [f.result() for f in futures]

    def records(self) -> list[BatchRecord]:
        """Recent calls, oldest first."""
        with self._history_lock:
            return list(self._history)

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish what is queued, then stop the thread."""
        self._queue.put((_STOP_PRIORITY, next(self._counter), _STOP))
        self._thread.join(timeout_s)

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
        started_wall = time.time()
        started = time.perf_counter()
        lengths = [len(r.ids) for r in group]
        ok = False
        try:
            outputs = self._run(group[0].key, [r.ids for r in group])
            if len(outputs) != len(group):
                raise RuntimeError(f"model returned {len(outputs)} outputs for {len(group)} inputs")
            ok = True
        except BaseException as e:  # every waiting task must learn of the failure
            for request in group:
                request.future.set_exception(e)
            if not isinstance(e, Exception):
                raise
        run_ms = (time.perf_counter() - started) * 1000.0
        total_ids = sum(lengths)
        if ok:
            for request, output in zip(group, outputs, strict=True):
                share = run_ms * len(request.ids) / total_ids if total_ids else run_ms / len(group)
                wait = (started - request.submitted) * 1000.0
                id_samples = output.id_samples if isinstance(output, TimedAudio) else None
                result = BatchResult(_audio(output), len(group), run_ms, share, wait, id_samples)
                request.future.set_result(result)
        record = BatchRecord(
            started_at=started_wall,
            size=len(group),
            tags=tuple(r.tag for r in group),
            max_ids=max(lengths),
            total_ids=total_ids,
            wait_ms=(started - min(r.submitted for r in group)) * 1000.0,
            run_ms=run_ms,
            ok=ok,
            output_samples=sum(len(_audio(output)) for output in outputs) if ok else 0,
        )
        with self._history_lock:
            self._history.append(record)
            self.calls += 1
            self.items += len(group)
        if self._observe is not None:
            try:
                self._observe(group[0].key, record)
            except Exception:  # an observer's fault must never stop the batcher
                log.exception("batch observer failed")


def _audio(output: FloatAudio | TimedAudio) -> FloatAudio:
    return output.audio if isinstance(output, TimedAudio) else output
