"""The soak's stack: the supervised stack (``bench/supervised_stack.py``: the fault stack with a
second synthesis worker, every process started again when it dies, as ``ttsq dev`` does) and two
webhook receivers. The driver's faults go through here, so a death it caused is told apart from one
it did not."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import SecretStr

from bench.fault_stack import FaultStack
from bench.soak.receivers import SoakReceiver
from bench.soak.schedule import RECEIVERS, Fault, FaultKind
from bench.supervised_stack import SupervisedStack, supervised_stack
from ttsq.webhook_signing import parse_secrets

SOAK_WEBHOOK_RETRY_SCHEDULE_S: Final = [2.0, 5.0, 10.0, 20.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 60.0]
"""Waits between webhook attempts in the soak: about 6 minutes in all, past the longest dropped
receiver (180 s) and a frozen service worker, so every event can arrive within the drain (the
production schedule waits 10 minutes before its fifth attempt)."""


@dataclass
class SoakStack:
    supervised: SupervisedStack
    receivers: dict[str, SoakReceiver] = field(default_factory=dict)

    @property
    def stack(self) -> FaultStack:
        return self.supervised.stack

    def begin(self, fault: Fault) -> int | None:
        """Start ``fault``; returns the pid it killed (its process is started again by :meth:`poll`)."""
        if fault.kind is FaultKind.DROP:
            self.receivers[fault.target].drop()
            return None
        if fault.kind is FaultKind.KILL:
            return self.supervised.kill(fault.target)
        self.supervised.freeze(fault.target)
        return None

    def end(self, fault: Fault) -> None:
        """End a stop or a drop (a kill ends when its process is started again)."""
        if fault.kind is FaultKind.DROP:
            self.receivers[fault.target].start()
        elif fault.kind is FaultKind.STOP:
            self.supervised.thaw(fault.target)

    def restarted(self, fault: Fault, killed_pid: int | None) -> bool:
        return killed_pid is not None and self.supervised.restarted(fault.target, killed_pid)

    def poll(self) -> None:
        """Start again what died (from the main thread)."""
        self.supervised.poll()

    @property
    def lines(self) -> list[str]:
        return self.supervised.lines

    @property
    def unasked_deaths(self) -> list[str]:
        return self.supervised.unasked_deaths

    def alive(self) -> dict[str, bool]:
        return {**self.supervised.alive(), **{name: r.up for name, r in self.receivers.items()}}


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
        with supervised_stack(root, label="soak", **settings) as supervised:
            yield SoakStack(supervised, receivers)
    finally:
        for receiver in receivers.values():
            receiver.drop()
