"""``scaleout`` section: several "hosts" on this machine, one Redis and one S3.

Each host is a one-thread worker with its own node name and its own data directory (``TMPDIR``, where
assembly spools), started and stopped while a long bulk job and a stream of short interactive jobs
run: a third host joins, one leaves with SIGTERM (warm shutdown) and one dies with SIGKILL. The
figures: how the work spread over the hosts (from each host's log), that every job succeeded with one
object, how many segment tasks ran twice, and how long the crash cost. Workers here use a visibility
timeout of ``VISIBILITY_S`` (the default is 120 s; live workers renew what they hold, see
docs/RELIABILITY.md).
"""

from __future__ import annotations

import re
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench import corpus
from bench.stack import BenchStack, Submitted
from cli.processes import ManagedProcess, wait_until
from cli.workerpool import start_local_worker
from ttsq.constants import ASSEMBLE_TASK, SEGMENT_TASK, SYNTHESIZE_TASK
from ttsq.settings import Settings

VISIBILITY_S: Final = 60
"""Redelivery of a dead worker's messages after this long (task time limit below it)."""
SHORT_EVERY_S: Final = 1.0
_SUCCEEDED = re.compile(r"Task (ttsq\.\w+)\[([0-9a-f-]+)\] succeeded")


@dataclass
class Host:
    name: str
    process: ManagedProcess
    log: Path
    events: list[str] = field(default_factory=list)


def start_host(stack: BenchStack, settings: Settings, name: str) -> Host:
    """A worker as a separate host would run it: own node name, own data directory, own metrics port."""
    data = stack.root / "hosts" / name
    (data / "tmp").mkdir(parents=True, exist_ok=True)
    log = data / "worker.log"
    process = start_local_worker(settings, name, log, extra_env={"TMPDIR": str(data / "tmp")})
    return Host(name, process, log)


def _short_stream(stack: BenchStack, stop: threading.Event, out: list[Submitted]) -> None:
    texts = corpus.short_messages()
    n = 0
    while not stop.wait(SHORT_EVERY_S):
        out.append(stack.submit(texts[n % len(texts)]))
        n += 1


def _tasks_by_host(hosts: list[Host]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for host in hosts:
        found = _SUCCEEDED.findall(host.log.read_text())
        names = [task for task, _ in found]
        counts[host.name] = {
            "segments": names.count(SEGMENT_TASK),
            "entries": names.count(SYNTHESIZE_TASK),
            "assemblies": names.count(ASSEMBLE_TASK),
        }
    return counts


def _segment_runs(hosts: list[Host]) -> list[str]:
    return [tid for host in hosts for task, tid in _SUCCEEDED.findall(host.log.read_text()) if task == SEGMENT_TASK]


def scaleout(stack: BenchStack, quick: bool) -> dict[str, Any]:
    stack.stop_workers()
    settings = stack.settings(
        intra_op_threads=1,
        visibility_timeout_s=VISIBILITY_S,
        step_lease_s=VISIBILITY_S // 2,
        task_retry_backoff_max_s=VISIBILITY_S // 2,
    )
    started = time.monotonic()
    timeline: list[tuple[float, str]] = []

    def mark(event: str) -> None:
        timeline.append((round(time.monotonic() - started, 1), event))

    hosts = [start_host(stack, settings, "host-a"), start_host(stack, settings, "host-b")]
    mark("host-a and host-b up")
    text = corpus.narration()[:4000] if quick else corpus.narration()
    submitted = time.monotonic()
    long_job = stack.submit(text, priority="bulk")
    shorts: list[Submitted] = []
    stop = threading.Event()
    stream = threading.Thread(target=_short_stream, args=(stack, stop, shorts), daemon=True)
    stream.start()
    while (total := stack.jobs.get(long_job.job_id).progress.segments_total) is None:
        time.sleep(0.2)
    mark(f"long job planned: {total} segments")

    def at_share(share: float) -> None:
        while stack.segments_done(long_job.job_id) < share * total:
            time.sleep(0.2)

    try:
        at_share(0.1)
        hosts.append(start_host(stack, settings, "host-c"))
        mark(f"host-c joined at {stack.segments_done(long_job.job_id)}/{total}")
        at_share(0.4)
        hosts[0].process.kill(signal.SIGTERM)
        mark(f"host-a SIGTERM at {stack.segments_done(long_job.job_id)}/{total}")
        wait_until(lambda: not hosts[0].process.alive, 120, "host-a warm shutdown")
        mark(f"host-a gone (exit {hosts[0].process.returncode})")
        at_share(0.6)
        hosts[1].process.kill(signal.SIGKILL)
        killed_at = time.monotonic()
        mark(f"host-b SIGKILL at {stack.segments_done(long_job.job_id)}/{total}")
        (long_record,) = stack.wait_all([long_job], timeout_s=3600)
        long_done = time.monotonic()
        mark("long job succeeded")
    finally:
        stop.set()
        stream.join(10)
    short_records = stack.wait_all(shorts, timeout_s=600)
    mark(f"{len(short_records)} short jobs succeeded")
    for host in hosts:
        host.process.stop()

    objects = {
        record.id: len(stack.objects.list_keys(f"anonymous/jobs/{record.id}/"))
        for record in [long_record, *short_records]
    }
    runs = _segment_runs(hosts)
    latencies = [
        1000 * (r.finished_at.timestamp() - s.submitted_at)
        for s, r in zip(shorts, short_records, strict=True)
        if r.finished_at is not None
    ]
    return {
        "visibility_timeout_s": VISIBILITY_S,
        "threads_per_host": 1,
        "long_job": {
            "segments": total,
            "audio_s": long_record.result.duration_s if long_record.result else None,
            "wall_s": round(long_done - submitted, 1),
            "after_sigkill_s": round(long_done - killed_at, 1),
        },
        "short_jobs": {
            "count": len(short_records),
            "finished_ms_p50": statistics.median(latencies) if latencies else None,
            "finished_ms_max": max(latencies) if latencies else None,
        },
        "tasks_by_host": _tasks_by_host(hosts),
        "segment_task_runs": len(runs),
        "segment_tasks_run_twice": len(runs) - len(set(runs)),
        "jobs_with_one_object": sum(1 for n in objects.values() if n == 1),
        "jobs": len(objects),
        "timeline": timeline,
    }


def scaleout_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the scale-out section."""
    long, short = result["long_job"], result["short_jobs"]
    spread = ", ".join(f"{host} {counts['segments']}" for host, counts in result["tasks_by_host"].items())
    return [
        (
            f"scale-out: long job ({long['segments']} segments) with hosts joining, leaving, dying",
            f"{long['wall_s']:.0f} s wall; done {long['after_sigkill_s']:.0f} s after the SIGKILL "
            f"(visibility timeout {result['visibility_timeout_s']} s)",
        ),
        ("scale-out: segment tasks per host", spread),
        (
            "scale-out: jobs with exactly one object / jobs; segment tasks run twice",
            f"{result['jobs_with_one_object']} / {result['jobs']}; {result['segment_tasks_run_twice']}",
        ),
        (
            f"scale-out: {short['count']} short jobs at 1/s meanwhile, finished p50 / max",
            f"{short['finished_ms_p50']:.0f} / {short['finished_ms_max']:.0f} ms",
        ),
    ]
