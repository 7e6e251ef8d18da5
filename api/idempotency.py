"""``Idempotency-Key``: a retried submission gets the job its first attempt created.

The key is kept per tenant for ``TTSQ_IDEMPOTENCY_TTL_S`` (24 h) with a fingerprint of the request
body. Claiming it is one ``SET NX``: the first request stores the id of the job it is about to
create; a repeat with the same body answers with that job (200), one with another body is refused
(409 ``idempotency_conflict``), so a client bug cannot silently get someone else's result.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Final, cast

import redis
from fastapi import Response

from ttsq.constants import idempotency_key
from ttsq.errors import ServiceError

MAX_KEY_CHARS: Final = 255

ABANDONED_AFTER_S: Final = 30.0
"""A claim older than this whose job does not exist was abandoned (a request that died mid-way)."""

_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0
"""


class IdempotencyConflict(ServiceError, code="idempotency_conflict"):
    """The key was used for another request body, or its first request is still being handled."""


class InvalidIdempotencyKey(ServiceError, code="invalid_idempotency_key"):
    """The header is empty, too long or not printable ASCII."""


def fingerprint(body: object) -> str:
    """A stable digest of a request body (its JSON with sorted keys)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


IN_FLIGHT: Final = "the first request with this Idempotency-Key is still being handled; retry shortly"
"""What a repeat is told while the first request's job or batch does not exist yet."""


def submit_once(
    store: IdempotencyStore,
    tenant: str,
    header: str | None,
    body: object,
    new_id: str,
    exists: Callable[[str], bool],
    submit: Callable[[], None],
) -> str | None:
    """Run ``submit`` (for the new id) unless an earlier request with the same ``Idempotency-Key``
    and body did: returns that request's id to answer with, or None once submitted now. A submission
    that fails gives the key back, so a corrected retry goes through."""
    if header is None:
        submit()
        return None
    key = check_key(header)
    earlier = store.claim(tenant, key, fingerprint(body), new_id, exists)
    if earlier is not None:
        return earlier
    try:
        submit()
    except BaseException:
        store.release(tenant, key)
        raise
    return None


def mark_replayed(response: Response) -> None:
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise InvalidIdempotencyKey(f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} printable ASCII characters")
    return key


class IdempotencyStore:
    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._take_over = client.register_script(_TAKE_OVER)

    def _entry(self, tenant: str, key: str) -> str:
        return idempotency_key(tenant, hashlib.sha256(key.encode("utf-8")).hexdigest())

    def claim(
        self, tenant: str, key: str, body_fingerprint: str, job_id: str, exists: Callable[[str], bool]
    ) -> str | None:
        """Claim ``key`` for a new job ``job_id``: None if claimed now, else the id of the job an
        earlier request with the same body created (IdempotencyConflict if the body differs).

        A claim whose job does not exist ``ABANDONED_AFTER_S`` after it was made was left by a
        request that failed without being able to release it (Redis went down): it is taken over,
        so the retry creates the job instead of being refused for a day."""
        entry = self._entry(tenant, key)
        value = json.dumps({"fingerprint": body_fingerprint, "job_id": job_id, "claimed_at": time.time()})
        if self._redis.set(entry, value, nx=True, ex=self._ttl_s):
            return None
        raw = cast(bytes | None, self._redis.get(entry))
        if raw is None:  # expired between the two calls: claim again
            return self.claim(tenant, key, body_fingerprint, job_id, exists)
        earlier = json.loads(raw)
        if earlier["fingerprint"] != body_fingerprint:
            raise IdempotencyConflict("this Idempotency-Key was already used with a different request body")
        abandoned = time.time() - float(earlier.get("claimed_at", 0)) > ABANDONED_AFTER_S
        if abandoned and not exists(str(earlier["job_id"])) and self._take_over(keys=[entry], args=[raw, value]):
            return None
        return str(earlier["job_id"])

    def release(self, tenant: str, key: str) -> None:
        """Forget a claim whose job was not created (refused or failed), so a retry can create it."""
        self._redis.delete(self._entry(tenant, key))
