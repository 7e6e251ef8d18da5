"""A tenant's pronunciation lexicons in Redis: stored whole, versioned, read back as uploaded.

A store replaces a lexicon in one Lua call (the version counter, the new version's hash and the
tenant's summary together), so of two concurrent stores of one name the last wins whole, never a
mix. Each version is kept under its own key: a job records the versions it was submitted with
(:class:`LexiconRef`), and its worker reads exactly those, so a retry or a resumed narration speaks
the same even after the lexicon changed. The current version persists; a replaced or deleted one
expires after the job TTL.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Final

import redis
from pydantic import BaseModel

from tts_core.lexicon import Lexicon
from ttsq.constants import lexicon_version_key, lexicon_version_prefix, lexicon_versions_key, lexicons_key
from ttsq.errors import LexiconNotFound, LexiconRefused

_STORE: Final = """
local summaries, versions, name = KEYS[1], KEYS[2], ARGV[1]
local current = redis.call('HGET', summaries, name)
if not current and redis.call('HLEN', summaries) >= tonumber(ARGV[2]) then
  return -1
end
local version = redis.call('HINCRBY', versions, name, 1)
local key = ARGV[3] .. version
redis.call('HSET', key, 'document', ARGV[4], 'content_type', ARGV[5], 'lexicon', ARGV[6])
if current then
  redis.call('EXPIRE', ARGV[3] .. cjson.decode(current)['version'], tonumber(ARGV[7]))
end
local summary = cjson.decode(ARGV[8])
summary['version'] = version
redis.call('HSET', summaries, name, cjson.encode(summary))
return version
"""
"""KEYS: summaries, versions. ARGV: name, max count, version key prefix, document, content type,
entries JSON, TTL of the replaced version, summary JSON (without its version). Returns the new
version, or -1 if the tenant already has its most lexicons."""

_DELETE: Final = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('EXPIRE', ARGV[2] .. cjson.decode(current)['version'], tonumber(ARGV[3]))
return 1
"""


class LexiconSummary(BaseModel):
    """What ``GET /v1/lexicons`` lists of a lexicon."""

    name: str
    language: str
    entries: int
    bytes: int
    content_type: str
    version: int
    updated_at: float


@dataclass(frozen=True)
class StoredDocument:
    """A lexicon's document exactly as uploaded."""

    document: bytes
    content_type: str
    version: int


@dataclass(frozen=True)
class LexiconRef:
    """A lexicon as a job uses it: its name and the version it was submitted with."""

    name: str
    version: int


class LexiconStore:
    """Lexicons per tenant: store, read, list, delete, and the versions jobs use."""

    def __init__(self, client: redis.Redis, version_ttl_s: int) -> None:
        self._client = client
        self._version_ttl_s = version_ttl_s
        self._store = client.register_script(_STORE)
        self._delete = client.register_script(_DELETE)

    def put(
        self, tenant: str, name: str, document: bytes, content_type: str, lexicon: Lexicon, max_count: int
    ) -> LexiconSummary:
        """Store (or replace) the lexicon whole; :class:`LexiconRefused` if it would be the tenant's
        ``max_count + 1``-th."""
        summary = {
            "name": name,
            "language": lexicon.language,
            "entries": len(lexicon.entries),
            "bytes": len(document),
            "content_type": content_type,
            "updated_at": time.time(),
        }
        version = int(
            self._store(
                keys=[lexicons_key(tenant), lexicon_versions_key(tenant)],
                args=[
                    name,
                    max_count,
                    lexicon_version_prefix(tenant, name),
                    document,
                    content_type,
                    json.dumps(lexicon.to_json(), ensure_ascii=False),
                    self._version_ttl_s,
                    json.dumps(summary),
                ],
            )
        )
        if version < 0:
            raise LexiconRefused(f"a tenant may store at most {max_count} lexicons (TTSQ_LEXICONS_PER_TENANT)")
        return LexiconSummary.model_validate({**summary, "version": version})

    def summary(self, tenant: str, name: str) -> LexiconSummary:
        raw = self._client.hget(lexicons_key(tenant), name)
        if raw is None:
            raise LexiconNotFound(name)
        return LexiconSummary.model_validate_json(raw)

    def summaries(self, tenant: str) -> list[LexiconSummary]:
        raw: dict[bytes, bytes] = self._client.hgetall(lexicons_key(tenant))  # type: ignore[assignment]
        return sorted((LexiconSummary.model_validate_json(v) for v in raw.values()), key=lambda s: s.name)

    def document(self, tenant: str, name: str) -> StoredDocument:
        """The current version's document as uploaded."""
        ref = self.current(tenant, name)
        fields: list[bytes | None] = self._client.hmget(  # type: ignore[assignment]
            lexicon_version_key(tenant, name, ref.version), ["document", "content_type"]
        )
        document, content_type = fields
        if document is None or content_type is None:  # deleted between the two reads
            raise LexiconNotFound(name)
        return StoredDocument(document, content_type.decode(), ref.version)

    def current(self, tenant: str, name: str) -> LexiconRef:
        return LexiconRef(name, self.summary(tenant, name).version)

    def lexicon(self, tenant: str, ref: LexiconRef) -> Lexicon:
        """The entries of that version; :class:`LexiconNotFound` once it has expired."""
        raw = self._client.hget(lexicon_version_key(tenant, ref.name, ref.version), "lexicon")
        if raw is None:
            raise LexiconNotFound(f"{ref.name} (version {ref.version})")
        return Lexicon.from_json(json.loads(raw))

    def delete(self, tenant: str, name: str) -> None:
        """Forget the lexicon; jobs submitted with it still plan with their version until it expires."""
        deleted = self._delete(
            keys=[lexicons_key(tenant)],
            args=[name, lexicon_version_prefix(tenant, name), self._version_ttl_s],
        )
        if not int(deleted):
            raise LexiconNotFound(name)
