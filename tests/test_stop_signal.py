"""A stop always stops (issue 35): no signal handler of ttsq takes a lock (``tts_core.stop_signal``).

Python runs a handler between two bytecodes of the main thread, wherever it is. The sweep below
makes that happen at every line in turn: a tracer calls the handler that ttsq's own code installed
at the k-th line run after it was installed and at every line after (so also during the stop, as
repeated signals do), for each k. A handler that takes a lock the waiting code holds waits for
itself: ``threading.Event.set`` from inside ``Event.wait`` did, in ``ttsq dev``, ``ttsq worker`` and
``ttsq narrate``. Then real processes: a worker pool gets bursts of SIGTERM and SIGINT at random
moments, idle and busy, and must exit 0 with no process of it left.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

import psutil
import pytest

from cli.processes import wait_until
from tts_core.stop_signal import SignalEvent

ROOT: Final = Path(__file__).resolve().parent.parent

SWEEP: Final = 40
"""Lines swept per target: past the first whole turn of each waiting loop (about 20 lines in)."""

SWEEP_HARNESS: Final = r"""
import faulthandler, json, signal, sys, tempfile
from pathlib import Path

faulthandler.dump_traceback_later(float(sys.argv[3]), exit=True)  # a handler that waits for itself: its stack
target, sweep = sys.argv[1], int(sys.argv[2])
signum = signal.SIGINT if target == "narrate" else signal.SIGTERM


def ours():
    handler = signal.getsignal(signum)
    return handler if callable(handler) and handler is not signal.default_int_handler else None


def fire_from(k, landed):
    # From the k-th line run after ttsq installed its handler, call that handler at every line.
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        handler = ours() if event == "line" else None
        if handler is not None:
            count += 1
            if count == k:
                landed.add(frame.f_code.co_name)
            if count >= k:
                handler(signum, frame)
        return tracer

    return tracer


def workers():
    from cli.workerpool import run_workers

    return run_workers([])


def dev():
    import cli.dev

    settings = cli.dev.Settings()
    cli.dev.Settings = lambda: settings  # read once, not under the tracer on every turn
    cli.dev.DevStack.start = lambda self: None  # the stack's children are not the point here
    cli.dev.banner = lambda *args: ""
    return cli.dev.run_dev(Path(tempfile.mkdtemp()), cli.dev.DevPorts())


def event():
    # The handler of before, as the sweep's own check: threading.Event.set, whose lock Event.wait holds.
    import threading
    from cli.supervisor import Supervisor

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    Supervisor("before").run(stopping)
    return 0


def narrate():
    from narration.interrupts import Checkpoints

    try:
        with Checkpoints() as checkpoints:
            while True:  # as the narration's polls do
                checkpoints.sleep(0.2)
    except KeyboardInterrupt:
        return 0
    return 1


run = {"workers": workers, "dev": dev, "narrate": narrate, "event": event}[target]
landed = set()
for k in range(1, sweep + 1):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.settrace(fire_from(k, landed))
    try:
        code = run()
    finally:
        sys.settrace(None)
    assert code == 0, (k, code)
print(json.dumps(sorted(landed)))
"""


def sweep(target: str, lines: int = SWEEP, watchdog_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SWEEP_HARNESS, target, str(lines), str(watchdog_s)],
        capture_output=True, text=True, timeout=watchdog_s + 60, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("target", ["workers", "dev", "narrate"])
def test_a_signal_at_any_line_of_the_wait_stops_it(target: str) -> None:
    """The handler of ``ttsq worker``, ``ttsq dev`` and ``ttsq narrate``, run at every line from the
    install on, the supervisor's wait and its stop included: every run ends, none waits for itself."""
    done = sweep(target)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wait" in json.loads(done.stdout.splitlines()[-1])  # the sweep reached the wait itself


def test_the_sweep_catches_a_handler_that_takes_the_waiters_lock() -> None:
    """The sweep can fail: the handler of before (``threading.Event.set``, whose lock ``Event.wait``
    holds) waits for itself under it, and the watchdog dumps the stack, as seen on ``ttsq dev``."""
    done = sweep("event", watchdog_s=10)
    assert done.returncode != 0
    assert "Timeout" in done.stderr, done.stderr[-3000:]
    assert "in set" in done.stderr, done.stderr[-3000:]
    assert "in wait" in done.stderr, done.stderr[-3000:]


def test_set_wakes_every_waiter_at_once_and_they_stay_woken() -> None:
    event = SignalEvent()
    woken: list[bool] = []
    waiters = [threading.Thread(target=lambda: woken.append(event.wait(60))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    assert not event.wait(0.05)
    event.set()
    for waiter in waiters:
        waiter.join(30)
    assert woken == [True, True, True]
    assert event.wait(60)
    assert event.wait(60)  # nothing drained it
    event.close()


def test_many_sets_never_block_the_handler() -> None:
    """Far more signals than the pipe holds: ``set`` neither blocks nor raises."""
    event = SignalEvent()
    for _ in range(100_000):
        event.set()
    assert event.is_set()
    assert event.wait(0)
    event.close()
    event.set()  # a handler left installed after the close only sets the flag
    with pytest.raises(ValueError, match="closed"):
        event.wait(1)


# Real processes. A pool of three workers: two sleepers and one that keeps a core busy; each writes
# its pid into the folder first.
POOL: Final = r"""
import sys
from cli.workerpool import WorkerSpec, run_workers
folder = sys.argv[1]
mark = "import os, sys, time; open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close()\n"
sleeper = mark + "time.sleep(600)"
busy = mark + "while True: sum(range(10_000))"
specs = [WorkerSpec(name, [sys.executable, "-c", code, folder]) for name, code in
         (("a", sleeper), ("b", busy), ("c", sleeper))]
sys.exit(run_workers(specs))
"""

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def handles(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for ``signum`` (``SigCgt`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def storm(process: subprocess.Popen[bytes], rng: random.Random, count: int, within_s: float) -> None:
    """Once ``process`` handles SIGTERM, wait a random moment within ``within_s``, then send it
    ``count`` SIGTERMs and SIGINTs at random, some back to back."""
    wait_until(lambda: handles(process.pid, signal.SIGTERM), 60, "the stop handler installed")
    time.sleep(rng.uniform(0, within_s))
    for _ in range(count):
        if process.poll() is not None:
            return
        process.send_signal(rng.choice(STOP_SIGNALS))
        time.sleep(rng.choice((0.0, rng.uniform(0, 0.05), rng.uniform(0, 0.5))))


def stops_cleanly(process: subprocess.Popen[bytes], seen: set[psutil.Process], timeout_s: float) -> None:
    """Exit code 0 within ``timeout_s``, and none of the processes seen under it still running."""
    try:
        code = process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"still running {timeout_s:.0f}s after the signals") from None
    left = [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert code == 0
    assert not left, left


def watch(pid: int, seen: set[psutil.Process], stop: threading.Event) -> None:
    """Every descendant of ``pid`` that ever shows up, until ``stop``."""
    while not stop.is_set():
        try:
            seen.update(psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            return
        stop.wait(0.02)


def pool_storm(tmp_path: Path, rng: random.Random, signals: int, within_s: float) -> int:
    """One worker pool stopped by a storm of ``signals``; how many it sent."""
    folder = tmp_path / f"pids-{rng.random()}"
    folder.mkdir()
    process = subprocess.Popen([sys.executable, "-c", POOL, str(folder)], cwd=ROOT, start_new_session=True)
    seen: set[psutil.Process] = set()
    done = threading.Event()
    watcher = threading.Thread(target=watch, args=(process.pid, seen, done), daemon=True)
    watcher.start()
    try:
        storm(process, rng, signals, within_s)
        stops_cleanly(process, seen, 60)
    finally:
        done.set()
        watcher.join(10)
    for name in os.listdir(folder):  # a child started and stopped between two looks at the tree
        assert not psutil.pid_exists(int(name)) or psutil.Process(int(name)).status() == psutil.STATUS_ZOMBIE
    return signals


def test_a_worker_pool_stops_cleanly_on_signals_at_random_moments(tmp_path: Path) -> None:
    """A few storms, each at a random moment in the pool's first second and a half (its children
    starting, or running with one busy): exit 0, and no child left running."""
    rng = random.Random(35)
    for _ in range(4):
        pool_storm(tmp_path, rng, rng.randint(1, 5), 1.5)
