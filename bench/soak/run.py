"""``make soak``: start the stack, send the load, drive the faults, drain, reckon, report.

``python -m bench.soak --minutes 30 --seed 1234``; ``--fault-every 20-40`` for short trials of the
soak itself. Exit status 1 when any check fails; the JSON goes to ``bench/results/soak-<seed>.json``
and the processes' logs stay in the folder printed at the start."""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx

from bench.machine import describe
from bench.soak.checks import Check, by_kind_and_status, latency_split, recovery_check
from bench.soak.load import Load, LoadPlan
from bench.soak.outages import bound_checks, net_of_outages
from bench.soak.reckoning import Holdings, read_holdings, reckon
from bench.soak.report import FaultRun, table, write_json
from bench.soak.schedule import DEFAULT_EVERY_S, DEFAULT_PAUSE_S, Fault, FaultKind, fault_schedule, parse_range
from bench.soak.stack import SoakStack, soak_stack
from ttsq.job_record import JobStatus

RESULTS_DIR: Final = Path(__file__).resolve().parents[1] / "results"
SUBMIT_GRACE_S: Final = 600.0
"""How long after the load ends a submit still retries (one sent during the last outage)."""
CANARY_TIMEOUT_S: Final = 600.0
"""How long after a fault ends its canaries may take to succeed before it counts as not recovered."""
POLL_S: Final = 0.2
DRAIN_READ_S: Final = 5.0
"""How often the drain reads Redis."""
DRAIN_PRINT_S: Final = 30.0
"""How often the drain says what it waits for."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of load and faults (30)")
    parser.add_argument("--seed", type=int, default=None, help="the faults' and texts' seed (random if omitted)")
    parser.add_argument(
        "--fault-every", type=parse_range, default=DEFAULT_EVERY_S, help="seconds between faults (45-90)"
    )
    parser.add_argument("--fault-pause", type=parse_range, default=DEFAULT_PAUSE_S, help="SIGSTOP and drop (30-180)")
    parser.add_argument("--drain-timeout", type=float, default=900.0, help="seconds to wait for the drain (900)")
    parser.add_argument("--out", type=Path, default=None, help="the JSON report (bench/results/soak-<seed>.json)")
    parser.add_argument("--keep", action="store_true", help="keep the stack's folder (logs, data) even on PASS")
    return parser.parse_args(argv)


class Driver:
    """Runs the faults of the schedule against the stack while the load runs, in the main thread
    (the supervisor starts the killed processes again from here)."""

    def __init__(self, soak: SoakStack, load: Load, schedule: list[Fault], origin: float) -> None:
        self.soak = soak
        self.origin = origin
        """When the load started (monotonic): the schedule's zero."""
        self.load = load
        self.pending = list(schedule)
        self.runs: list[FaultRun] = []
        self._active: list[FaultRun] = []
        self._canaries: list[threading.Thread] = []

    def step(self) -> None:
        """One turn: start the deaths' restarts, begin what is due, end what is over."""
        self.soak.poll()
        now, origin = time.monotonic(), self.origin
        while self.pending and origin + self.pending[0].at_s <= now:
            fault = self.pending.pop(0)
            run = FaultRun(fault, time.time())
            run.killed_pid = self.soak.begin(fault)
            print(f"soak: {run.name}: begun", flush=True)
            self.runs.append(run)
            self._active.append(run)
        for run in list(self._active):
            if run.fault.kind is FaultKind.KILL:
                over = self.soak.restarted(run.fault, run.killed_pid)
            else:
                over = now >= origin + run.fault.ends_s
                if over:
                    self.soak.end(run.fault)
            if over:
                run.ended = time.time()
                self._active.remove(run)
                print(f"soak: {run.name}: over after {run.ended - run.started:.1f} s", flush=True)
                self._follow(run)

    def _follow(self, run: FaultRun) -> None:
        receiver = self.soak.receivers.get(run.fault.target)

        def canary() -> None:
            run.recovered = self.load.canary(run.name, time.monotonic() + CANARY_TIMEOUT_S, receiver)
            print(f"soak: {run.name}: recovered in {run.recovery_s} s", flush=True)

        thread = threading.Thread(target=canary, name=f"canary {run.name}", daemon=True)
        thread.start()
        self._canaries.append(thread)

    def done(self) -> bool:
        return not self.pending and not self._active

    def canaries_done(self) -> bool:
        return not any(thread.is_alive() for thread in self._canaries)


def drain(
    driver: Driver, soak: SoakStack, batch_ids: Callable[[], list[str]], deadline: float
) -> tuple[Holdings, float]:
    """Supervise while the load's last requests and canaries end and everything settles; returns
    the last reading and when it was taken (monotonic)."""
    next_read = next_print = 0.0
    while True:
        driver.step()
        now = time.monotonic()
        if now >= next_read:
            next_read = now + DRAIN_READ_S
            try:
                holdings = read_holdings(soak.stack.stores, batch_ids())
            except Exception as e:  # Redis restarting after a late fault: read again
                if now >= deadline:
                    raise RuntimeError(f"the stack could not be read at the end of the drain: {e}") from e
                print(f"soak: drain read failed ({type(e).__name__}); again", flush=True)
            else:
                waiting = holdings.unsettled()
                settled = not waiting and driver.load.busy() == 0 and driver.canaries_done()
                if settled or now >= deadline:
                    return holdings, now
                if now >= next_print:
                    next_print = now + DRAIN_PRINT_S
                    shown = f" ({'; '.join(waiting[:3])})" if 0 < len(waiting) <= 3 else ""
                    print(
                        f"soak: draining: {len(waiting)} unsettled{shown}, {driver.load.busy()} requests open",
                        flush=True,
                    )
        time.sleep(POLL_S)


def japanese_voice(api_url: str) -> str | None:
    voices = httpx.get(f"{api_url}/v1/voices", timeout=30).json()["voices"]
    return next((v["id"] for v in voices if v["language"].startswith("ja")), None)


def run_soak(args: argparse.Namespace, seed: int, root: Path) -> tuple[dict[str, Any], list[Check]]:
    duration_s = args.minutes * 60
    schedule = fault_schedule(seed, duration_s, args.fault_every, args.fault_pause)
    print(f"soak: seed {seed}, {args.minutes} min, {len(schedule)} faults; logs in {root}", flush=True)
    with soak_stack(root) as soak:
        receivers = {name: r.url for name, r in soak.receivers.items()}
        load = Load(soak.stack.api_url, receivers, seed, japanese_voice(soak.stack.api_url), LoadPlan())
        origin, wall_origin = time.monotonic(), time.time()
        driver = Driver(soak, load, schedule, origin)
        load.start(duration_s, origin + duration_s + SUBMIT_GRACE_S, origin + duration_s + args.drain_timeout)
        while not (driver.done() and time.monotonic() >= origin + duration_s):
            driver.step()
            time.sleep(POLL_S)
        load.stop()
        load_end = time.monotonic()
        print("soak: load and faults over; draining", flush=True)

        def batch_ids() -> list[str]:
            return [r.job_id for r in load.requests if r.kind == "batch" and r.job_id]

        holdings, drained_at = drain(driver, soak, batch_ids, load_end + args.drain_timeout)
        deliveries = [d for r in soak.receivers.values() for d in r.received()]
        reckoning = reckon(load.requests, holdings, soak.stack.objects(), deliveries, soak.alive(), soak.unasked_deaths)
    latencies = [
        (r.submitted_at, record.finished_at.timestamp() - r.submitted_at)
        for r in load.requests
        if r.kind == "interactive" and r.job_id in holdings.jobs
        for record in [holdings.jobs[r.job_id]]
        if record.status is JobStatus.SUCCEEDED and record.finished_at is not None
    ]
    windows = [run.window() for run in driver.runs]
    outages = [w for run in driver.runs if (w := run.outage()) is not None]
    net_latency = latency_split([(at, net_of_outages(at, took, outages)) for at, took in latencies], windows)
    faults = [run.figures(wall_origin, driver.runs) for run in driver.runs]
    checks = [
        *reckoning.checks,
        recovery_check({run.name: run.recovery_s for run in driver.runs}),
        *bound_checks([f["recovery_after_outages_s"] for f in faults], net_latency["during_faults"]["p99_s"]),
    ]
    result = {
        "seed": seed,
        "minutes": args.minutes,
        "fault_every_s": list(args.fault_every),
        "fault_pause_s": list(args.fault_pause),
        "started_at": datetime.fromtimestamp(wall_origin, UTC).isoformat(),
        "drain_s": round(drained_at - load_end, 1),
        "machine": describe(),
        "jobs_by_kind": by_kind_and_status(reckoning.accepted, reckoning.statuses),
        "answers_by_kind": _answers(load),
        "faults": faults,
        "interactive_latency": latency_split(latencies, windows),
        "interactive_latency_net_of_outages": net_latency,
        "supervisor_lines": soak.lines,
        "unasked_deaths": soak.unasked_deaths,
        **reckoning.figures,
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in checks],
        "passed": all(c.passed for c in checks),
        "logs": str(root),
    }
    return result, checks


def _answers(load: Load) -> dict[str, dict[str, int]]:
    """Kind → answer → requests, and how many were sent more than once."""
    found: dict[str, dict[str, int]] = {}
    for r in load.requests:
        kind = found.setdefault(r.kind if r.kind != "hostile" else f"hostile: {r.label}", {})
        kind[r.answer or "unanswered"] = kind.get(r.answer or "unanswered", 0) + 1
        if r.attempts > 1:
            kind["sent again"] = kind.get("sent again", 0) + 1
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    root = Path(tempfile.mkdtemp(prefix=f"ttsq-soak-{seed}-"))
    result, checks = run_soak(args, seed, root)
    out = args.out or RESULTS_DIR / f"soak-{seed}.json"
    write_json(out, result)
    print("\n" + table(result, checks) + f"\n\nreport: {out}", flush=True)
    passed = all(check.passed for check in checks)
    if passed and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if passed else 1
