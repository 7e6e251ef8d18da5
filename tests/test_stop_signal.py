"""A stop always stops (issue 35): no signal handler of ttsq takes a lock (``tts_core.base.stop_signal``).

Python runs a handler between two bytecodes of the main thread, wherever it is. The sweep below
makes that happen at every line in turn: a tracer calls the handler that ttsq's own code installed
at the k-th line run after it was installed and at every line after (so also during the stop, as
repeated signals do), for each k. A handler that takes a lock the waiting code holds waits for
itself: ``threading.Event.set`` from inside ``Event.wait`` did, in ``ttsq dev``, a ``ttsq worker``
pool and ``ttsq narrate``. Then real processes: a worker pool gets bursts of SIGTERM and SIGINT at random
moments, idle and busy, and must exit 0 with no process of it left; behind the ``faults`` marker
(``make faults``), 200 signals each to ``ttsq dev`` and to a ``ttsq worker`` pool, starting, idle
and busy.
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
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Final

import httpx
import psutil
import pytest

from cli.processes import free_ports, port_in_use, wait_until
from tests.faults_support import record_figures
from tests.test_cli import DevProcess, clean_env, dev_args, free_dev_ports
from tests.test_dev_supervision import FAST_RECOVERY, TEXT, submit, wait_started
from tts_core.base.stop_signal import SignalEvent
from ttsq.settings import Settings, settings_env

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


def sweep(target: str, lines: int = SWEEP, watchdog_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SWEEP_HARNESS, target, str(lines), str(watchdog_s)],
        capture_output=True, text=True, timeout=watchdog_s + 60, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("target", ["workers", "dev", "narrate"])
def test_a_signal_at_any_line_of_the_wait_stops_it(target: str) -> None:
    """The handler of a ``ttsq worker`` pool, ``ttsq dev`` and ``ttsq narrate``, run at every line from the
    install on, the supervisor's wait and its stop included: every run ends, none waits for itself."""
    done = sweep(target)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wait" in json.loads(done.stdout.splitlines()[-1])  # the sweep reached the wait itself


def test_the_sweep_catches_a_handler_that_takes_the_waiters_lock() -> None:
    """The sweep can fail: the handler of before (``threading.Event.set``, whose lock ``Event.wait``
    holds) waits for itself under it, and the watchdog dumps the stack, as seen on ``ttsq dev``. It
    waits for itself within the first lines swept, well under a second in: the watchdog's 4 s are
    all margin (3 s caught it every time with three test processes on two cores)."""
    done = sweep("event", watchdog_s=4)
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

SIGNALS: Final = 200
"""Signals per target in the fault run (issue 35: 200 to ``ttsq dev``, 200 to a ``ttsq worker`` pool)."""

PHASES: Final = ("starting", "idle", "busy")
"""When a storm begins: while the children start, once they are ready, or with jobs running."""


def handles(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for ``signum`` (``SigCgt`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def storm(process: subprocess.Popen[Any], rng: random.Random, count: int, within_s: float) -> int:
    """Once ``process`` handles SIGTERM, wait a random moment within ``within_s``, then send it up to
    ``count`` SIGTERMs and SIGINTs at random, some back to back; how many it got before it exited."""
    wait_until(lambda: handles(process.pid, signal.SIGTERM), 120, "the stop handler installed")
    time.sleep(rng.uniform(0, within_s))
    sent = 0
    for _ in range(count):
        if process.poll() is not None:
            break
        process.send_signal(rng.choice(STOP_SIGNALS))
        sent += 1
        time.sleep(rng.choice((0.0, rng.uniform(0, 0.05), rng.uniform(0, 0.5))))
    return sent


@contextmanager
def watched(process: subprocess.Popen[Any]) -> Iterator[set[psutil.Process]]:
    """Every descendant of ``process`` that shows up while the block runs; a process still running
    at the end of the block (a failed test) is killed with them."""
    seen: set[psutil.Process] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with suppress(psutil.Error):
                seen.update(psutil.Process(process.pid).children(recursive=True))
            done.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join(10)
        if process.poll() is None:
            for left in [*seen, psutil.Process(process.pid)]:
                with suppress(psutil.Error):
                    left.kill()
            process.wait(30)


def stops_cleanly(process: subprocess.Popen[Any], seen: set[psutil.Process], timeout_s: float) -> None:
    """Exit code 0 within ``timeout_s``, and none of the processes seen under it still running."""
    try:
        code = process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {timeout_s:.0f}s after the signals") from None
    assert code == 0
    left = [p for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, left


def pool_storm(tmp_path: Path, rng: random.Random, signals: int, within_s: float) -> int:
    """A pool of three (two sleepers, one busy) stopped by a storm of up to ``signals``; how many it got."""
    folder = tmp_path / f"pids-{rng.random()}"
    folder.mkdir()
    process = subprocess.Popen([sys.executable, "-c", POOL, str(folder)], cwd=ROOT, start_new_session=True)
    with watched(process) as seen:
        sent = storm(process, rng, signals, within_s)
        stops_cleanly(process, seen, 60)
    for name in os.listdir(folder):  # a child started and stopped between two looks at the tree
        assert not psutil.pid_exists(int(name)) or psutil.Process(int(name)).status() == psutil.STATUS_ZOMBIE
    return sent


@pytest.mark.recovery
def test_a_worker_pool_stops_cleanly_on_signals_at_random_moments(tmp_path: Path) -> None:
    """A few storms, each at a random moment in the pool's first second and a half (its children
    starting, or running with one busy): exit 0, and no child left running."""
    rng = random.Random(35)
    for _ in range(4):
        pool_storm(tmp_path, rng, rng.randint(1, 5), 1.5)


def keep_busy(client: httpx.Client) -> list[str]:
    """Long jobs submitted, once one of them runs: the jobs."""
    jobs = [submit(client, TEXT) for _ in range(3)]
    wait_started(client, jobs[0])
    return jobs


def dev_storm(data_dir: Path, rng: random.Random, phase: str, signals: int) -> int:
    """``ttsq dev`` on free ports, stopped by a storm of up to ``signals`` beginning in ``phase``:
    exit 0, none of its processes left, every port free again. How many signals it got."""
    ports = free_dev_ports()
    dev = DevProcess(dev_args(data_dir, ports), clean_env(**FAST_RECOVERY))
    with watched(dev.process) as seen:
        if phase != "starting":
            dev.wait_ready()
        if phase == "busy":
            with httpx.Client(base_url=f"http://127.0.0.1:{ports['api']}", timeout=30) as client:
                keep_busy(client)
        sent = storm(dev.process, rng, signals, 20.0 if phase == "starting" else 2.0)
        stops_cleanly(dev.process, seen, 300)
    assert dev.terminate() == 0  # already exited: collects its output
    assert not [name for name, port in ports.items() if port_in_use(port)]
    return sent


# ``ttsq worker`` with one process execs Celery itself (its own handlers); a pool is what runs under
# ttsq's supervisor (``--gpus`` on a GPU host): here two CPU workers, each with its metrics port.
WORKER_POOL: Final = r"""
import sys
from cli.workerpool import cpu_worker, run_workers
from ttsq.settings import get_settings

settings = get_settings()


def on_port(port):
    return settings.model_copy(update={"worker": settings.worker.model_copy(update={"metrics_port": port})})


sys.exit(run_workers([cpu_worker(on_port(int(port)), "INFO", f"storm{n}") for n, port in enumerate(sys.argv[1:])]))
"""


def worker_storm(
    settings: Settings, client: httpx.Client, log_path: Path, rng: random.Random, phase: str, signals: int
) -> int:
    """A pool of two real workers on the suite's Redis and S3, stopped by a storm of up to
    ``signals`` beginning in ``phase``; the jobs it was kept busy with are canceled after. How many
    signals it got."""
    ports = free_ports(2)
    env = {**clean_env(), **settings_env(settings)}
    with log_path.open("w") as log:
        argv = [sys.executable, "-c", WORKER_POOL, *map(str, ports)]
        process = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    jobs: list[str] = []
    try:
        with watched(process) as seen:
            if phase != "starting":
                ready = [f"http://127.0.0.1:{port}/readyz" for port in ports]
                wait_until(lambda: all(httpx.get(url, timeout=2).status_code == 200 for url in ready), 180, "the pool")
            if phase == "busy":
                jobs = keep_busy(client)
            sent = storm(process, rng, signals, 10.0 if phase == "starting" else 2.0)
            stops_cleanly(process, seen, 120)
    finally:
        for job in jobs:
            client.delete(f"/v1/jobs/{job}")
    return sent


def storms(run: Callable[[int, str, int], int], per_storm: int) -> dict[str, Any]:
    """Storms of up to ``per_storm`` signals, through the phases in turn, until ``SIGNALS`` were sent."""
    sent: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    while sum(sent.values()) < SIGNALS:
        phase = PHASES[sum(runs.values()) % len(PHASES)]
        sent[phase] += run(sum(runs.values()), phase, min(per_storm, SIGNALS - sum(sent.values())))
        runs[phase] += 1
    return {"signals": dict(sent), "stops": dict(runs), "clean_stops": sum(runs.values())}


@pytest.mark.faults
@pytest.mark.timeout(5400)
def test_200_signals_to_ttsq_dev_at_random_moments_each_stop_it_cleanly(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    figures = storms(lambda n, phase, count: dev_storm(tmp_path / f"dev{n}", rng, phase, count), 20)
    record_figures("stop storm: ttsq dev", {"seed": seed, **figures})


@pytest.mark.faults
@pytest.mark.timeout(3600)
def test_200_signals_to_a_worker_pool_at_random_moments_each_stop_it_cleanly(
    settings: Settings, client: httpx.Client, tmp_path: Path
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    figures = storms(
        lambda n, phase, count: worker_storm(settings, client, tmp_path / f"pool{n}.log", rng, phase, count), 10
    )
    record_figures("stop storm: ttsq worker", {"seed": seed, **figures})
