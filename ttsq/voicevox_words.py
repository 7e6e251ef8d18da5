"""A tenant's VOICEVOX user dictionary words in Redis, by uuid, as JSON.

The words are the VOICEVOX API's view; what jobs use is the tenant's ``userdict`` lexicon, rewritten
whole from the words after each change. A change and that rewrite happen under one per-tenant lock,
so two concurrent changes both land and the lexicon is always made from the words as last written
(without it, two POSTs could each rewrite the lexicon from a list missing the other's word).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import redis

from ttsq.constants import voicevox_words_key, voicevox_words_lock_key
from ttsq.errors import StoreUnavailable

LOCK_TIMEOUT_S: Final = 30.0
"""A lock older than this is free again (its holder died mid-change)."""
LOCK_WAIT_S: Final = 10.0
"""The longest a change waits for another of the same tenant before giving up."""

Words = dict[str, dict[str, object]]


class VoicevoxWordStore:
    """Words per tenant: read them all, or change them under the tenant's lock."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def words(self, tenant: str) -> Words:
        raw: dict[bytes, bytes] = self._client.hgetall(voicevox_words_key(tenant))  # type: ignore[assignment]
        return {key.decode(): json.loads(value) for key, value in sorted(raw.items())}

    @contextmanager
    def change(self, tenant: str) -> Iterator[Words]:
        """The tenant's words to change in place, under its lock; written back whole when the block
        ends without an exception (an exception leaves them as they were)."""
        lock = self._client.lock(voicevox_words_lock_key(tenant), timeout=LOCK_TIMEOUT_S, blocking_timeout=LOCK_WAIT_S)
        if not lock.acquire():
            raise StoreUnavailable("another change to this tenant's user dictionary is taking too long")
        try:
            words = self.words(tenant)
            yield words
            key = voicevox_words_key(tenant)
            with self._client.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                if words:
                    pipe.hset(key, mapping={k: json.dumps(v, ensure_ascii=False) for k, v in words.items()})
                pipe.execute()
        finally:
            lock.release()
