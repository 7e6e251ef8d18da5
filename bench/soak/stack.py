"""The soak's stack: the fault stack (``bench/fault_stack.py``) with a second synthesis worker and
two webhook receivers, every process watched by ``cli.supervisor``'s supervisor, which starts again
what dies, as ``ttsq dev`` does. The driver's faults go through here, so a death it caused is told
apart from one it did not."""

from __future__ import annotations

import base64
import secrets
import signal
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import SecretStr

from bench.fault_stack import FaultStack, fault_stack
from bench.soak.receivers import SoakReceiver
from bench.soak.schedule import RECEIVERS, Fault, FaultKind
from cli.processes import ManagedProcess
from cli.supervisor import Supervisor
from ttsq.webhook_signing import parse_secrets

SOAK_WEBHOOK_RETRY_SCHEDULE_S: Final = [2.0, 5.0, 10.0, 20.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 60.0]
"""Waits between webhook attempts in the soak: about 6 minutes in all, past the longest dropped
receiver (180 s) and a frozen service worker, so every event can arrive within the drain (the
production schedule waits 10 minutes before its fifth attempt)."""


@dataclass
class SoakStack:
    stack: FaultStack
    receivers: dict[str, SoakReceiver]
    supervisor: Supervisor = field(init=False)
    """Watches every process of the stack; :meth:`poll` lets it start again the dead."""
    lines: list[str] = field(default_factory=list)
    """The supervisor's restart lines, as printed."""
    unasked_deaths: list[str] = field(default_factory=list)
    """Restart lines of processes the driver had not killed."""
    _asked: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.supervisor = Supervisor("soak", echo=self._echo)
        for process in self.processes.values():
            self.supervisor.watch(process)

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        """Fault target name → its process."""
        named = {"worker1" if name == "worker" else name: p for name, p in self.stack.processes.items()}
        return {**named, "redis": self.stack.redis_server.process, "seaweedfs": self.stack.s3.process}

    def begin(self, fault: Fault) -> int | None:
        """Start ``fault``; returns the pid it killed (its process is started again by :meth:`poll`)."""
        if fault.kind is FaultKind.DROP:
            self.receivers[fault.target].drop()
            return None
        process = self.processes[fault.target]
        if fault.kind is FaultKind.KILL:
            self._asked[process.name] += 1
            pid = process.pid
            process.kill(signal.SIGKILL)
            return pid
        process.kill(signal.SIGSTOP)
        return None

    def end(self, fault: Fault) -> None:
        """End a stop or a drop (a kill ends when its process is started again)."""
        if fault.kind is FaultKind.DROP:
            self.receivers[fault.target].start()
        elif fault.kind is FaultKind.STOP:
            self.processes[fault.target].kill(signal.SIGCONT)

    def restarted(self, fault: Fault, killed_pid: int | None) -> bool:
        process = self.processes[fault.target]
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
        return {
            **{name: p.alive for name, p in self.processes.items()},
            **{name: r.up for name, r in self.receivers.items()},
        }


def webhook_secret() -> str:
    return f"whsec_{base64.b64encode(secrets.token_bytes(32)).decode()}"


@contextmanager
def soak_stack(root: Path, **overrides: Any) -> Iterator[SoakStack]:
    """Start everything under ``root``; stop every process and receiver afterwards."""
    secret = webhook_secret()
    settings: dict[str, Any] = {
        "webhook_secret": SecretStr(secret),
        "webhook_allow_private": True,
        "webhook_retry_schedule_s": SOAK_WEBHOOK_RETRY_SCHEDULE_S,
        **overrides,
    }
    keys = parse_secrets(secret)
    receivers = {name: SoakReceiver(name, keys) for name in RECEIVERS}
    try:
        with fault_stack(root, **settings) as stack:
            stack.start_worker("worker2")
            soak = SoakStack(stack, receivers)
            try:
                yield soak
            finally:  # a frozen process would take its whole stop grace to die
                for process in soak.processes.values():
                    process.kill(signal.SIGCONT)
    finally:
        for receiver in receivers.values():
            receiver.drop()
