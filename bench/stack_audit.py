"""What a ttsq stack holds after a run, read straight from Redis and S3: every job record, the
records of given jobs once they are terminal, what became of them (lost, stuck, by status), the
objects stored per job and the parts left under ``tmp/``. The fault suite and the chaos soak judge
a run by these."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis

from ttsq.constants import KEY_PREFIX, WORKER_CHECK_KEY_TEMPLATE
from ttsq.job_record import JobRecord, JobStatus
from ttsq.job_store import JobStore
from ttsq.maintenance import TMP_PREFIX
from ttsq.storage import ObjectStore
from ttsq.tenants import ANONYMOUS_TENANT

JOBS_PREFIX: Final = f"{ANONYMOUS_TENANT}/jobs/"
"""Where the anonymous tenant's audio lands: ``anonymous/jobs/<id>/<attempt>/audio.<ext>``."""

_JOB_KEY = re.compile(rf"^{KEY_PREFIX}:job:([0-9a-f-]{{36}})$")


def job_ids_in_redis(client: redis.Redis) -> set[str]:
    """Every job that has a record, whoever created it."""
    found: set[str] = set()
    for key in client.scan_iter(match=f"{KEY_PREFIX}:job:*", count=1000):
        matched = _JOB_KEY.match(key.decode())
        if matched:
            found.add(matched.group(1))
    return found


def records(jobs: JobStore, ids: Sequence[str]) -> dict[str, JobRecord | None]:
    found: dict[str, JobRecord | None] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        found.update(zip(chunk, jobs.many(chunk), strict=True))
    return found


def wait_terminal(jobs: JobStore, ids: Sequence[str], timeout_s: float) -> dict[str, JobRecord | None]:
    """Poll the records until every job is terminal (or has no record) or ``timeout_s`` passes;
    returns the last reading either way, for the test to judge."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = records(jobs, ids)
        except redis.RedisError:  # Redis restarting: read again, unless time is up
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
            continue
        if all(r is None or r.status.terminal for r in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(1)


@dataclass(frozen=True)
class Outcome:
    """What became of a set of accepted jobs."""

    lost: list[str]
    """Accepted, but no record exists."""
    stuck: dict[str, str]
    """Not terminal: id → status."""
    by_status: dict[str, int]
    failed_codes: dict[str, int]
    requeued: int
    """Jobs the sweeper found without work and queued again."""
    object_counts: dict[str, int]
    """Succeeded job id → objects under its prefix; should be 1 each."""

    @property
    def wrong_objects(self) -> dict[str, int]:
        return {job_id: n for job_id, n in self.object_counts.items() if n != 1}

    def figures(self) -> dict[str, Any]:
        return {
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "by_status": self.by_status,
            "failed_codes": self.failed_codes,
            "requeued_by_sweeper": self.requeued,
            "succeeded_without_exactly_one_object": len(self.wrong_objects),
        }


def objects_per_job(objects: ObjectStore) -> Counter[str]:
    return Counter(key.split("/")[2] for key in objects.list_keys(JOBS_PREFIX))


def outcome(found: dict[str, JobRecord | None], objects: ObjectStore) -> Outcome:
    present = {job_id: r for job_id, r in found.items() if r is not None}
    stored = objects_per_job(objects)
    succeeded = [job_id for job_id, r in present.items() if r.status is JobStatus.SUCCEEDED]
    return Outcome(
        lost=sorted(job_id for job_id, r in found.items() if r is None),
        stuck={job_id: r.status.value for job_id, r in present.items() if not r.status.terminal},
        by_status=dict(Counter(r.status.value for r in present.values())),
        failed_codes=dict(Counter(r.error.code for r in present.values() if r.error is not None)),
        requeued=sum(1 for r in present.values() if r.requeues > 0),
        object_counts={job_id: stored.get(job_id, 0) for job_id in succeeded},
    )


def tmp_parts(objects: ObjectStore) -> list[str]:
    """Jobs' temporary parts left under ``tmp/`` (not the workers' check objects, which each worker
    writes again at every check)."""
    checks = WORKER_CHECK_KEY_TEMPLATE.split("{", 1)[0]
    return [key for key in objects.list_keys(TMP_PREFIX) if not key.startswith(checks)]
