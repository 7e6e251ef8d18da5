"""Children that come back: a supervisor that starts again each child process that dies.

``ttsq dev`` (Redis, SeaweedFS, the workers, beat, the API, Flower) and ``ttsq worker --gpus`` run
one. A child that dies is started again with the same command line (so Redis and SeaweedFS come back
on the same port and data folder) after a wait that doubles while it keeps dying (0.5 s, 1 s, 2 s…
up to 10 s: a child that dies at once on every start is retried every 10 s, never in a busy loop),
and starts over from 0.5 s once the child has stayed up 30 s. Each restart prints one line naming
the child, how it ended (its exit code or the signal that killed it) and the wait.

The supervisor is polled, not threaded: one loop, in the main thread, notices deaths and starts what
is due, so a stop (Ctrl-C, SIGTERM) never races a restart. Once :meth:`Supervisor.stop` begins,
nothing is started again, a child waiting out its backoff included, and every child is stopped.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from cli.processes import ManagedProcess

FIRST_DELAY_S: Final = 0.5
"""Wait before a child that died is started again, the first time in a row."""

MAX_DELAY_S: Final = 10.0
"""Longest wait between two starts of a child that keeps dying."""

STEADY_S: Final = 30.0
"""A child up this long counts as healthy: if it dies after that, its next wait is ``FIRST_DELAY_S``."""

POLL_S: Final = 0.2
"""How often the loop looks at its children: a death is noticed within this."""

STARTUP_FAILURES: Final = 5
"""Deaths in a row of one child, while a stack is still starting, that make the start give up (a
child that cannot start at all, such as an API that fails to import, says so after about 15 s
instead of retrying for ever; a child killed once or twice meanwhile is only started again)."""


@dataclass(frozen=True)
class Backoff:
    """The waits between starts of a child that keeps dying."""

    first_s: float = FIRST_DELAY_S
    max_s: float = MAX_DELAY_S
    steady_s: float = STEADY_S

    def delay(self, failures: int) -> float:
        """The wait before the start that follows the ``failures``-th death in a row (from 1)."""
        return float(min(self.max_s, self.first_s * 2 ** (failures - 1)))


def exit_status(returncode: int | None) -> str:
    """How a process ended, as a person reads it: ``exited with code 1``, ``killed by SIGKILL``."""
    if returncode is None:
        return "still running"
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"killed by {name}"


class StopRequest(Protocol):
    """What tells the loop to stop: ``tts_core.base.stop_signal.SignalEvent`` where a signal sets it (its
    handler takes no lock), or a ``threading.Event``."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class ChildFailing(RuntimeError):
    """A child died ``STARTUP_FAILURES`` times in a row while its stack was starting."""


@dataclass
class _Child:
    process: ManagedProcess
    stage: int
    """Children of one stage stop together; stages stop from the highest down (:meth:`Supervisor.stop`)."""
    started_at: float = 0.0
    failures: int = 0
    """Deaths in a row, each before the child had been up ``Backoff.steady_s``."""
    due: float | None = None
    """When the child is started again; ``None`` while it runs."""
    last_status: str = ""


class Supervisor:
    """Starts children, starts again each one that dies, stops them all; ``label`` prefixes its lines."""

    def __init__(self, label: str, backoff: Backoff | None = None, echo: Callable[[str], None] | None = None) -> None:
        self.label = label
        self.backoff = backoff or Backoff()
        self._echo = echo or (lambda line: print(line, flush=True))
        self._children: list[_Child] = []
        self._stopped = False

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every child, in the order they were added."""
        return [child.process for child in self._children]

    def add(self, process: ManagedProcess, stage: int | None = None) -> ManagedProcess:
        """Start ``process`` and watch it from now on; ``stage``: see :meth:`stop` (by default a stage
        of its own, after every child added before it)."""
        self._start(self._watch(process, stage))
        return process

    def watch(self, process: ManagedProcess, stage: int | None = None) -> ManagedProcess:
        """Watch ``process``, which its owner starts (a service that waits until it answers)."""
        self._watch(process, stage).started_at = time.monotonic()
        return process

    def _watch(self, process: ManagedProcess, stage: int | None) -> _Child:
        child = _Child(process, len(self._children) if stage is None else stage)
        self._children.append(child)
        return child

    def _start(self, child: _Child) -> None:
        child.process.start()
        child.started_at = time.monotonic()
        child.due = None

    def poll(self) -> None:
        """Notice the children that died (one line each) and start those whose wait is over."""
        if self._stopped:
            return
        now = time.monotonic()
        for child in self._children:
            if child.due is None and not child.process.alive:
                self._died(child, now)
            elif child.due is not None and now >= child.due:
                self._start(child)

    def _died(self, child: _Child, now: float) -> None:
        child.process.stop()  # reaps it, kills what is left of its process group, closes its log
        up_s = now - child.started_at
        child.failures = 1 if up_s >= self.backoff.steady_s else child.failures + 1
        delay = self.backoff.delay(child.failures)
        child.due = now + delay
        child.last_status = exit_status(child.process.returncode)
        in_a_row = f" ({child.failures} times in a row)" if child.failures > 1 else ""
        self._echo(
            f"{self.label}: {child.process.name} {child.last_status} after running {up_s:.1f} s{in_a_row}; "
            f"starting it again in {delay:.1f} s"
        )

    def run(self, stop: StopRequest) -> None:
        """Supervise until ``stop`` is set."""
        while not stop.wait(POLL_S):
            self.poll()

    def wait_until(self, check: Callable[[], bool], timeout_s: float, what: str, stop: StopRequest) -> bool:
        """Supervise while polling ``check`` until it is true; ``False`` if ``stop`` is set first.
        Raises ``TimeoutError`` after ``timeout_s``, and :class:`ChildFailing` once a child has died
        ``STARTUP_FAILURES`` times in a row meanwhile."""
        deadline = time.monotonic() + timeout_s
        while not stop.is_set():
            self.poll()
            failing = next((c for c in self._children if c.failures >= STARTUP_FAILURES), None)
            if failing is not None:
                log = f"; see {failing.process.log_path}" if failing.process.log_path else "; see its output above"
                raise ChildFailing(
                    f"{what}: {failing.process.name} {failing.last_status}, {failing.failures} times in a row{log}"
                )
            try:
                if check():
                    return True
            except Exception:  # not up yet: connection refused, timeouts, 5xx...
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s")
            stop.wait(POLL_S)
        return False

    def stop(self, together: bool = False) -> None:
        """Stop every child (TERM, then KILL what is left after its grace), stage by stage from the
        highest, so that a worker stops before the Redis it acknowledges to; none is started again.
        The children of a stage are signalled first, then each waited for: peers with no order among
        them (the front ends of a stack, its workers) stop in the time of the slowest, not the sum.
        ``together``: every child in one stage (a host's workers)."""
        self._stopped = True

        def stage_of(child: _Child) -> int:
            return 0 if together else child.stage

        for stage in sorted({stage_of(child) for child in self._children}, reverse=True):
            peers = [child for child in reversed(self._children) if stage_of(child) == stage]
            if len(peers) > 1:
                for child in peers:
                    if child.process.alive:
                        child.process.kill(signal.SIGTERM)
            for child in peers:
                child.process.stop()
