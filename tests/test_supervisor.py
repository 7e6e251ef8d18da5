"""The supervisor of ``ttsq dev`` and ``ttsq worker --gpus`` (``cli.supervisor``) on small real
child processes: one that dies comes back with a line saying how it ended, one that dies at once backs
off instead of looping, a stop leaves nothing behind, a child waiting out its backoff included.
``ttsq worker``'s use of it: tests/test_workerpool.py; ``ttsq dev``'s: tests/test_dev_supervision.py."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from cli.processes import ManagedProcess, wait_until
from cli.supervisor import Backoff, ChildFailing, Supervisor, exit_status

# Each child appends "<pid> <monotonic time>" to the file named by its first argument when it starts.
STARTED = "import os, sys, time\nwith open(sys.argv[1], 'a') as f: f.write(f'{os.getpid()} {time.monotonic()}\\n')\n"
SLEEPER = STARTED + "time.sleep(120)\n"
QUITTER = STARTED + "raise SystemExit(3)\n"
# A child with a grandchild in its process group (as a worker has its pool): both write a line.
PARENT = STARTED + (
    "import subprocess\nsubprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]])\ntime.sleep(120)\n"
)


def child(name: str, script: str, record: Path, *args: str) -> ManagedProcess:
    return ManagedProcess(name, [sys.executable, "-c", script, str(record), *args], None)


def starts(record: Path) -> list[tuple[int, float]]:
    """``(pid, monotonic time)`` of each start recorded so far."""
    if not record.exists():
        return []
    return [(int(pid), float(at)) for pid, at in (line.split() for line in record.read_text().splitlines())]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def supervisor(backoff: Backoff | None = None) -> tuple[Supervisor, list[str]]:
    """A supervisor, and the lines it prints."""
    lines: list[str] = []
    return Supervisor("test", backoff, echo=lines.append), lines


def supervise_until(sup: Supervisor, check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    """Poll the supervisor, as its loop does, until ``check`` passes."""

    def polled() -> bool:
        sup.poll()
        return check()

    wait_until(polled, timeout_s, what)


def test_backoff_doubles_to_its_cap() -> None:
    assert [Backoff().delay(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]
    assert [Backoff(first_s=0.1, max_s=0.3).delay(n) for n in range(1, 5)] == [0.1, 0.2, 0.3, 0.3]


def test_exit_status_names_the_code_or_the_signal() -> None:
    assert exit_status(0) == "exited with code 0"
    assert exit_status(3) == "exited with code 3"
    assert exit_status(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_status(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert exit_status(-99) == "killed by signal 99"


def test_a_child_killed_comes_back_with_a_line_and_nothing_of_it_is_left(tmp_path: Path) -> None:
    record = tmp_path / "starts"
    sup, lines = supervisor()
    sup.add(child("sleeper", PARENT, record, SLEEPER))
    try:
        supervise_until(sup, lambda: len(starts(record)) == 2, "the child and its grandchild")
        leader, grandchild = (pid for pid, _ in starts(record))
        os.kill(leader, signal.SIGKILL)
        supervise_until(sup, lambda: len(starts(record)) == 4, "the child started again")
        line = r"test: sleeper killed by SIGKILL after running [\d.]+ s; starting it again in 0\.5 s"
        assert re.fullmatch(line, lines[0])
        assert len(lines) == 1
        assert not running(leader)
        # Its process group was sent SIGKILL before the new start: the grandchild goes too (a
        # signalled process may take a moment to exit, hence a wait, not a glance).
        wait_until(lambda: not running(grandchild), 10, "the grandchild gone")
        assert sup.processes[0].alive
    finally:
        sup.stop()
    wait_until(lambda: not any(running(pid) for pid, _ in starts(record)), 10, "every process gone")


def test_a_child_that_dies_at_once_backs_off_instead_of_looping(tmp_path: Path) -> None:
    record = tmp_path / "starts"
    sup, lines = supervisor(Backoff(first_s=0.1, max_s=0.4, steady_s=60))
    sup.add(child("quitter", QUITTER, record))
    try:
        supervise_until(sup, lambda: len(starts(record)) >= 6, "six starts")
    finally:
        sup.stop()
    delays = [float(m[1]) for m in (re.search(r"starting it again in ([\d.]+) s$", line) for line in lines) if m]
    assert delays[:5] == [0.1, 0.2, 0.4, 0.4, 0.4]
    assert all(line.startswith("test: quitter exited with code 3 after running") for line in lines)
    assert [re.search(r"\((\d+) times in a row\)", line) is not None for line in lines[:3]] == [False, True, True]
    times = [at for _, at in starts(record)]
    for earlier, later, delay in zip(times, times[1:], delays, strict=False):
        assert later - earlier >= delay  # each start waited at least its announced delay


def test_a_child_that_stayed_up_starts_over_from_the_first_delay(tmp_path: Path) -> None:
    record = tmp_path / "starts"
    sup, lines = supervisor(Backoff(first_s=0.1, max_s=5, steady_s=0.5))
    sup.add(child("steady", STARTED + "time.sleep(0.8)\nraise SystemExit(1)\n", record))
    try:
        supervise_until(sup, lambda: len(lines) >= 3, "three deaths")
    finally:
        sup.stop()
    assert all(line.endswith("; starting it again in 0.1 s") for line in lines)
    assert not any("in a row" in line for line in lines)


def test_stop_during_a_backoff_starts_nothing_again_and_leaves_nothing(tmp_path: Path) -> None:
    record, other = tmp_path / "quitter", tmp_path / "sleeper"
    sup, lines = supervisor(Backoff(first_s=30))
    sup.add(child("sleeper", SLEEPER, other))
    sup.add(child("quitter", QUITTER, record))
    supervise_until(sup, lambda: len(lines) == 1, "the quitter in its backoff")
    sup.stop()
    sup.poll()  # a poll after the stop starts nothing, however late
    assert len(starts(record)) == 1
    assert not any(p.alive for p in sup.processes)
    assert not any(running(pid) for pid, _ in starts(record) + starts(other))


def test_a_child_that_never_stays_up_fails_a_start_with_its_name(tmp_path: Path) -> None:
    sup, _ = supervisor(Backoff(first_s=0.05))
    sup.add(child("api", QUITTER, tmp_path / "starts"))
    try:
        with pytest.raises(ChildFailing, match=r"^API /readyz: api exited with code 3, 5 times in a row"):
            sup.wait_until(lambda: False, 60, "API /readyz", threading.Event())
    finally:
        sup.stop()


def test_wait_until_returns_false_once_a_stop_is_asked(tmp_path: Path) -> None:
    sup, _ = supervisor()
    stop = threading.Event()
    stop.set()
    assert not sup.wait_until(lambda: False, 60, "never", stop)


# A child that, on SIGTERM, writes "<name> term", lingers as a warm shutdown does until every peer
# named after its own name wrote its "term" too (10 s at most, past which a supervisor that waits for
# it before signalling them shows), then writes "<name> exit" and ends; it writes "<name> up" once its
# handler is in place. Lingering on its peers rather than for a fixed time keeps a loaded machine,
# which may run a peer's handler late, from reading as a serial stop. A second SIGTERM (the stop of a
# stage's child signals it again) changes nothing, as for a Celery worker or uvicorn in a warm stop.
LINGERER = (
    "import signal, sys, time\n"
    "termed = []\n"
    "def note(word):\n"
    "    with open(sys.argv[1], 'a') as f: f.write(f'{sys.argv[2]} {word}\\n')\n"
    "def peers_signalled():\n"
    "    seen = open(sys.argv[1]).read().splitlines()\n"
    "    return all(f'{peer} term' in seen for peer in sys.argv[3:])\n"
    "def term(*_):\n"
    "    if termed: return\n"
    "    termed.append(True)\n"
    "    note('term')\n"
    "    deadline = time.monotonic() + 10\n"
    "    while not peers_signalled() and time.monotonic() < deadline: time.sleep(0.05)\n"
    "    note('exit'); raise SystemExit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "note('up')\n"
    "time.sleep(120)\n"
)


def test_a_stop_signals_a_stage_together_and_ends_it_before_the_next(tmp_path: Path) -> None:
    """Stages stop from the highest down; the children of one are all signalled before any is
    waited for, so the slowest sets the stage's time, not their sum."""
    record = tmp_path / "events"
    sup, _ = supervisor()
    peers = {"store": [], "worker": [], "api": ["flower"], "flower": ["api"]}
    for name, stage in (("store", 0), ("worker", 1), ("api", 2), ("flower", 2)):
        argv = [sys.executable, "-c", LINGERER, str(record), name, *peers[name]]
        sup.add(ManagedProcess(name, argv, None), stage)
    wait_until(lambda: record.exists() and record.read_text().count(" up") == 4, 30, "every child up")
    sup.stop()
    events = [line for line in record.read_text().splitlines() if not line.endswith(" up")]
    assert sorted(events[:2]) == ["api term", "flower term"]  # both signalled before either ended
    assert sorted(events[2:4]) == ["api exit", "flower exit"]
    assert events[4:] == ["worker term", "worker exit", "store term", "store exit"]
