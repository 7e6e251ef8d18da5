"""Long-lived clients the API shares between requests, built once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from celery import Celery

from tts_core.catalog import VoiceCatalog
from ttsq.broker import make_producer
from ttsq.jobs import JobStore
from ttsq.progress import SegmentStore
from ttsq.settings import Settings
from ttsq.storage import ObjectStore


@dataclass
class AppState:
    """Everything a request handler may need besides the request."""

    settings: Settings
    redis: redis.Redis
    jobs: JobStore
    segments: SegmentStore
    objects: ObjectStore
    catalog: VoiceCatalog
    producer: Celery

    @classmethod
    def build(cls, settings: Settings) -> AppState:
        client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=settings.ready_timeout_s, socket_connect_timeout=2
        )
        return cls(
            settings=settings,
            redis=client,
            jobs=JobStore(client, settings.job_ttl_s),
            segments=SegmentStore(client, settings.job_ttl_s),
            objects=ObjectStore(settings.s3),
            catalog=VoiceCatalog.discover(settings.voices_dir),
            producer=make_producer(settings),
        )

    def close(self) -> None:
        self.redis.close()
        self.producer.close()
