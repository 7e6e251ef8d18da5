"""After the drain: what the stack holds, read from Redis, S3 and the receivers, turned into the
plain data the checks (``bench/soak/checks.py``) judge."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bench.audio_decoding import decode
from bench.soak.checks import (
    TERMINAL,
    BatchEnd,
    Check,
    Delivery,
    batch_checks,
    client_checks,
    job_checks,
    leftover_checks,
    object_checks,
    webhook_checks,
)
from bench.soak.client import Request
from bench.stack_audit import JOBS_PREFIX, job_ids_in_redis, objects_per_job, records, tmp_parts
from ttsq.job_record import JobRecord
from ttsq.storage import ObjectStore
from ttsq.stores import Stores
from ttsq.tenants import ANONYMOUS_TENANT

ANSWERED: Final = frozenset({"200", "202"})


@dataclass
class Holdings:
    """Every job record and batch in Redis, read at once."""

    jobs: dict[str, JobRecord]
    batches: dict[str, BatchEnd]
    batch_items: dict[str, list[str]]
    batch_webhooks: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Batch id → (its end event, its delivery state), for batches with a webhook."""

    def unsettled(self) -> list[str]:
        """What the drain still waits for: jobs not terminal, batches not finished, webhooks pending."""
        waiting = [f"job {i} {r.status.value}" for i, r in self.jobs.items() if r.status.value not in TERMINAL]
        waiting += [f"batch {i} {b.status}" for i, b in self.batches.items() if b.status == "running"]
        waiting += [
            f"webhook of {i}" for i, r in self.jobs.items() if r.webhook is not None and r.webhook.state == "pending"
        ]
        waiting += [f"webhook of batch {i}" for i, (_, state) in self.batch_webhooks.items() if state == "pending"]
        waiting += [
            f"webhook of {i} not yet queued"
            for i, r in self.jobs.items()
            if r.webhook_url and r.status.value in TERMINAL and r.webhook is None
        ]
        return waiting


def read_holdings(stores: Stores, batch_ids: Sequence[str]) -> Holdings:
    ids = sorted(job_ids_in_redis(stores.redis))
    jobs = {job_id: r for job_id, r in records(stores.jobs, ids).items() if r is not None}
    store = stores.batches
    batches: dict[str, BatchEnd] = {}
    items: dict[str, list[str]] = {}
    webhooks: dict[str, tuple[str, str | None]] = {}
    for batch_id in batch_ids:
        record = store.get(batch_id)
        counts = store.counts(batch_id)
        items[batch_id] = store.item_ids(batch_id, 0, record.total)
        batches[batch_id] = BatchEnd(record.status.value, record.total, counts.finished, 0)
        if record.webhook_url:
            state = None if record.webhook is None else record.webhook.state.value
            webhooks[batch_id] = (f"batch.{record.status.value}", state)
    return Holdings(jobs, batches, items, webhooks)


def accepted_jobs(requests: Sequence[Request], holdings: Holdings) -> dict[str, str]:
    """Job id → kind of every job a client was given: a 2xx's, a speech answer's header, a batch's
    items, and an id a 503 named that exists (accepted after all)."""
    accepted: dict[str, str] = {}
    for request in requests:
        if request.kind == "batch":
            for job_id in holdings.batch_items.get(request.job_id or "", []):
                accepted[job_id] = "batch"
            continue
        if request.job_id is not None and (request.answer in ANSWERED or request.kind == "speech"):
            accepted[request.job_id] = request.kind
        for job_id in request.named_by_503 - {request.job_id}:
            if job_id in holdings.jobs:
                accepted[job_id] = request.kind
    return accepted


def decoded_durations(objects: ObjectStore, jobs: dict[str, JobRecord]) -> dict[str, tuple[float, float | None]]:
    found: dict[str, tuple[float, float | None]] = {}
    for job_id, record in jobs.items():
        if record.result is None:
            continue
        data = objects.get(record.result.key)
        try:
            decoded = None if data is None else decode(data).duration_s
        except Exception:  # anything PyAV refuses is an object that does not decode
            decoded = None
        found[job_id] = (record.result.duration_s, decoded)
    return found


def manifests(objects: ObjectStore, batch_id: str) -> int:
    keys = objects.list_keys(f"{ANONYMOUS_TENANT}/batches/{batch_id}/")
    return sum(1 for key in keys if key.endswith("/manifest.json"))


def client_findings(requests: Sequence[Request]) -> tuple[list[str], list[str], dict[str, bool]]:
    """Unexpected answers, submits that gave up, and each watcher: whether it saw its job's end."""
    unexpected, gave_up = [], []
    for r in requests:
        if r.answer in {"gave up", ""}:
            gave_up.append(f"{r.kind} {r.label} {r.key}".strip())
        elif r.answer in ANSWERED or r.answer == "cut" or r.answer.startswith("504"):
            continue
        elif r.kind != "hostile" or not r.answer.startswith("4"):
            unexpected.append(f"{r.kind} {r.label}: {r.answer}".strip())
    watchers = {f"{r.kind} {r.watcher} {r.job_id}": r.saw is not None for r in requests if r.watcher and r.job_id}
    return unexpected, gave_up, watchers


@dataclass
class Reckoning:
    accepted: dict[str, str]
    statuses: dict[str, str | None]
    checks: list[Check]
    figures: dict[str, Any]


def reckon(
    requests: Sequence[Request],
    holdings: Holdings,
    objects: ObjectStore,
    deliveries: Sequence[Delivery],
    alive: dict[str, bool],
    unasked_deaths: Sequence[str],
) -> Reckoning:
    accepted = accepted_jobs(requests, holdings)
    every_job = {job_id: r.status.value for job_id, r in holdings.jobs.items()}
    statuses: dict[str, str | None] = {job_id: every_job.get(job_id) for job_id in accepted}
    counts = dict(objects_per_job(objects))
    durations = decoded_durations(objects, holdings.jobs)
    expected = {
        i: f"job.{r.status.value}" for i, r in holdings.jobs.items() if r.webhook_url and r.status.value in TERMINAL
    }
    states = {i: r.webhook.state.value for i, r in holdings.jobs.items() if r.webhook is not None}
    for batch_id, (event, state) in holdings.batch_webhooks.items():
        expected[batch_id] = event
        if state is not None:
            states[batch_id] = state
    batches = {
        i: BatchEnd(b.status, b.items, b.finished_items, manifests(objects, i)) for i, b in holdings.batches.items()
    }
    parts = tmp_parts(objects)
    unexpected, gave_up, watchers = client_findings(requests)
    checks = [
        *job_checks(accepted, statuses, every_job),
        *object_checks(every_job, counts, durations),
        *webhook_checks(expected, deliveries, states),
        *batch_checks(batches),
        *leftover_checks(parts, alive, unasked_deaths),
        *client_checks(unexpected, gave_up, watchers),
    ]
    doubled = {
        job_id: {
            "named": _result_key(holdings.jobs[job_id]),
            "stored": objects.list_keys(f"{JOBS_PREFIX}{job_id}/"),
        }
        for job_id, n in counts.items()
        if n > 1 and job_id in holdings.jobs
    }
    orphans = sorted(set(every_job) - set(accepted))
    named = {job_id for r in requests for job_id in r.named_by_503 - {r.job_id}}
    figures = {
        "jobs_in_redis": len(every_job),
        "accepted": len(accepted),
        "orphans": {
            "speech": sum(1 for i in orphans if holdings.jobs[i].stream),
            "jobs": sum(1 for i in orphans if not holdings.jobs[i].stream),
        },
        "ids_named_by_503s_only": len(named),
        "of_which_existed": len(named & set(every_job)),
        "orphans_are": "jobs no client was given (a speech request sent again, a submit whose answer was lost)",
        "failed_codes": _failed_codes(holdings.jobs),
        "jobs_with_several_objects": dict(list(doubled.items())[:20]),
        "webhook_deliveries": len(deliveries),
        "webhook_events_expected": len(expected),
        "unexpected_answers": unexpected[:50],
        "gave_up": gave_up[:50],
        "tmp_parts": parts[:50],
    }
    return Reckoning(accepted, statuses, checks, figures)


def _failed_codes(jobs: dict[str, JobRecord]) -> dict[str, int]:
    codes: dict[str, int] = {}
    for record in jobs.values():
        if record.error is not None:
            codes[record.error.code] = codes.get(record.error.code, 0) + 1
    return codes


def _result_key(record: JobRecord) -> str | None:
    return None if record.result is None else record.result.key
