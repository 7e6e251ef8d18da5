"""Every store of the service wired from the settings in one place: one Redis client
(``ttsq.redis_clients``, with the caller's socket timeout) behind the job, segment, part, batch,
tenant and quota stores, and the object store. The API's state, the workers' contexts, the sweeper
and ``ttsq keys`` each hold one :class:`Stores`, so a new store or a changed timeout is one edit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import redis

from ttsq.batches import BatchStore
from ttsq.job_store import JobStore
from ttsq.lexicons import LexiconStore
from ttsq.lifecycle import Lifecycle
from ttsq.pacing import SubmitPacer
from ttsq.parts import PartStore, make_part_store
from ttsq.quotas import Quotas
from ttsq.redis_clients import redis_client
from ttsq.segment_store import SegmentStore
from ttsq.settings import Settings
from ttsq.storage import ObjectStore
from ttsq.tenants import TenantStore
from ttsq.voicevox_words import VoicevoxWordStore

WORKER_SOCKET_TIMEOUT_S: Final = 30.0
"""A task's Redis call may wait this long: long enough for a loaded Redis, short enough that a
vanished one is a retried outage rather than a hung thread."""

CONNECT_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class Stores:
    """The stores of one process, sharing one Redis connection pool."""

    settings: Settings
    redis: redis.Redis
    jobs: JobStore
    segments: SegmentStore
    parts: PartStore
    objects: ObjectStore
    batches: BatchStore
    tenants: TenantStore
    quotas: Quotas
    pacer: SubmitPacer
    lexicons: LexiconStore
    voicevox_words: VoicevoxWordStore

    @classmethod
    def connect(
        cls, settings: Settings, socket_timeout_s: float | None, connect_timeout_s: float = CONNECT_TIMEOUT_S
    ) -> Stores:
        """Build them all; nothing is contacted until first use. ``socket_timeout_s`` bounds every Redis
        call (the API answers readiness probes within its own, workers wait longer)."""
        client = redis_client(settings, socket_timeout_s, connect_timeout_s)
        objects = ObjectStore(settings.s3)
        ttl = settings.job_ttl_s
        return cls(
            settings=settings,
            redis=client,
            jobs=JobStore(client, ttl),
            segments=SegmentStore(client, ttl),
            parts=make_part_store(settings, client, objects),
            objects=objects,
            batches=BatchStore(client, ttl),
            tenants=TenantStore(client),
            quotas=Quotas(client),
            pacer=SubmitPacer(client),
            lexicons=LexiconStore(client, ttl, settings.lexicon_versions_kept, settings.lexicon_bytes_per_tenant),
            voicevox_words=VoicevoxWordStore(client),
        )

    def lifecycle(self, send_finish_batch: Callable[[str], None]) -> Lifecycle:
        """Cancel and purge over these stores; ``send_finish_batch`` queues a batch's finishing task
        when a cancel ends its last item."""
        return Lifecycle(self.jobs, self.segments, self.parts, self.objects, send_finish_batch)

    def close(self) -> None:
        self.redis.close()
