"""A tenant's pronunciation lexicons in Redis: stored whole, versioned, read back as uploaded.

A store replaces a lexicon in one Lua call (the version counter, the new version's hash and the
tenant's summary together), so of two concurrent stores of one name the last wins whole, never a
mix. Each version is kept under its own key: a job records the versions it was submitted with
(:class:`LexiconRef`), and its worker reads exactly those, so a retry or a resumed narration speaks
the same even after the lexicon changed.

The current version persists. A replaced or deleted one is kept for the jobs submitted with it, at
most for the job TTL, but bounded: a name keeps its last ``versions_kept`` replaced versions (an
older one is dropped when a newer is stored), and a tenant's versions, current and kept, hold at
most ``bytes_per_tenant`` bytes (the oldest kept ones are dropped first; a store that the current
versions alone would put past it is refused). Without the bounds, forty stores of a 1 MiB lexicon
added 80 MiB to Redis for a week, and the VOICEVOX user dictionary, rewritten whole per word, grew
quadratically (2,000 words: 360 MiB). A job whose version was dropped fails naming it
(:class:`LexiconVersionGone`).

A draft (:meth:`LexiconStore.put_draft`, the lexicon a studio page speaks before it is saved) is a
version of the tenant's lexicon :data:`DRAFT_NAME`, a name no request can give, so a job uses and a
worker reads it exactly as a stored version. It is no lexicon of the tenant's: not in its summaries
(not listed, not readable, not counted against its lexicons), not among its sizes or kept versions
(it neither counts against its bytes nor pushes its kept versions out), and it expires after
:data:`DRAFT_TTL_S`. What bounds drafts is their own size (a lexicon's most bytes), their short
life and the pacing of the requests that make them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Final

import redis
from pydantic import BaseModel

from tts_core.lexicon.lexicon import Lexicon
from ttsq.constants import (
    lexicon_kept_key,
    lexicon_sizes_key,
    lexicon_version_key,
    lexicon_version_prefix,
    lexicon_versions_key,
    lexicons_key,
)
from ttsq.errors import LexiconNotFound, LexiconRefused, LexiconVersionGone

USER_DICTIONARY: Final = "userdict"
"""The lexicon every job of a tenant uses in its language unnamed (``api.lexicon_use``); the VOICEVOX
API's user dictionary rewrites it whole (``api.voicevox.user_dict``)."""
USER_DICTIONARY_LANGUAGE: Final = "ja"
"""What the VOICEVOX API's user dictionary is written in."""
DRAFT_NAME: Final = "~draft"
"""The lexicon name a tenant's drafts are versions of: outside the names requests may give (letters
and digits), so no request reads, replaces or lists it. One name per tenant, so a worker keeps the
index of one draft per tenant (``workers.pronunciations`` keeps the newest version of a name)."""
DRAFT_TTL_S: Final = 15 * 60
"""How long a draft is kept: its job starts within seconds (an interactive queue a minute behind
refuses new jobs), and a retry after a lost worker comes within minutes; an abandoned draft of the
largest size is gone soon after."""
VERSIONS_KEPT: Final = 3
"""Replaced versions a lexicon name keeps for the jobs submitted with them: a job queued before a
change (or three) still speaks as it was submitted, and a name holds at most four versions."""
BYTES_PER_TENANT: Final = 64 * 1024 * 1024
"""Bytes a tenant's lexicon versions may hold in Redis, kept ones included (each version holds its
document and its entries as JSON: about twice the document). 64 MiB: a tenant's hundred lexicons of
the usual tens of kilobytes with room for their kept versions; a few of the largest (1 MiB)."""

_DROP: Final = """
local function drop(key)
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[4], key)
  local bytes = tonumber(redis.call('HGET', KEYS[3], key) or '0')
  redis.call('HDEL', KEYS[3], key)
  return bytes
end
"""
"""Forget a version: its hash, its place among the kept ones and its size; returns its bytes."""

_STORE: Final = (
    _DROP
    + """
local summaries, versions, sizes, kept = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local name, prefix, ttl, now = ARGV[1], ARGV[3], tonumber(ARGV[7]), tonumber(ARGV[9])
local cap, versions_kept = tonumber(ARGV[10]), tonumber(ARGV[11])
local current = redis.call('HGET', summaries, name)
if not current and redis.call('HLEN', summaries) >= tonumber(ARGV[2]) then
  return -1
end
for _, key in ipairs(redis.call('ZRANGEBYSCORE', kept, '-inf', now)) do drop(key) end
local replaced = current and (prefix .. cjson.decode(current)['version'])
local size = #ARGV[4] + #ARGV[5] + #ARGV[6]
local total, held = size, size
local all = redis.call('HGETALL', sizes)
for i = 1, #all, 2 do
  local bytes = tonumber(all[i + 1])
  total = total + bytes
  if all[i] ~= replaced and not redis.call('ZSCORE', kept, all[i]) then held = held + bytes end
end
if held > cap then
  return -2 - held
end
local version = redis.call('HINCRBY', versions, name, 1)
local key = prefix .. version
redis.call('HSET', key, 'document', ARGV[4], 'content_type', ARGV[5], 'lexicon', ARGV[6])
redis.call('HSET', sizes, key, size)
if replaced then
  redis.call('EXPIRE', replaced, ttl)
  redis.call('ZADD', kept, now + ttl, replaced)
end
local oldest = version - 1 - versions_kept
if oldest >= 1 and redis.call('ZSCORE', kept, prefix .. oldest) then
  total = total - drop(prefix .. oldest)
end
local most_kept = tonumber(ARGV[2]) * versions_kept
while redis.call('ZCARD', kept) > 0 and (total > cap or redis.call('ZCARD', kept) > most_kept) do
  total = total - drop(redis.call('ZRANGE', kept, 0, 0)[1])
end
local summary = cjson.decode(ARGV[8])
summary['version'] = version
redis.call('HSET', summaries, name, cjson.encode(summary))
return version
"""
)
"""KEYS: summaries, versions, sizes, kept. ARGV: name, max count, version key prefix, document,
content type, entries JSON, TTL of the replaced version, summary JSON (without its version), now,
the tenant's bytes, versions kept per name. Returns the new version; -1 if the tenant already has
its most lexicons; -2 - bytes if its current versions with this one would hold ``bytes``, past its
bytes. Kept versions go oldest first: past their name's ``versions kept``, then while the tenant's
versions hold more than its bytes or it keeps more than ``versions kept`` per lexicon it may have
(names deleted and stored again)."""

_DRAFT: Final = """
local version = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local key = ARGV[2] .. version
redis.call('HSET', key, 'lexicon', ARGV[3])
redis.call('EXPIRE', key, tonumber(ARGV[4]))
return version
"""
"""KEYS: versions. ARGV: the draft name, its version key prefix, entries JSON, TTL. Returns the version."""

_DELETE: Final = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local key = ARGV[2] .. cjson.decode(current)['version']
redis.call('EXPIRE', key, tonumber(ARGV[3]))
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[3]), key)
return 1
"""
"""KEYS: summaries, kept. ARGV: name, version key prefix, TTL, now. The current version is kept
as a replaced one is (the next store counts and bounds it)."""


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

    def __init__(
        self,
        client: redis.Redis,
        version_ttl_s: int,
        versions_kept: int = VERSIONS_KEPT,
        bytes_per_tenant: int = BYTES_PER_TENANT,
    ) -> None:
        self._client = client
        self._version_ttl_s = version_ttl_s
        self._versions_kept = versions_kept
        self._bytes_per_tenant = bytes_per_tenant
        self._store = client.register_script(_STORE)
        self._delete = client.register_script(_DELETE)
        self._draft = client.register_script(_DRAFT)

    def put(
        self, tenant: str, name: str, document: bytes, content_type: str, lexicon: Lexicon, max_count: int
    ) -> LexiconSummary:
        """Store (or replace) the lexicon whole; :class:`LexiconRefused` if it would be the tenant's
        ``max_count + 1``-th, or its current versions would hold more than its bytes."""
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
                keys=[
                    lexicons_key(tenant),
                    lexicon_versions_key(tenant),
                    lexicon_sizes_key(tenant),
                    lexicon_kept_key(tenant),
                ],
                args=[
                    name,
                    max_count,
                    lexicon_version_prefix(tenant, name),
                    document,
                    content_type,
                    json.dumps(lexicon.to_json(), ensure_ascii=False),
                    self._version_ttl_s,
                    json.dumps(summary),
                    time.time(),
                    self._bytes_per_tenant,
                    self._versions_kept,
                ],
            )
        )
        if version == -1:
            raise LexiconRefused(f"a tenant may store at most {max_count} lexicons (TTSQ_LEXICONS_PER_TENANT)")
        if version < 0:
            raise LexiconRefused(
                f"the tenant's lexicons would hold {-2 - version} bytes in the store with this one; at most "
                f"{self._bytes_per_tenant} (TTSQ_LEXICON_BYTES_PER_TENANT): delete or shrink some"
            )
        return LexiconSummary.model_validate({**summary, "version": version})

    def put_draft(self, tenant: str, lexicon: Lexicon) -> LexiconRef:
        """Keep a lexicon checked as a stored one is, for :data:`DRAFT_TTL_S`, as a version that jobs
        may use (:class:`LexiconRef`) without it being one of the tenant's lexicons."""
        version = self._draft(
            keys=[lexicon_versions_key(tenant)],
            args=[
                DRAFT_NAME,
                lexicon_version_prefix(tenant, DRAFT_NAME),
                json.dumps(lexicon.to_json(), ensure_ascii=False),
                DRAFT_TTL_S,
            ],
        )
        return LexiconRef(DRAFT_NAME, int(version))

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
        """The entries of that version; :class:`LexiconVersionGone` once it is no longer kept. The
        user dictionary, which jobs use without naming it, is then read as it is now (empty if it
        was deleted): VOICEVOX clients change it a word at a time, and a job queued behind more than
        ``versions_kept`` words says them as the dictionary has them."""
        raw = self._client.hget(lexicon_version_key(tenant, ref.name, ref.version), "lexicon")
        if raw is None and ref.name == USER_DICTIONARY:
            try:
                current = self.current(tenant, ref.name)
            except LexiconNotFound:
                return Lexicon(USER_DICTIONARY_LANGUAGE, ())
            raw = self._client.hget(lexicon_version_key(tenant, ref.name, current.version), "lexicon")
        if raw is None:
            raise LexiconVersionGone(ref.name, ref.version)
        return Lexicon.from_json(json.loads(raw))

    def delete(self, tenant: str, name: str) -> None:
        """Forget the lexicon; jobs submitted with it still plan with their version while it is kept."""
        deleted = self._delete(
            keys=[lexicons_key(tenant), lexicon_kept_key(tenant)],
            args=[name, lexicon_version_prefix(tenant, name), self._version_ttl_s, time.time()],
        )
        if not int(deleted):
            raise LexiconNotFound(name)
