"""Long-lived clients the API shares between requests, built once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from celery import Celery

from tts_core import VoiceCatalog
from ttsq.jobs import JobStore
from ttsq.progress import SegmentStore
from ttsq.settings import Settings
from ttsq.storage import ObjectStore


def make_producer(settings: Settings) -> Celery:
    """A Celery client that only sends tasks by name; it never imports the worker or a model."""
    producer = Celery("ttsq")
    producer.config_from_object("celeryconfig")
    producer.conf.update(
        broker_url=settings.redis_url,
        result_backend=settings.redis_url,
        task_default_queue=settings.queue,
        # Fail fast when Redis is down instead of blocking the request for the default retry policy.
        broker_connection_timeout=2,
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2},
    )
    return producer


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
