"""Lower CPU priority (``ttsq.cpu_priority``): a thread for a block and back, a thread for good, and a
whole process in a session group of its own, on this machine's real kernel."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable

from ttsq.cpu_priority import (
    AUTOGROUP,
    lower_process_priority,
    lower_thread_for_good,
    lowered_thread,
    normal_thread,
    threads_can_come_back,
)


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_a_thread(work: Callable[[], list[int]]) -> list[int]:
    """Run ``work`` (returning niceness readings) on a fresh thread, so this one is never lowered."""
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.extend(work()))
    thread.start()
    thread.join()
    return seen


def test_a_lowered_block_runs_lower_and_its_thread_comes_back_where_it_may() -> None:
    def work() -> list[int]:
        before = _own_nice()
        with lowered_thread(5):
            inside = _own_nice()
        return [before, inside, _own_nice()]

    before, inside, after = _in_a_thread(work)
    if threads_can_come_back():
        assert inside == min(19, before + 5)
    else:  # lowered for good it would run every later task lowered: left as it is
        assert inside == before
    assert after == before
    assert _own_nice() == os.getpriority(os.PRIO_PROCESS, 0), "the test's own thread was touched"


def test_a_thread_lowered_for_good_stays_lower_and_alone() -> None:
    def work() -> list[int]:
        before = _own_nice()
        lower_thread_for_good(19)
        return [before, _own_nice()]

    before, after = _in_a_thread(work)
    assert after == 19
    assert _own_nice() == before, "another thread of the process was lowered too"


def _report_priority(answers: multiprocessing.SimpleQueue[tuple[int, int, str]]) -> None:
    lower_process_priority(7)
    group = AUTOGROUP.read_text().strip() if AUTOGROUP.exists() else ""
    answers.put((os.getpriority(os.PRIO_PROCESS, 0), os.getsid(0), group))


def test_a_lowered_process_has_a_session_group_of_its_own_at_its_nice() -> None:
    """A nice alone orders only the threads of one autogroup: the process leaves its parent's."""
    context = multiprocessing.get_context("spawn")
    answers: multiprocessing.SimpleQueue[tuple[int, int, str]] = context.SimpleQueue()
    child = context.Process(target=_report_priority, args=(answers,))
    child.start()
    child.join(60)
    nice, session, group = answers.get()
    assert nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)
    assert session != os.getsid(0)
    if AUTOGROUP.exists():
        name, _, group_nice = group.split()
        # A process in the kernel's default group (or in a cgroup of its own) reads an empty file.
        parent_group = AUTOGROUP.read_text().split()
        assert name != (parent_group[0] if parent_group else "")
        assert int(group_nice) == nice


def test_a_lowered_thread_starts_threads_at_normal_priority_inside_normal_thread() -> None:
    """A model loaded by a bulk step starts its inference threads at the process's priority."""

    def work() -> list[int]:
        with lowered_thread(5):
            lowered = _own_nice()
            started: list[int] = []
            with normal_thread():
                inside = _own_nice()
                child = threading.Thread(target=lambda: started.append(_own_nice()))
                child.start()
                child.join()
            return [lowered, inside, started[0], _own_nice()]

    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    lowered, inside, started, after = _in_a_thread(work)
    assert (inside, started) == (base, base)
    assert after == lowered
