"""The fault stack (``bench/fault_stack.py``) with a second synthesis worker and a second service
worker, every process watched by ``cli.supervisor``'s supervisor, which starts again what dies, as
``ttsq dev`` does; and the faults that hit its parts by name: SIGKILL (the supervisor starts the
process again), SIGSTOP and SIGCONT. The chaos soak (``bench/soak``) and the fault classes
(``tests/test_fault_classes.py``) drive their faults through here, so a death they caused is told
apart from one they did not."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.fault_stack import FaultStack, fault_stack
from cli.processes import ManagedProcess
from cli.supervisor import Supervisor

SYNTHESIS_WORKERS: Final = ("worker1", "worker2")
"""The synthesis workers' target names (the fault stack's own worker is ``worker1``)."""


@dataclass
class SupervisedStack:
    stack: FaultStack
    label: str = "stack"
    """What the supervisor's lines begin with."""
    supervisor: Supervisor = field(init=False)
    """Watches every process of the stack; :meth:`poll` lets it start again the dead."""
    lines: list[str] = field(default_factory=list)
    """The supervisor's restart lines, as printed."""
    unasked_deaths: list[str] = field(default_factory=list)
    """Restart lines of processes that no :meth:`kill` asked for."""
    _asked: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor(self.label, echo=self._echo)
        for process in self.processes.values():
            self.supervisor.watch(process)

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        """Fault target name → its process: ``worker1``, ``worker2``, ``service``, ``service2``,
        ``beat``, ``api``, ``redis``, ``seaweedfs``."""
        named = {"worker1" if name == "worker" else name: p for name, p in self.stack.processes.items()}
        return {**named, "redis": self.stack.redis_server.process, "seaweedfs": self.stack.s3.process}

    def kill(self, target: str) -> int:
        """SIGKILL ``target``; returns its pid (the supervisor starts it again from :meth:`poll`)."""
        process = self.processes[target]
        self._asked[process.name] += 1
        pid = process.pid
        process.kill(signal.SIGKILL)
        return pid

    def freeze(self, target: str) -> None:
        self.processes[target].kill(signal.SIGSTOP)

    def thaw(self, target: str) -> None:
        self.processes[target].kill(signal.SIGCONT)

    def restarted(self, target: str, killed_pid: int) -> bool:
        """Whether the process killed as ``killed_pid`` runs again as another process."""
        process = self.processes[target]
        return process.alive and process.pid != killed_pid

    def poll(self) -> None:
        """Start again what died (call from the main thread: children die with the thread that
        started them)."""
        self.supervisor.poll()

    def _echo(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)
        name = line.split()[1] if len(line.split()) > 1 else ""
        if self._asked[name] > 0:
            self._asked[name] -= 1
        else:
            self.unasked_deaths.append(line)

    def alive(self) -> dict[str, bool]:
        return {name: p.alive for name, p in self.processes.items()}


@contextmanager
def supervised_stack(root: Path, label: str = "stack", **overrides: Any) -> Iterator[SupervisedStack]:
    """Start everything under ``root`` with the given settings; afterwards resume whatever is frozen
    (a frozen process would take its whole stop grace to die) and stop every process. Two service
    workers, as two synthesis workers: one frozen or killed need not delay a webhook or a sweep."""
    with fault_stack(root, **overrides) as stack:
        stack.start_worker("worker2")
        stack.start_service_worker("service2")
        supervised = SupervisedStack(stack, label)
        try:
            yield supervised
        finally:
            for process in supervised.processes.values():
                process.kill(signal.SIGCONT)
