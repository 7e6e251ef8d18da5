"""API keys and the tenants they select, kept in Redis.

A key is ``ttsq_`` and 43 URL-safe characters (256 random bits). Only its SHA-256 is stored: a fast
hash is enough for a secret with that much entropy (no dictionary to try), and it lets every request
look its key up in one ``GET``. A tenant owns jobs; its limits are given per key, and a limit left
unset falls back to the server's default (``TTSQ_DEFAULT_LIMITS__*``), unset there too = no limit.

Keys::

    ttsq:apikey:<sha256 hex>   → tenant id           (deleted on revoke)
    ttsq:tenant:<id>           → Tenant JSON          (kept, with revoked_at, so old jobs stay named)
    ttsq:tenants               → set of tenant ids
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Final, cast

import redis
from pydantic import BaseModel, Field

from ttsq.constants import TENANTS_KEY, api_key_entry_key, tenant_active_key, tenant_key
from ttsq.errors import TenantNotFound

KEY_MARKER: Final = "ttsq_"
"""Every key starts with this, so secret scanners and people can recognise one."""

ANONYMOUS_TENANT: Final = "anonymous"
"""The tenant of requests without a (known) key when keys are not required (development)."""


DEFAULT_SUBMITS_PER_SECOND: Final = 20.0
"""The server's default ``submits_per_second``: while tenants contend, each submits at most about this
many short jobs a second (``TTSQ_DEFAULT_LIMITS__SUBMITS_PER_SECOND``)."""


class Limits(BaseModel):
    """What one tenant may use; ``None`` = the server default for this limit."""

    max_active_jobs: int | None = Field(None, ge=1)
    """Jobs queued or running at once."""
    chars_per_day: int | None = Field(None, ge=1)
    """Characters submitted per UTC day."""
    audio_seconds_per_day: float | None = Field(None, gt=0)
    """Seconds of audio per UTC day: estimated at submit, planned by the worker, settled when done."""
    requests_per_second: float | None = Field(None, gt=0)
    """Requests to ``/v1`` per second, of any kind (polls count)."""
    submits_per_second: float | None = Field(None, gt=0)
    """Submissions per second (each one, plus one per 10 kB of body) while another tenant submits
    too: spaced at this rate, waiting up to 2 s for a turn (``ttsq.pacing``)."""

    def over(self, defaults: Limits) -> Limits:
        """These limits with every unset one taken from ``defaults``."""
        mine = self.model_dump(exclude_none=True)
        return Limits.model_validate({**defaults.model_dump(), **mine})


class Tenant(BaseModel):
    """Who calls: one per API key."""

    id: str
    name: str
    limits: Limits = Field(default_factory=Limits)
    created_at: datetime
    revoked_at: datetime | None = None
    key_hint: str = ""
    """The key's first characters, to tell keys apart in listings (never enough to use it)."""


ANONYMOUS: Final = Tenant(id=ANONYMOUS_TENANT, name=ANONYMOUS_TENANT, created_at=datetime(2026, 1, 1, tzinfo=UTC))
"""Who calls without a known key where keys are not required; its limits are the server's defaults."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_MARKER + secrets.token_urlsafe(32)


class TenantStore:
    """Create, find, list, change and revoke keys."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def create(self, name: str, limits: Limits) -> tuple[str, Tenant]:
        """A new tenant and its key; the key is returned once and never stored."""
        if not name.strip():
            raise ValueError("a key needs a name")
        key = new_key()
        tenant = Tenant(
            id="t_" + secrets.token_hex(6),
            name=name.strip(),
            limits=limits,
            created_at=datetime.now(UTC),
            key_hint=key[: len(KEY_MARKER) + 4],
        )
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(tenant_key(tenant.id), tenant.model_dump_json())
            pipe.set(api_key_entry_key(hash_key(key)), tenant.id)
            pipe.hset(tenant_key(tenant.id) + ":key", "hash", hash_key(key))
            pipe.sadd(TENANTS_KEY, tenant.id)
            pipe.execute()
        return key, tenant

    def by_key(self, key: str) -> Tenant | None:
        """The live tenant this key selects, or None for an unknown or revoked key."""
        if not key.startswith(KEY_MARKER):
            return None
        tenant_id = cast(bytes | None, self._redis.get(api_key_entry_key(hash_key(key))))
        if tenant_id is None:
            return None
        tenant = self._read(tenant_id.decode())
        return tenant if tenant is not None and tenant.revoked_at is None else None

    def get(self, tenant_id: str) -> Tenant | None:
        return self._read(tenant_id)

    def _read(self, tenant_id: str) -> Tenant | None:
        raw = cast(bytes | None, self._redis.get(tenant_key(tenant_id)))
        return None if raw is None else Tenant.model_validate_json(raw)

    def all(self) -> list[Tenant]:
        ids = sorted(member.decode() for member in cast(set[bytes], self._redis.smembers(TENANTS_KEY)))
        tenants = [self._read(tenant_id) for tenant_id in ids]
        return sorted((t for t in tenants if t is not None), key=lambda t: t.created_at)

    def find(self, id_or_name: str) -> Tenant:
        """By id, else by name (the newest live one of that name)."""
        by_id = self._read(id_or_name)
        if by_id is not None:
            return by_id
        named = [t for t in self.all() if t.name == id_or_name]
        live = [t for t in named if t.revoked_at is None] or named
        if not live:
            raise TenantNotFound(f"no key with id or name {id_or_name!r}")
        return live[-1]

    def update(self, tenant_id: str, limits: Limits) -> Tenant:
        """Change the limits given (fields set in ``limits``); others stay."""
        tenant = self._require(tenant_id)
        changed = {**tenant.limits.model_dump(), **limits.model_dump(exclude_unset=True)}
        updated = tenant.model_copy(update={"limits": Limits.model_validate(changed)})
        self._redis.set(tenant_key(tenant_id), updated.model_dump_json())
        return updated

    def revoke(self, tenant_id: str) -> Tenant:
        """The key stops working at once; the tenant's record stays so its jobs keep an owner. (What
        becomes of its jobs is the caller's to decide: ``ttsq keys revoke`` cancels them.)"""
        tenant = self._require(tenant_id)
        key_hash = cast(bytes | None, self._redis.hget(tenant_key(tenant_id) + ":key", "hash"))
        revoked = tenant.model_copy(update={"revoked_at": tenant.revoked_at or datetime.now(UTC)})
        with self._redis.pipeline(transaction=True) as pipe:
            if key_hash is not None:
                pipe.delete(api_key_entry_key(key_hash.decode()))
            pipe.set(tenant_key(tenant_id), revoked.model_dump_json())
            pipe.execute()
        return revoked

    def active_job_ids(self, tenant_id: str) -> list[str]:
        """The tenant's queued and running jobs, oldest first (those its active-jobs limit counts)."""
        members = cast(list[bytes], self._redis.zrange(tenant_active_key(tenant_id), 0, -1))
        return [member.decode() for member in members]

    def _require(self, tenant_id: str) -> Tenant:
        tenant = self._read(tenant_id)
        if tenant is None:
            raise TenantNotFound(f"no key with id {tenant_id!r}")
        return tenant
