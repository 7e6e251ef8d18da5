"""``Idempotency-Key``: a retried submission gets the job its first attempt created.

The key is kept per tenant for ``TTSQ_IDEMPOTENCY_TTL_S`` (24 h) with a fingerprint of the request
body. Claiming it is one ``SET NX``: the first request stores the id of the job it is about to
create, and marks the claim done once the job is stored and queued; a repeat with the same body
answers with that job (200), one with another body is refused (409 ``idempotency_conflict``), so a
client bug cannot silently get someone else's result.

A repeat that comes while the first request is still being handled (concurrent retries, a client
that timed out and tried again) waits for it up to :data:`IN_FLIGHT_WAIT_S`, polling the claim: it
then replays the job, or, if the first request failed and gave the key back, makes the job itself;
past the wait it is answered ``409 idempotency_in_flight`` with ``Retry-After``, never
``idempotency_conflict``, which means a different body. The claim lives in Redis, so this holds
across API processes.

A first request that failed after a write that may have been applied (its answer lost; its 503
names the job) keeps its claim, marked ``unsettled``: a repeat then looks the job up at once, and
replays it if it exists or makes it if not, so a retry never makes a second job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast

import redis
from fastapi import Response

from ttsq.constants import idempotency_key
from ttsq.errors import IdempotencyConflict, IdempotencyInFlight, InvalidIdempotencyKey, TransientError

MAX_KEY_CHARS: Final = 255

log = logging.getLogger(__name__)

ABANDONED_AFTER_S: Final = 30.0
"""A claim older than this whose job does not exist was abandoned (a request that died mid-way);
one whose job exists was finished by a request that could not mark it done."""
IN_FLIGHT_WAIT_S: Final = 2.0
"""How long a repeat waits for the first request to finish: a submission takes milliseconds, so
this covers a loaded API while bounding the thread a waiting repeat holds."""
IN_FLIGHT_POLL_S: Final = 0.05
IN_FLIGHT_RETRY_AFTER_S: Final = 1
"""The ``Retry-After`` of ``409 idempotency_in_flight``."""

_TAKE_OVER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0
"""

_IF_MINE = """
local raw = redis.call('GET', KEYS[1])
if not raw or cjson.decode(raw)['job_id'] ~= ARGV[1] then return 0 end
if ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
else
  local claim = cjson.decode(raw)
  claim[ARGV[2]] = true
  redis.call('SET', KEYS[1], cjson.encode(claim), 'KEEPTTL')
end
return 1
"""
"""Release a claim, or mark it ``done`` or ``unsettled``, only while it is still this request's: one
taken over meanwhile is another request's, and must not be deleted by the request that lost it."""


def fingerprint(body: object) -> str:
    """A stable digest of a request body (its JSON with sorted keys)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
    and body did: returns that request's id to answer with, or None once submitted now. A repeat
    of a request still in flight waits for it (module docstring). A submission that fails gives the
    key back, so a corrected retry goes through, unless what it wrote may exist (see the module)."""
    if header is None:
        submit()
        return None
    key = check_key(header)
    digest = fingerprint(body)
    deadline = time.monotonic() + IN_FLIGHT_WAIT_S
    while (earlier := store.claim(tenant, key, digest, new_id, exists)) is not None:
        if earlier.done:
            return earlier.job_id
        if time.monotonic() >= deadline:
            raise IdempotencyInFlight(IN_FLIGHT_WAIT_S, IN_FLIGHT_RETRY_AFTER_S)
        time.sleep(IN_FLIGHT_POLL_S)
    try:
        submit()
    except BaseException as e:
        _settle_failed(store, tenant, key, new_id, e)
        raise
    try:
        store.mark_done(tenant, key, new_id)
    except redis.RedisError as e:  # the job is made: answer 202; repeats replay it once the claim is old
        log.warning("job or batch %s: could not mark its Idempotency-Key done (%s)", new_id, type(e).__name__)
    return None


def _settle_failed(store: IdempotencyStore, tenant: str, key: str, new_id: str, error: BaseException) -> None:
    """Give the key back after a failed submission, or mark it unsettled if the job may exist. If
    Redis cannot be told (it is the outage), the claim stays as it is: a repeat waits for it to be
    taken for abandoned (``ABANDONED_AFTER_S``), then looks the job up. The submission's own error
    is what the client gets, either way."""
    try:
        if isinstance(error, TransientError) and error.unconfirmed is not None:
            store.mark_unsettled(tenant, key, new_id)
        else:
            store.release(tenant, key, new_id)
    except redis.RedisError as e:
        log.warning("job or batch %s: could not settle its Idempotency-Key (%s)", new_id, type(e).__name__)


def mark_replayed(response: Response) -> None:
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise InvalidIdempotencyKey(f"Idempotency-Key must be 1 to {MAX_KEY_CHARS} printable ASCII characters")
    return key


@dataclass(frozen=True)
class Claimed:
    """An earlier request's claim of a key: the id it made or is making, and whether it is done."""

    job_id: str
    done: bool


class IdempotencyStore:
    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s
        self._take_over = client.register_script(_TAKE_OVER)
        self._if_mine = client.register_script(_IF_MINE)

    def _entry(self, tenant: str, key: str) -> str:
        return idempotency_key(tenant, hashlib.sha256(key.encode("utf-8")).hexdigest())

    def claim(
        self, tenant: str, key: str, body_fingerprint: str, job_id: str, exists: Callable[[str], bool]
    ) -> Claimed | None:
        """Claim ``key`` for a new job ``job_id``: None if claimed now, else the earlier request's
        claim with the same body (IdempotencyConflict if the body differs).

        A claim older than ``ABANDONED_AFTER_S``, or marked unsettled, is judged by its job: if that
        does not exist, the request failed without being able to release it (Redis went down) or
        its write was not applied, and the claim is taken over, so the retry creates the job instead
        of being refused for a day; if it exists, the request made it and could not mark it done (or
        lost the answer to its write), and it is replayed."""
        entry = self._entry(tenant, key)
        value = json.dumps({"fingerprint": body_fingerprint, "job_id": job_id, "claimed_at": time.time()})
        if self._redis.set(entry, value, nx=True, ex=self._ttl_s):
            return None
        raw = cast(bytes | None, self._redis.get(entry))
        if raw is None:  # expired or released between the two calls: claim again
            return self.claim(tenant, key, body_fingerprint, job_id, exists)
        earlier = json.loads(raw)
        if earlier["fingerprint"] != body_fingerprint:
            raise IdempotencyConflict("this Idempotency-Key was already used with a different request body")
        claimed = Claimed(str(earlier["job_id"]), bool(earlier.get("done")))
        young = time.time() - float(earlier.get("claimed_at", 0)) <= ABANDONED_AFTER_S
        if claimed.done or (young and not earlier.get("unsettled")):
            return claimed
        if exists(claimed.job_id):
            return Claimed(claimed.job_id, done=True)
        if self._take_over(keys=[entry], args=[raw, value]):
            return None
        return self.claim(tenant, key, body_fingerprint, job_id, exists)  # taken over by another repeat

    def mark_done(self, tenant: str, key: str, job_id: str) -> None:
        """The claim's job is stored and queued: repeats replay it from now on."""
        self._if_mine(keys=[self._entry(tenant, key)], args=[job_id, "done"])

    def mark_unsettled(self, tenant: str, key: str, job_id: str) -> None:
        """The claim's request failed after a write that may have been applied: a repeat looks its
        job up at once instead of waiting for the claim to grow old."""
        self._if_mine(keys=[self._entry(tenant, key)], args=[job_id, "unsettled"])

    def release(self, tenant: str, key: str, job_id: str) -> None:
        """Forget a claim whose job was not created (refused or failed), so a retry can create it;
        a claim taken over by another request meanwhile is left alone."""
        self._if_mine(keys=[self._entry(tenant, key)], args=[job_id, "release"])
