"""Long-lived clients the API shares between requests, built once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from celery import Celery

from api.idempotency import IdempotencyStore
from api.metrics import ApiMetrics
from api.waiting import EventHub
from tts_core.catalog import VoiceCatalog
from ttsq.batches import BatchStore
from ttsq.broker import make_producer
from ttsq.constants import FINISH_BATCH_TASK, MAINTENANCE_QUEUE, consumed_queues
from ttsq.jobs import JobStore
from ttsq.lifecycle import Lifecycle
from ttsq.parts import PartStore, make_part_store
from ttsq.progress import SegmentStore
from ttsq.quotas import Quotas
from ttsq.settings import Settings
from ttsq.storage import ObjectStore
from ttsq.tenants import TenantStore


@dataclass
class AppState:
    """Everything a request handler may need besides the request."""

    settings: Settings
    redis: redis.Redis
    jobs: JobStore
    segments: SegmentStore
    objects: ObjectStore
    parts: PartStore
    catalog: VoiceCatalog
    producer: Celery
    hub: EventHub
    metrics: ApiMetrics
    tenants: TenantStore
    quotas: Quotas
    idempotency: IdempotencyStore
    batches: BatchStore

    @property
    def lifecycle(self) -> Lifecycle:
        return Lifecycle(self.jobs, self.segments, self.parts, self.objects, self.send_finish_batch)

    def send_finish_batch(self, batch_id: str) -> None:
        """A batch's finishing task (its last item canceled through the API)."""
        self.producer.send_task(FINISH_BATCH_TASK, args=[batch_id], queue=MAINTENANCE_QUEUE)

    @classmethod
    def build(cls, settings: Settings, metrics: ApiMetrics) -> AppState:
        client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=settings.ready_timeout_s, socket_connect_timeout=2
        )
        objects = ObjectStore(settings.s3)
        metrics.watch(client, [*consumed_queues(settings.queue), MAINTENANCE_QUEUE])
        return cls(
            settings=settings,
            redis=client,
            jobs=JobStore(client, settings.job_ttl_s),
            segments=SegmentStore(client, settings.job_ttl_s),
            objects=objects,
            parts=make_part_store(settings, client, objects),
            catalog=VoiceCatalog.discover(settings.voices_dir),
            producer=make_producer(settings),
            hub=EventHub(settings.redis_url),
            metrics=metrics,
            tenants=TenantStore(client),
            quotas=Quotas(client),
            idempotency=IdempotencyStore(client, settings.idempotency_ttl_s),
            batches=BatchStore(client, settings.job_ttl_s),
        )

    async def close(self) -> None:
        await self.hub.close()
        self.redis.close()
        self.producer.close()
