"""The dynamic batcher with plain data: who shares a call, padding bounds, failures, history.

The model is replaced by a function recording its calls: this tests the batching logic only
(the real model path is covered by the worker tests).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FuturesTimeout

import numpy as np
import pytest

from tts_core.base.audio import FloatAudio
from tts_core.voices import batching
from tts_core.voices.batching import BatchItem, CallStop, DynamicBatcher, plan_batches


class FakeModel:
    """Returns each item's ids as audio and remembers the batches it saw."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.fail = fail
        self.threads: set[str] = set()

    def __call__(self, key: str, batch: list[Sequence[int]], stop: CallStop | None = None) -> list[FloatAudio]:
        self.threads.add(threading.current_thread().name)
        self.calls.append((key, [len(ids) for ids in batch]))
        if self.fail:
            raise RuntimeError("model exploded")
        return [np.asarray(ids, dtype=np.float32) for ids in batch]


def submit_together(batcher: DynamicBatcher[str], items: list[tuple[str, list[int]]]) -> list[FloatAudio]:
    futures = [batcher.submit(key, ids, f"t{n}") for n, (key, ids) in enumerate(items)]
    return [f.result(timeout=5).audio for f in futures]


def test_items_from_many_threads_share_calls_up_to_max_batch() -> None:
    model = FakeModel()
    batcher = DynamicBatcher(model, max_batch=4, max_wait_ms=300)
    barrier = threading.Barrier(8)
    results: dict[int, FloatAudio] = {}

    def task(n: int) -> None:
        barrier.wait()
        results[n] = batcher.submit("voice", [n] * 10, f"job{n}").result(timeout=5).audio

    threads = [threading.Thread(target=task, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batcher.close()
    assert {n: int(a[0]) for n, a in results.items()} == {n: n for n in range(8)}  # each got its own
    assert sorted(size for r in batcher.records() for size in [r.size]) == [4, 4]
    assert {tag for r in batcher.records() for tag in r.tags} == {f"job{n}" for n in range(8)}
    assert model.threads == {"ttsq-batcher"}  # only the batcher thread runs the model


def test_max_batch_one_runs_every_item_alone() -> None:
    model = FakeModel()
    batcher = DynamicBatcher(model, max_batch=1, max_wait_ms=50)
    submit_together(batcher, [("v", [1] * 5)] * 5)
    batcher.close()
    assert [sizes for _, sizes in model.calls] == [[5]] * 5


def test_different_keys_never_share_a_call() -> None:
    model = FakeModel()
    batcher = DynamicBatcher(model, max_batch=8, max_wait_ms=200)
    submit_together(batcher, [("fast", [1] * 5), ("slow", [1] * 5), ("fast", [1] * 6), ("slow", [1] * 6)])
    batcher.close()
    assert sorted((key, sorted(sizes)) for key, sizes in model.calls) == [("fast", [5, 6]), ("slow", [5, 6])]


def request(length: int, key: str = "v") -> BatchItem[str]:
    return BatchItem(key, [1] * length, str(length))


def test_plan_batches_splits_by_length_to_bound_padding() -> None:
    groups = plan_batches([request(n) for n in (400, 10, 12, 390, 11, 380)], max_batch=8, max_padding=0.3)
    assert [[len(r.ids) for r in g] for g in groups] == [[10, 11, 12], [380, 390, 400]]
    for group in groups:
        longest = max(len(r.ids) for r in group)
        assert 1 - sum(len(r.ids) for r in group) / (len(group) * longest) <= 0.3


def test_plan_batches_respects_max_batch() -> None:
    groups = plan_batches([request(50) for _ in range(10)], max_batch=4, max_padding=0.3)
    assert [len(g) for g in groups] == [4, 4, 2]


def test_a_failed_call_fails_every_item_in_it_and_the_batcher_goes_on() -> None:
    model = FakeModel(fail=True)
    batcher = DynamicBatcher(model, max_batch=4, max_wait_ms=200)
    futures = [batcher.submit("v", [1, 2, 3]) for _ in range(3)]
    for future in futures:
        with pytest.raises(RuntimeError, match="model exploded"):
            future.result(timeout=5)
    model.fail = False
    assert batcher.submit("v", [7]).result(timeout=5).audio.tolist() == [7.0]
    batcher.close()
    assert [r.ok for r in batcher.records()] == [False, True]


def test_results_report_shares_of_the_call_by_length() -> None:
    batcher = DynamicBatcher(FakeModel(), max_batch=2, max_wait_ms=300)
    futures = [batcher.submit("v", [1] * 30), batcher.submit("v", [1] * 25)]
    long, short = (f.result(timeout=5) for f in futures)
    batcher.close()
    assert long.batch_size == short.batch_size == 2
    assert long.share_ms == pytest.approx(1.2 * short.share_ms)
    assert long.share_ms + short.share_ms == pytest.approx(long.run_ms)


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        DynamicBatcher(FakeModel(), max_batch=0)


class GatedModel(FakeModel):
    """Holds its first call until released, so items pile up behind it in a known order."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, key: str, batch: list[Sequence[int]], stop: CallStop | None = None) -> list[FloatAudio]:
        self.started.set()
        self.release.wait(5)
        return super().__call__(key, batch, stop)


def test_interactive_items_overtake_queued_bulk_items() -> None:
    """Priority 0 items queued behind bulk ones (priority 1) run before them, in arrival order among
    themselves; the call already running is not interrupted."""
    model = GatedModel()
    batcher = DynamicBatcher(model, max_batch=1)
    running = batcher.submit("voice", [0] * 5, "bulk-running", priority=1)
    assert model.started.wait(5)
    bulk = [batcher.submit("voice", [1] * 5, f"bulk{n}", priority=1) for n in range(3)]
    interactive = [batcher.submit("voice", [2] * 5, f"inter{n}", priority=0) for n in range(2)]
    model.release.set()
    for future in [running, *bulk, *interactive]:
        future.result(timeout=5)
    batcher.close()
    order = [r.tags[0] for r in batcher.records()]
    assert order == ["bulk-running", "inter0", "inter1", "bulk0", "bulk1", "bulk2"]


def test_close_finishes_queued_items_of_every_priority_first() -> None:
    model = GatedModel()
    batcher = DynamicBatcher(model, max_batch=1)
    futures = [batcher.submit("voice", [n] * 3, priority=n % 2) for n in range(4)]
    model.release.set()
    batcher.close()
    assert all(f.done() and f.exception() is None for f in futures)


def test_a_deferring_batcher_starts_no_call_while_the_preferred_one_is_busy() -> None:
    preferred_model = GatedModel()
    preferred = DynamicBatcher(preferred_model, max_batch=1, name="preferred")
    deferring = DynamicBatcher(FakeModel(), max_batch=1, defer_to=preferred)
    held = preferred.submit("voice", [1] * 4)
    assert preferred_model.started.wait(5)
    waiting = deferring.submit("voice", [2] * 4)
    with pytest.raises(FuturesTimeout):  # the preferred call is still running: no call here
        waiting.result(timeout=0.3)
    preferred_model.release.set()
    held.result(timeout=5)
    waiting.result(timeout=5)
    first, second = preferred.records()[0], deferring.records()[0]
    assert second.started_at >= first.started_at + first.run_ms / 1000 - 0.01
    preferred.close()
    deferring.close()


class StoppableModel(FakeModel):
    """Each call runs until let go or stopped; a stopped call raises, as ONNX Runtime's ``session.run``
    does once its ``RunOptions.terminate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Semaphore(0)
        self.released = False
        self._wakes: list[threading.Event] = []

    def __call__(self, key: str, batch: list[Sequence[int]], stop: CallStop | None = None) -> list[FloatAudio]:
        assert stop is not None
        wake = threading.Event()
        self._wakes.append(wake)
        stop.when_requested(wake.set)
        if self.released:
            wake.set()
        self.started.release()
        wake.wait(5)
        if stop.requested:
            raise RuntimeError("Exiting due to terminate flag being set to true.")
        return super().__call__(key, batch, stop)

    def let_go(self) -> None:
        self.released = True
        for wake in self._wakes:
            wake.set()


def test_preferred_work_stops_a_running_call_which_runs_again_after_and_only_once() -> None:
    """An item arriving at the preferred batcher stops the preemptible one's running call; that call
    runs again once the preferred work is done, and this second run is not stopped by more preferred
    work. The stopped call is kept in the history as stopped, not failed, and no observer hears of it."""
    preferred = DynamicBatcher(FakeModel(), max_batch=1, name="preferred")
    model = StoppableModel()
    observed: list[bool] = []
    bulk = DynamicBatcher(
        model, 1, defer_to=preferred, preemptible=True, observe=lambda _key, record: observed.append(record.ok)
    )
    result = bulk.submit("voice", [1] * 6, "bulk")
    assert model.started.acquire(timeout=5)
    preferred.submit("voice", [2] * 3, "first").result(timeout=5)
    assert model.started.acquire(timeout=5)  # run again, after the preferred call
    preferred.submit("voice", [3] * 3, "second").result(timeout=5)  # must not stop the second run
    model.let_go()
    assert result.result(timeout=5).audio.size == 6
    bulk.close()
    preferred.close()
    stopped, finished = bulk.records()
    assert (stopped.stopped, stopped.ok, finished.stopped, finished.ok) == (True, False, False, True)
    assert (bulk.calls, bulk.stopped_calls, observed) == (1, 1, [True])
    first_preferred = preferred.records()[0]
    assert stopped.started_at <= first_preferred.started_at <= finished.started_at


def test_a_batcher_not_preemptible_lets_its_call_finish() -> None:
    preferred = DynamicBatcher(FakeModel(), max_batch=1, name="preferred")
    model = StoppableModel()
    bulk = DynamicBatcher(model, max_batch=1, defer_to=preferred)
    result = bulk.submit("voice", [1] * 4, "bulk")
    assert model.started.acquire(timeout=5)
    preferred.submit("voice", [2] * 3, "first").result(timeout=5)
    assert not result.done()
    model.let_go()
    result.result(timeout=5)
    bulk.close()
    preferred.close()
    assert [(r.ok, r.stopped) for r in bulk.records()] == [(True, False)]


def test_a_stop_requested_before_the_run_registers_stops_it_at_once() -> None:
    stop = CallStop()
    stop.request()
    stopped: list[bool] = []
    stop.when_requested(lambda: stopped.append(True))
    assert stopped == [True]


def test_work_announced_stops_the_running_call_and_holds_the_next_until_it_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``expect`` acts as an item arriving: the preemptible batcher's call is stopped, and it runs
    again only once the announced work has ended; the announcement ends once, however often told.
    It is ended here, so its lapse (the next test's) is put far off: a loaded machine's pause must
    not end it first."""
    monkeypatch.setattr(batching, "MAX_EXPECT_S", 30.0)
    preferred = DynamicBatcher(FakeModel(), max_batch=1, name="preferred")
    model = StoppableModel()
    bulk = DynamicBatcher(model, 1, defer_to=preferred, preemptible=True)
    result = bulk.submit("voice", [1] * 5, "bulk")
    assert model.started.acquire(timeout=5)
    ended = preferred.expect()
    assert not model.started.acquire(timeout=0.3)  # stopped, and not run again while announced
    assert not preferred.wait_idle(0)
    ended()
    ended()
    assert preferred.wait_idle(0)
    assert model.started.acquire(timeout=5)  # run again, now the announced work is over
    model.let_go()
    assert result.result(timeout=5).audio.size == 5
    bulk.close()
    preferred.close()
    assert [r.stopped for r in bulk.records()] == [True, False]


def test_an_announcement_never_ended_lapses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that announced work and hangs holds the other batcher for ``MAX_EXPECT_S`` only."""
    monkeypatch.setattr(batching, "MAX_EXPECT_S", 0.2)
    preferred = DynamicBatcher(FakeModel(), max_batch=1, name="preferred")
    preferred.expect()
    assert not preferred.wait_idle(0)
    assert preferred.wait_idle(5)
    preferred.close()


def test_announcements_share_one_lapse_thread() -> None:
    """Each interactive step announces itself: a thread started per announcement waited for the
    interpreter's lock on a busy worker. Many announcements add one thread, and each still lapses."""
    preferred = DynamicBatcher(FakeModel(), max_batch=1, name="preferred")
    before = threading.active_count()
    releases = [preferred.expect() for _ in range(50)]
    assert threading.active_count() <= before + 1
    for release in releases[:-1]:
        release()
    assert not preferred.wait_idle(0)
    assert preferred.wait_idle(batching.MAX_EXPECT_S + 5), "the last announcement never lapsed"
    preferred.close()


class HeldModel:
    """Holds each call until let go, noting how many calls ran beside it when it began."""

    def __init__(self) -> None:
        self.began = threading.Semaphore(0)
        self.go = threading.Event()
        self.beside: list[int] = []
        self.lately: list[bool] = []
        self.threads: set[str] = set()

    def __call__(self, key: str, batch: list[Sequence[int]], stop: CallStop) -> list[FloatAudio]:
        self.beside.append(stop.beside)
        self.lately.append(stop.lately_beside)
        self.threads.add(threading.current_thread().name)
        self.began.release()
        assert self.go.wait(10)
        return [np.asarray(ids, dtype=np.float32) for ids in batch]


def test_a_second_call_runs_beside_the_first_only_while_another_item_waits() -> None:
    """``parallel_calls=2``: a lone item runs alone (``beside`` 0); one that comes while it runs
    starts at once on the second thread (``beside`` 1); a third waits for a thread."""
    model = HeldModel()
    batcher = DynamicBatcher(model, max_batch=1, parallel_calls=2, name="lanes")
    first = batcher.submit("voice", [1] * 3, "first")
    assert model.began.acquire(timeout=5)
    second = batcher.submit("voice", [2] * 3, "second")
    assert model.began.acquire(timeout=5), "the second call did not start beside the first"
    third = batcher.submit("voice", [3] * 3, "third")
    assert not model.began.acquire(timeout=0.3), "a third call started with two running"
    model.go.set()
    assert [f.result(timeout=5).audio.size for f in (first, second, third)] == [3, 3, 3]
    batcher.close()
    assert model.beside[:2] == [0, 1]
    assert model.threads == {"lanes", "lanes-2"}
    assert not batcher.alive  # close stopped both threads


def test_a_call_that_begins_alone_moments_after_two_ran_at_once_is_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load a call begins alone only between two others: ``lately_beside`` says that two ran at
    once until less than ``BESIDE_MEMORY_S`` before it began, so the worker runs it as one of a pair."""
    model = HeldModel()
    batcher = DynamicBatcher(model, max_batch=1, parallel_calls=2, name="memory")
    try:
        alone = batcher.submit("voice", [1], "alone")
        assert model.began.acquire(timeout=5)
        model.go.set()
        alone.result(timeout=5)
        model.go.clear()
        first = batcher.submit("voice", [1], "first")
        assert model.began.acquire(timeout=5)
        second = batcher.submit("voice", [2], "second")
        assert model.began.acquire(timeout=5)
        model.go.set()
        first.result(timeout=5)
        second.result(timeout=5)
        monkeypatch.setattr(batching, "BESIDE_MEMORY_S", 60.0)
        batcher.submit("voice", [3], "moments after").result(timeout=5)
        monkeypatch.setattr(batching, "BESIDE_MEMORY_S", 0.0)
        batcher.submit("voice", [4], "long after").result(timeout=5)
    finally:
        batcher.close()
    assert model.beside == [0, 0, 1, 0, 0]
    assert model.lately == [False, False, True, True, False]


def test_one_call_at_a_time_without_parallel_calls() -> None:
    model = HeldModel()
    batcher = DynamicBatcher(model, max_batch=1, name="one-lane")
    first = batcher.submit("voice", [1] * 3, "first")
    assert model.began.acquire(timeout=5)
    second = batcher.submit("voice", [2] * 3, "second")
    assert not model.began.acquire(timeout=0.3)
    model.go.set()
    assert second.result(timeout=5).audio.size == first.result(timeout=5).audio.size == 3
    batcher.close()
    assert model.beside == [0, 0]


def test_preferred_work_stops_every_running_call_of_a_parallel_batcher() -> None:
    preferred = DynamicBatcher(FakeModel(), max_batch=1, name="preferred")
    model = StoppableModel()
    bulk = DynamicBatcher(model, max_batch=1, defer_to=preferred, preemptible=True, parallel_calls=2)
    results = [bulk.submit("voice", [n] * 4, f"bulk{n}") for n in (1, 2)]
    assert model.started.acquire(timeout=5)
    assert model.started.acquire(timeout=5)
    preferred.submit("voice", [3] * 3, "preferred").result(timeout=5)
    assert model.started.acquire(timeout=5)
    assert model.started.acquire(timeout=5)
    model.let_go()
    assert [r.result(timeout=5).audio.size for r in results] == [4, 4]
    bulk.close()
    preferred.close()
    assert (bulk.calls, bulk.stopped_calls) == (2, 2)


def test_parallel_calls_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="parallel_calls"):
        DynamicBatcher(FakeModel(), parallel_calls=0)
