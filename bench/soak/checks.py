"""The soak's verdict, on plain data gathered after the drain: each check passes or fails with a
line saying what it counted. Pure, so the checks themselves are tested in ``make test``
(``tests/test_soak.py``) without a stack."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

TERMINAL: Final = frozenset({"succeeded", "failed", "canceled"})
"""Job statuses that end a job."""

DURATION_TOLERANCE_S: Final = 0.05
"""How far a decoded object's length may be from the job's ``duration_s`` (plus 1 % of it): the
formats the soak asks for (WAV, FLAC, Ogg Opus, MP4) all record their exact length."""


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Delivery:
    """One POST a webhook receiver got."""

    webhook_id: str
    event: str
    """``job.succeeded``, ``batch.completed``…"""
    subject: str
    """The job's or the batch's id."""
    verified: bool


@dataclass(frozen=True)
class BatchEnd:
    status: str
    items: int
    finished_items: int
    manifests: int
    """``manifest.json`` objects stored for the batch (one expected)."""


def _ids(ids: Iterable[str], limit: int = 5) -> str:
    listed = sorted(ids)
    more = f" and {len(listed) - limit} more" if len(listed) > limit else ""
    return ", ".join(listed[:limit]) + more


def _count(name: str, bad: Sequence[str] | set[str], of: int, what: str) -> Check:
    detail = f"{len(bad)} of {of} {what}" + (f": {_ids(bad)}" if bad else "")
    return Check(name, not bad, detail)


def job_checks(
    accepted: Mapping[str, str], statuses: Mapping[str, str | None], every_job: Mapping[str, str]
) -> list[Check]:
    """``accepted``: job id → kind of load, every job a client was given (202, or named by a 503 and
    found afterwards); ``statuses``: their statuses, ``None`` for no record; ``every_job``: every job
    record in Redis → status, whoever made it."""
    lost = [job_id for job_id in accepted if statuses.get(job_id) is None]
    unfinished = [j for j in accepted if statuses.get(j) is not None and statuses[j] not in TERMINAL]
    stuck = [job_id for job_id, status in every_job.items() if status not in TERMINAL]
    failed = [j for j, kind in accepted.items() if kind != "hostile" and statuses.get(j) in {"failed", "canceled"}]
    return [
        _count("accepted jobs terminal", unfinished, len(accepted), "accepted jobs not terminal"),
        _count("0 lost", lost, len(accepted), "accepted jobs without a record"),
        _count("0 stuck", stuck, len(every_job), "jobs in Redis not terminal"),
        _count("ordinary jobs succeeded", failed, len(accepted), "jobs (hostile texts aside) failed or canceled"),
    ]


def object_checks(
    statuses: Mapping[str, str], objects: Mapping[str, int], durations: Mapping[str, tuple[float, float | None]]
) -> list[Check]:
    """``statuses``: every job → status; ``objects``: job id → objects stored under its prefix;
    ``durations``: succeeded job → (its ``duration_s``, its object's decoded length or ``None`` when
    it could not be read or decoded)."""
    succeeded = [job_id for job_id, status in statuses.items() if status == "succeeded"]
    missing = [job_id for job_id in succeeded if objects.get(job_id, 0) == 0]
    doubled = [job_id for job_id in succeeded if objects.get(job_id, 0) > 1]
    strays = [job_id for job_id, n in objects.items() if n and statuses.get(job_id) != "succeeded"]
    wrong = [
        job_id
        for job_id, (reported, decoded) in durations.items()
        if decoded is None or abs(decoded - reported) > DURATION_TOLERANCE_S + 0.01 * reported
    ]
    return [
        _count("succeeded objects exist", missing, len(succeeded), "succeeded jobs without an object"),
        _count("0 duplicated objects", doubled, len(succeeded), "succeeded jobs with more than one object"),
        _count("no objects of other jobs", strays, len(objects), "jobs with objects that did not succeed"),
        _count("objects decode to their duration", wrong, len(durations), "objects off their duration_s"),
    ]


def webhook_checks(
    expected: Mapping[str, str], deliveries: Sequence[Delivery], states: Mapping[str, str]
) -> list[Check]:
    """``expected``: subject id → the event its end sends (``job.succeeded``…); ``states``: subject
    id → its record's delivery state. ttsq promises at least once, with one ``webhook-id`` on every
    attempt of an event (docs/WEBHOOKS.md): repeats are allowed, a second id for one event is not."""
    ids: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    for delivery in deliveries:
        ids[(delivery.subject, delivery.event)].add(delivery.webhook_id)
    undelivered = [s for s, event in expected.items() if not ids.get((s, event))]
    several = [f"{s} {e}" for (s, e), found in ids.items() if len(found) > 1]
    unverified = [f"{d.subject} {d.event}" for d in deliveries if not d.verified]
    unexpected = [f"{s} {e}" for (s, e) in ids if expected.get(s) != e]
    not_delivered = [s for s in expected if states.get(s) != "delivered"]
    repeats = len(deliveries) - len(ids)
    return [
        _count("each webhook event delivered", undelivered, len(expected), "events never received"),
        Check(
            "one webhook-id per event",
            not several,
            f"{len(several)} events with several ids; {repeats} repeated deliveries (same id, allowed)"
            + (f": {_ids(several)}" if several else ""),
        ),
        _count("webhook signatures verify", unverified, len(deliveries), "deliveries not verified"),
        _count("no unexpected webhook events", unexpected, len(ids), "events nobody expected"),
        _count("webhook state delivered", not_delivered, len(expected), "records not showing delivered"),
    ]


def batch_checks(batches: Mapping[str, BatchEnd]) -> list[Check]:
    bad = [
        f"{batch_id} ({end.status}, {end.finished_items}/{end.items} finished, {end.manifests} manifests)"
        for batch_id, end in batches.items()
        if end.status != "completed" or end.finished_items != end.items or end.manifests != 1
    ]
    return [_count("batches completed with one manifest", bad, len(batches), "batches not so")]


def leftover_checks(tmp_parts: Sequence[str], alive: Mapping[str, bool], deaths: Sequence[str]) -> list[Check]:
    """``deaths``: processes that died without the driver killing them."""
    dead = [name for name, up in alive.items() if not up]
    return [
        _count("no tmp/ parts left", list(tmp_parts), len(tmp_parts), "parts under tmp/"),
        _count("every process alive", dead, len(alive), "processes not running"),
        _count("no process died unasked", list(deaths), len(deaths), "deaths the driver did not cause"),
    ]


def client_checks(unexpected: Sequence[str], gave_up: Sequence[str], watchers: Mapping[str, bool]) -> list[Check]:
    """``unexpected``: answers no client should get (a 500, a 4xx to ordinary load); ``gave_up``:
    submits never answered 2xx or 4xx before their deadline; ``watchers``: SSE or long-poll watcher
    → whether it saw its job's final status."""
    blind = [name for name, saw in watchers.items() if not saw]
    return [
        _count("no unexpected answers", list(unexpected), len(unexpected), "unexpected answers"),
        _count("every submit answered", list(gave_up), len(gave_up), "submits that gave up"),
        _count("watchers saw the end", blind, len(watchers), "watchers that missed their job's end"),
    ]


def recovery_check(recoveries: Mapping[str, float | None]) -> Check:
    """``recoveries``: fault → seconds from its end until a canary job succeeded (``None``: never)."""
    never = [name for name, seconds in recoveries.items() if seconds is None]
    return _count("every fault recovered", never, len(recoveries), "faults after which no canary succeeded")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0 to 100); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def latency_split(
    latencies: Sequence[tuple[float, float]], windows: Sequence[tuple[float, float]]
) -> dict[str, dict[str, float | int | None]]:
    """``latencies``: (submitted at, seconds to finish) of each job; ``windows``: (start, end) of each
    fault, from its start to its recovery. A job whose life (submit to finish) overlaps a window counts
    as during faults; between faults are the jobs that met none."""

    def hit(at: float, took: float) -> bool:
        return any(at <= end and start <= at + took for start, end in windows)

    during = [took for at, took in latencies if hit(at, took)]
    between = [took for at, took in latencies if not hit(at, took)]
    return {
        name: {"jobs": len(values), "p50_s": percentile(values, 50), "p99_s": percentile(values, 99)}
        for name, values in (("during_faults", during), ("between_faults", between))
    }


def by_kind_and_status(accepted: Mapping[str, str], statuses: Mapping[str, str | None]) -> dict[str, dict[str, int]]:
    """Kind of load → status → jobs (``lost`` for no record)."""
    table: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for job_id, kind in accepted.items():
        table[kind][statuses.get(job_id) or "lost"] += 1
    return {kind: dict(counts) for kind, counts in sorted(table.items())}
