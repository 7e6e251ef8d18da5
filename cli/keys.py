"""``ttsq keys``: create, list, change and revoke API keys (straight in Redis: run it where the
deployment's ``TTSQ_REDIS_URL`` is set; ``revoke`` also reaches the queue and the object store).

Revoking a key stops it at once and, unless told ``--keep-jobs``, cancels its queued and running
jobs as ``DELETE /v1/jobs/{id}`` would (``ttsq.lifecycle.cancel_job``: a queued job never starts, a
running one stops after the segments in flight, each sends its ``job.canceled`` webhook). Nobody can
read those jobs any more (a key is its tenant), so finishing them would spend workers and the
tenant's quota on audio no client can fetch; ``--keep-jobs`` is for jobs whose webhook receivers
still want them. Presigned links already handed out are signed with the store's key, not the API
key: they work until they expire (``TTSQ_S3__PRESIGN_TTL_S``), unless ``--delete-audio`` deletes the
stored results of the key's finished jobs now.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import click

from ttsq.errors import JobNotFound, TenantNotFound
from ttsq.job_record import JobRecord, JobStatus
from ttsq.job_store import JobStore
from ttsq.lifecycle import Lifecycle, cancel_job, purge_job
from ttsq.settings import Settings, get_settings
from ttsq.stores import Stores
from ttsq.tenants import Limits, Tenant, TenantStore

PAGE: Final = 200
"""Jobs read per round trip while looking for a revoked key's finished jobs."""


SOCKET_TIMEOUT_S: Final = 30.0
"""An administrator's command waits this long for Redis before it fails."""


def admin_stores() -> Stores:
    """The stores of the deployment the settings name, as an administrator's command reaches them."""
    return Stores.connect(get_settings(), SOCKET_TIMEOUT_S)


def _store() -> TenantStore:
    return admin_stores().tenants


def limit_options(command: Any) -> Any:
    """The limit flags shared by ``create`` and ``update``."""
    for flag, kind, text in reversed(
        [
            ("--max-active-jobs", int, "Jobs queued or running at once."),
            ("--chars-per-day", int, "Characters submitted per UTC day."),
            ("--audio-seconds-per-day", float, "Seconds of audio per UTC day."),
            ("--requests-per-second", float, "Requests to /v1 per second."),
            ("--submits-per-second", float, "Submissions per second while other keys submit too."),
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
@click.option("--keep-jobs", is_flag=True, help="Let the key's queued and running jobs finish (for their webhooks).")
@click.option(
    "--delete-audio",
    is_flag=True,
    help="Also delete the stored results of the key's finished jobs: links handed out stop working now.",
)
def revoke(id_or_name: str, keep_jobs: bool, delete_audio: bool) -> None:
    """Stop a key at once and cancel its queued and running jobs (see the module docstring)."""
    store = _store()
    try:
        tenant = store.revoke(store.find(id_or_name).id)
    except TenantNotFound as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"revoked {_describe(tenant)}")
    if keep_jobs and not delete_audio:
        click.echo(f"its {len(store.active_job_ids(tenant.id))} queued or running jobs go on")
        return
    lifecycle = _lifecycle(get_settings())
    if not keep_jobs:
        canceled = _cancel_active(store, tenant, lifecycle)
        click.echo(f"canceled {canceled} queued or running jobs")
    if delete_audio:
        purged = [purge_job(record.id, lifecycle).id for record in _finished(lifecycle.jobs, tenant)]
        click.echo(f"deleted the stored results of {len(purged)} finished jobs")


def _cancel_active(store: TenantStore, tenant: Tenant, lifecycle: Lifecycle) -> int:
    """Cancel each of the tenant's unfinished jobs; a job that finished meanwhile is left as it is."""
    canceled = 0
    for job_id in store.active_job_ids(tenant.id):
        try:
            record = cancel_job(job_id, lifecycle, purge=False)
        except JobNotFound:  # expired: nothing left to stop
            continue
        if record.status is JobStatus.CANCELED:
            canceled += 1
    return canceled


def _finished(jobs: JobStore, tenant: Tenant) -> Iterator[JobRecord]:
    """Every finished job of the tenant whose objects were not deleted yet, newest first."""
    after: tuple[float, str] | None = None
    while entries := jobs.tenant_page(tenant.id, after, PAGE):
        for record in jobs.many([job_id for job_id, _ in entries]):
            if record is not None and record.status.terminal and record.purged_at is None:
                yield record
        after = (entries[-1][1], entries[-1][0])


def _lifecycle(settings: Settings) -> Lifecycle:
    """The stores and senders a cancel touches, as the API and the sweeper have them (the broker's
    client, Celery, imported here: only ``revoke`` sends)."""
    from ttsq.broker import TaskPublisher, make_producer

    send = TaskPublisher(make_producer(settings), settings.queue)
    return admin_stores().lifecycle(send.finish_batch)
