"""Long-lived clients the API shares between requests, built once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from fastapi.concurrency import run_in_threadpool

from api.heavy_work import Drafting, HeavyWork
from api.idempotency import IdempotencyStore
from api.metrics import ApiMetrics
from api.waiting import EventHub
from tts_core.voices.catalog import VoiceCatalog
from ttsq.broker import make_producer
from ttsq.constants import FINISH_BATCH_TASK, MAINTENANCE_QUEUE, consumed_queues, model_queue
from ttsq.lifecycle import Lifecycle
from ttsq.liveness import WorkerLiveness
from ttsq.settings import Settings
from ttsq.stores import Stores

CONNECT_TIMEOUT_S = 2.0
"""A request waits at most this long for a Redis connection: a probe must answer while Redis is down."""


@dataclass
class AppState:
    """Everything a request handler may need besides the request."""

    settings: Settings
    stores: Stores
    catalog: VoiceCatalog
    producer: Celery
    hub: EventHub
    metrics: ApiMetrics
    idempotency: IdempotencyStore
    heavy: HeavyWork
    """Where long texts and big lexicons are read (``api.heavy_work``)."""

    @property
    def liveness(self) -> WorkerLiveness:
        """The synthesis workers' heartbeats, for ``/readyz``."""
        return WorkerLiveness(self.stores.redis, self.settings.queue)

    @property
    def lifecycle(self) -> Lifecycle:
        return self.stores.lifecycle(self.send_finish_batch)

    def send_finish_batch(self, batch_id: str) -> None:
        """A batch's finishing task (its last item canceled through the API)."""
        self.producer.send_task(FINISH_BATCH_TASK, args=[batch_id], queue=MAINTENANCE_QUEUE)

    @classmethod
    def build(cls, settings: Settings, metrics: ApiMetrics) -> AppState:
        """Redis calls are bounded by ``ready_timeout_s``, so a request (and ``/readyz``) answers even
        when Redis hangs; the helper processes for heavy requests start in the background (unless
        ``heavy_processes_at_start`` is off: then with the first long request)."""
        stores = Stores.connect(settings, settings.ready_timeout_s, CONNECT_TIMEOUT_S)
        catalog = VoiceCatalog.discover(settings.voices_dir)
        models = [model_queue(settings.queue, key, i) for key in catalog.model_keys() for i in (True, False)]
        metrics.watch(stores.redis, [*consumed_queues(settings.queue), *models, MAINTENANCE_QUEUE])
        heavy = HeavyWork(Drafting(settings, catalog, stores.lexicons), CONNECT_TIMEOUT_S)
        if settings.heavy_processes_at_start:
            heavy.start()
        return cls(
            settings=settings,
            stores=stores,
            catalog=catalog,
            producer=make_producer(settings),
            hub=EventHub(settings),
            metrics=metrics,
            idempotency=IdempotencyStore(stores.redis, settings.idempotency_ttl_s),
            heavy=heavy,
        )

    async def close(self) -> None:
        await self.hub.close()
        await run_in_threadpool(self.heavy.close)
        self.stores.close()
        self.producer.close()
