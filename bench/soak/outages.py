"""Recovery and latency net of outages (issue 35). A SIGSTOP of Redis, SeaweedFS or the API is an
outage of a part the stack has one of: while it lasts nothing can be done, and a canary or a job
waits for it whoever is healthy. What the pool is judged on is what comes after: a fault's
recovery counts from its end or from the end of the outages still on then, whichever is later,
and a job's latency leaves out the time its life spent inside an outage. Pure: tested in
``tests/test_soak.py``."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Final

from bench.soak.checks import Check

OUTAGE_TARGETS: Final = frozenset({"redis", "seaweedfs", "api"})
"""The parts the soak's stack has one of (production runs Sentinel, replicated storage and several
API replicas for these)."""
RECOVERY_BOUND_S: Final = 30.0
"""Issue 35: no fault's recovery over this long."""
RECOVERY_MEDIAN_BOUND_S: Final = 5.0
"""Issue 35: the median recovery at most this long."""
LATENCY_P99_BOUND_S: Final = 30.0
"""Issue 35: interactive p99 during faults at most this long."""

Window = tuple[float, float]


def clear_from(end: float, outages: Sequence[Window]) -> float:
    """When, from ``end`` on, no outage is on any more (outages that start after that do not count)."""
    clear = end
    moved = True
    while moved:
        moved = False
        for start, stop in outages:
            if start <= clear < stop:
                clear, moved = stop, True
    return clear


def recovery_after_outages(end: float, recovered: float, outages: Sequence[Window]) -> float:
    """Seconds from the fault's end, or from the end of the outages still on then, to its recovery."""
    return round(max(0.0, recovered - clear_from(end, outages)), 1)


def net_of_outages(at: float, took: float, outages: Sequence[Window]) -> float:
    """A job's latency less the time its life (``at`` to ``at + took``) spent inside outages."""
    inside = 0.0
    covered = at
    for start, stop in sorted(outages):
        start, stop = max(start, covered), min(stop, at + took)
        if stop > start:
            inside += stop - start
            covered = stop
    return max(0.0, took - inside)


def bound_checks(recoveries: Sequence[float | None], during_faults_p99_s: float | None) -> list[Check]:
    """Issue 35's bounds: ``recoveries`` after outages (``None``: never recovered)."""
    known = [r for r in recoveries if r is not None]
    worst = max(known, default=None)
    median = round(statistics.median(known), 1) if known else None
    return [
        Check(
            f"no recovery over {RECOVERY_BOUND_S:g} s",
            len(known) == len(recoveries) and (worst is None or worst <= RECOVERY_BOUND_S),
            f"longest {worst} s of {len(recoveries)} faults",
        ),
        Check(
            f"median recovery at most {RECOVERY_MEDIAN_BOUND_S:g} s",
            median is None or median <= RECOVERY_MEDIAN_BOUND_S,
            f"median {median} s",
        ),
        Check(
            f"interactive p99 during faults at most {LATENCY_P99_BOUND_S:g} s",
            during_faults_p99_s is None or during_faults_p99_s <= LATENCY_P99_BOUND_S,
            f"p99 {during_faults_p99_s} s, net of outages",
        ),
    ]
