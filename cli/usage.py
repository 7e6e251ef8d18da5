"""``ttsq usage``: what each key used over the last days, straight from Redis (run it where the
deployment's ``TTSQ_REDIS_URL`` is set), read as ``GET /v1/usage`` reads it (``ttsq.usage``).

Every key is listed, revoked ones too (their history stays), and the anonymous tenant when it used
anything in the window (development, or keys not required). ``--json`` prints a list of what
``GET /v1/usage`` answers, one per tenant.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import click

from cli.keys import admin_stores
from ttsq.errors import TenantNotFound
from ttsq.quotas import USAGE_HISTORY_DAYS
from ttsq.tenants import ANONYMOUS, ANONYMOUS_TENANT, Tenant, TenantStore
from ttsq.usage import DEFAULT_USAGE_DAYS, UsagePublic, usage_report


@click.command()
@click.option("--tenant", "id_or_name", default=None, help="One key, by tenant id or name (default: every key).")
@click.option(
    "--days",
    type=click.IntRange(1, USAGE_HISTORY_DAYS),
    default=DEFAULT_USAGE_DAYS,
    show_default=True,
    help="UTC days to cover, today included.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what GET /v1/usage answers, one object per tenant.")
def usage(id_or_name: str | None, days: int, as_json: bool) -> None:
    """Characters, audio seconds and jobs by key over the last days, with today's limits; one key's
    by voice and by day too."""
    stores = admin_stores()
    try:
        tenants = _tenants(stores.tenants, id_or_name)
    except TenantNotFound as e:
        raise click.ClickException(str(e)) from e
    now = datetime.now(UTC)
    defaults = stores.settings.default_limits
    reports = [
        usage_report(stores.quotas, t.model_copy(update={"limits": t.limits.over(defaults)}), days, now)
        for t in tenants
    ]
    if id_or_name is None:  # the anonymous tenant only where it did something
        reports = [r for r in reports if r.tenant != ANONYMOUS_TENANT or r.total.jobs or r.today.active_jobs]
    if as_json:
        click.echo(json.dumps([r.model_dump(mode="json") for r in reports], indent=2))
        return
    for line in _summary(reports, days, now, revoked={t.id for t in tenants if t.revoked_at is not None}):
        click.echo(line)
    if id_or_name is not None:
        for line in _details(reports[0]):
            click.echo(line)


def _tenants(store: TenantStore, id_or_name: str | None) -> list[Tenant]:
    if id_or_name == ANONYMOUS_TENANT:
        return [ANONYMOUS]
    if id_or_name is not None:
        return [store.find(id_or_name)]
    return [*store.all(), ANONYMOUS]


def _seconds(value: float) -> str:
    return f"{value:,.1f}"


def _of(used: str, limit: str | None) -> str:
    return f"{used} / {limit if limit is not None else 'unlimited'}"


def _summary(reports: Sequence[UsagePublic], days: int, now: datetime, revoked: set[str]) -> list[str]:
    """One row per tenant: the window's totals, then today's against its limits."""
    if not reports:
        return ["no keys"]
    first = reports[0]
    header = f"usage over {days} UTC days, {first.start} to {first.end} (at {now:%H:%M} UTC)"
    rows = [["TENANT", "NAME", "CHARS", "AUDIO_S", "JOBS", "TODAY CHARS", "TODAY AUDIO_S", "ACTIVE JOBS"]]
    for r in reports:
        limits = r.today.limits
        rows.append(
            [
                r.tenant,
                r.name + (" (revoked)" if r.tenant in revoked else ""),
                f"{r.total.characters:,}",
                _seconds(r.total.audio_seconds),
                f"{r.total.jobs:,}",
                _of(f"{r.today.characters:,}", None if limits.chars_per_day is None else f"{limits.chars_per_day:,}"),
                _of(
                    _seconds(r.today.audio_seconds),
                    None if limits.audio_seconds_per_day is None else _seconds(limits.audio_seconds_per_day),
                ),
                _of(str(r.today.active_jobs), None if limits.max_active_jobs is None else str(limits.max_active_jobs)),
            ]
        )
    return [header, "", *_table(rows, numeric_from=2)]


def _details(report: UsagePublic) -> list[str]:
    """One tenant's voices, and its days with any use."""
    voices = [["VOICE", "CHARS", "AUDIO_S", "JOBS"]]
    voices += [[v.voice, f"{v.characters:,}", _seconds(v.audio_seconds), f"{v.jobs:,}"] for v in report.by_voice]
    days = [["DAY", "CHARS", "AUDIO_S", "JOBS"]]
    days += [
        [str(d.day), f"{d.characters:,}", _seconds(d.audio_seconds), f"{d.jobs:,}"]
        for d in report.by_day
        if d.jobs or d.characters or d.audio_seconds
    ]
    reserved = f"today {_seconds(report.today.reserved_audio_seconds)} s of audio are reserved by unfinished jobs"
    return ["", reserved, "", *_table(voices, numeric_from=1), "", *_table(days, numeric_from=1)]


def _table(rows: Sequence[Sequence[str]], numeric_from: int) -> list[str]:
    """Rows as aligned columns, those from ``numeric_from`` on to the right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if i >= numeric_from else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
