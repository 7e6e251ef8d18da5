"""The soak's report: one JSON file with everything measured, and the table printed at the end
(jobs by kind and outcome, faults with their recovery, interactive latency during and between
faults, a PASS or FAIL per check)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.soak.checks import Check
from bench.soak.outages import OUTAGE_TARGETS, recovery_after_outages
from bench.soak.schedule import Fault, FaultKind


@dataclass
class FaultRun:
    """One fault as it happened (wall clock, seconds since the epoch)."""

    fault: Fault
    started: float
    ended: float | None = None
    """When the process was running again, or continued, or the receiver was back."""
    recovered: float | None = None
    """When a canary job submitted after the end was seen succeeded."""
    killed_pid: int | None = None

    @property
    def name(self) -> str:
        return f"{self.fault.kind.value} {self.fault.target} at {self.fault.at_s:.0f}s"

    @property
    def recovery_s(self) -> float | None:
        if self.ended is None or self.recovered is None:
            return None
        return round(self.recovered - self.ended, 1)

    def outage(self) -> tuple[float, float] | None:
        """From its start to its end, if it stops a part the stack has one of (``bench.soak.outages``)."""
        if self.fault.kind is not FaultKind.STOP or self.fault.target not in OUTAGE_TARGETS:
            return None
        return (self.started, self.ended or float("inf"))

    def window(self) -> tuple[float, float]:
        """From the fault's start until its recovery (or its end, or now if neither came)."""
        return (self.started, self.recovered or self.ended or float("inf"))

    def figures(self, origin: float, runs: Sequence[FaultRun]) -> dict[str, Any]:
        """``runs``: every fault of the run, to name those still on when this one ended (its
        recovery waits for them too), and to measure its recovery after the outages among them."""
        end = self.ended or float("inf")
        beside = [r.name for r in runs if r is not self and r.started <= end <= (r.ended or float("inf"))]
        outages = [w for r in runs if r is not self and (w := r.outage()) is not None]
        after = None
        if self.ended is not None and self.recovered is not None:
            after = recovery_after_outages(self.ended, self.recovered, outages)
        return {
            **asdict(self.fault),
            "started_s": round(self.started - origin, 1),
            "ended_s": None if self.ended is None else round(self.ended - origin, 1),
            "down_s": None if self.ended is None else round(self.ended - self.started, 1),
            "recovery_s": self.recovery_s,
            "recovery_after_outages_s": after,
            "other_faults_on_at_its_end": beside,
        }


def write_json(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")


def _rows(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def table(result: dict[str, Any], checks: Sequence[Check]) -> str:
    jobs = result["jobs_by_kind"]
    statuses = sorted({status for counts in jobs.values() for status in counts})
    job_rows = [[kind, *(counts.get(s, 0) for s in statuses), sum(counts.values())] for kind, counts in jobs.items()]
    faults = result["faults"]
    fault_rows = [
        [
            f["started_s"],
            f["kind"],
            f["target"],
            f["duration_s"] or "",
            f["down_s"],
            f["recovery_s"],
            f.get("recovery_after_outages_s"),
            ", ".join(f["other_faults_on_at_its_end"]),
        ]
        for f in faults
    ]
    latency_rows = [
        [f"{name}{suffix}", v["jobs"], _s(v["p50_s"]), _s(v["p99_s"])]
        for key, suffix in (("interactive_latency", ""), ("interactive_latency_net_of_outages", ", net of outages"))
        for name, v in result.get(key, {}).items()
    ]
    check_rows = [["PASS" if c.passed else "FAIL", c.name, c.detail] for c in checks]
    verdict = "PASS" if all(c.passed for c in checks) else "FAIL"
    return "\n\n".join(
        [
            f"soak seed {result['seed']}: {result['minutes']} min of load, {len(faults)} faults, {verdict}",
            _rows(["kind", *statuses, "total"], job_rows),
            _rows(
                [
                    "at s",
                    "fault",
                    "target",
                    "planned s",
                    "down s",
                    "recovery s",
                    "after outages s",
                    "other faults on at its end",
                ],
                fault_rows,
            ),
            _rows(["interactive", "jobs", "p50 s", "p99 s"], latency_rows),
            _rows(["", "check", "detail"], check_rows),
        ]
    )


def _s(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"
