"""``ttsq keys``: create, list, change and revoke API keys (straight in Redis: run it where the
deployment's ``TTSQ_REDIS_URL`` is set)."""

from __future__ import annotations

from typing import Any

import click
import redis

from ttsq.settings import get_settings
from ttsq.tenants import Limits, Tenant, TenantNotFound, TenantStore


def _store() -> TenantStore:
    return TenantStore(redis.Redis.from_url(get_settings().redis_url, socket_connect_timeout=5))


def limit_options(command: Any) -> Any:
    """The limit flags shared by ``create`` and ``update``."""
    for flag, kind, text in reversed(
        [
            ("--max-active-jobs", int, "Jobs queued or running at once."),
            ("--chars-per-day", int, "Characters submitted per UTC day."),
            ("--audio-seconds-per-day", float, "Seconds of audio per UTC day."),
            ("--requests-per-second", float, "Requests to /v1 per second."),
        ]
    ):
        command = click.option(flag, type=kind, default=None, help=f"{text} Unset: the server default.")(command)
    return command


def _limits(**given: Any) -> Limits:
    return Limits.model_validate({name: value for name, value in given.items() if value is not None})


def _describe(tenant: Tenant) -> str:
    limits = ", ".join(f"{k}={v:g}" for k, v in tenant.limits.model_dump(exclude_none=True).items()) or "defaults"
    state = f"revoked {tenant.revoked_at:%Y-%m-%d %H:%M}" if tenant.revoked_at else "active"
    return f"{tenant.id}  {tenant.name}  {tenant.key_hint}…  {state}  limits: {limits}"


@click.group()
def keys() -> None:
    """API keys: each selects a tenant, which owns its jobs and has its own limits."""


@keys.command()
@click.argument("name")
@limit_options
def create(name: str, **limits: Any) -> None:
    """Create a key; it is printed once, alone on the last line, and only its hash is kept."""
    key, tenant = _store().create(name, _limits(**limits))
    click.echo(f"created {_describe(tenant)}")
    click.echo("the key (shown once; keep it secret):")
    click.echo(key)


@keys.command("list")
def list_keys() -> None:
    """Every key with its id, name, state and limits (never the key itself)."""
    for tenant in _store().all():
        click.echo(_describe(tenant))


@keys.command()
@click.argument("id_or_name")
@limit_options
def update(id_or_name: str, **limits: Any) -> None:
    """Change a key's limits (those given; the others stay)."""
    store = _store()
    try:
        tenant = store.update(store.find(id_or_name).id, _limits(**limits))
    except TenantNotFound as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"updated {_describe(tenant)}")


@keys.command()
@click.argument("id_or_name")
def revoke(id_or_name: str) -> None:
    """Stop a key at once; its jobs stay its tenant's."""
    store = _store()
    try:
        tenant = store.revoke(store.find(id_or_name).id)
    except TenantNotFound as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"revoked {_describe(tenant)}")
