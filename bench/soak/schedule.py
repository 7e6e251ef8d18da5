"""The soak's faults, drawn in advance from a seed: the same seed gives the same faults at the same
moments, so a run that found something can be repeated. Pure: no process is touched here."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from bench.supervised_stack import SYNTHESIS_WORKERS


class FaultKind(StrEnum):
    KILL = "kill"
    """SIGKILL; the driver starts the process again at once, as a supervisor would."""
    STOP = "stop"
    """SIGSTOP for the fault's duration, then SIGCONT."""
    DROP = "drop"
    """A webhook receiver closed (connections refused) for the fault's duration, then opened again."""


RECEIVERS: Final = ("receiver1", "receiver2")
TARGET_GROUPS: Final = (
    SYNTHESIS_WORKERS,
    ("service",),
    ("beat",),
    ("api",),
    ("redis",),
    ("seaweedfs",),
    RECEIVERS,
)
"""What a fault may hit, one group drawn with equal chance, then one member of it: a synthesis
worker, the service worker, beat, the API, Redis, SeaweedFS, or a webhook receiver."""

DEFAULT_EVERY_S: Final = (45.0, 90.0)
"""Time between the starts of two faults, drawn uniformly (issue 25)."""
DEFAULT_PAUSE_S: Final = (30.0, 180.0)
"""How long a SIGSTOP or a dropped receiver lasts, drawn uniformly (issue 25)."""


@dataclass(frozen=True)
class Fault:
    at_s: float
    """Seconds after the load started."""
    target: str
    kind: FaultKind
    duration_s: float
    """0 for a kill: the process is started again as soon as its death is seen."""

    @property
    def ends_s(self) -> float:
        return self.at_s + self.duration_s


def parse_range(text: str) -> tuple[float, float]:
    """``"45-90"`` → (45.0, 90.0); a bad range names itself."""
    low, sep, high = text.partition("-")
    try:
        bounds = (float(low), float(high))
    except ValueError:
        raise ValueError(f"a range is two numbers of seconds like 45-90, not {text!r}") from None
    if not sep or not 0 < bounds[0] <= bounds[1]:
        raise ValueError(f"a range is two positive numbers of seconds, the lower first, like 45-90, not {text!r}")
    return bounds


def fault_schedule(
    seed: int,
    duration_s: float,
    every_s: tuple[float, float] = DEFAULT_EVERY_S,
    pause_s: tuple[float, float] = DEFAULT_PAUSE_S,
) -> list[Fault]:
    """The faults of a run of ``duration_s`` seconds, each starting ``every_s`` after the one before
    (the first ``every_s`` after the start), none after the end. A target already frozen or dropped
    is not drawn again until its fault ends: faults overlap, but never on one target."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = rng.uniform(*every_s)
    while at < duration_s:
        busy = {f.target for f in faults if f.at_s <= at < f.ends_s}
        groups = [[t for t in group if t not in busy] for group in TARGET_GROUPS]
        target = rng.choice(rng.choice([g for g in groups if g]))
        kind = FaultKind.DROP if target in RECEIVERS else rng.choice([FaultKind.KILL, FaultKind.STOP])
        duration = 0.0 if kind is FaultKind.KILL else round(rng.uniform(*pause_s), 1)
        faults.append(Fault(round(at, 1), target, kind, duration))
        at += rng.uniform(*every_s)
    return faults
