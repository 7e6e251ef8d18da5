"""The API's ``/metrics``: its own requests and submissions, and the cluster's queues and job figures.

Request latency (by route template, method and status) is measured by
``prometheus-fastapi-instrumentator``; submissions are counted by this process. Queue depth, the age
of each queue's oldest task (the autoscaling signal), jobs finished and the job latency histograms
are read from Redis at each scrape, so they hold for the whole cluster and every replica shows the
same values (aggregate those with ``max``). Labels never carry text or job ids.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Final

import redis
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator import metrics as http_metrics

from ttsq import job_stats
from ttsq.broker import ENQUEUED_AT_HEADER
from ttsq.jobs import Priority

log = logging.getLogger(__name__)

HTTP_BUCKETS_S: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
METRICS_PATH: Final = "/metrics"


class ClusterCollector(Collector):
    """Reads queue lengths, oldest-task ages and job figures from Redis when scraped."""

    def __init__(self, client: redis.Redis, queues: Sequence[str]) -> None:
        self._redis = client
        self._queues = list(queues)

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("ttsq_redis_up", "1 if Redis answered this scrape; the figures below need it.")
        try:
            families = self._read()
        except redis.RedisError as e:
            log.warning("metrics: Redis unreachable (%s)", type(e).__name__)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *families]

    def _read(self) -> list[Metric]:
        depth = GaugeMetricFamily("ttsq_queue_depth", "Tasks waiting in each queue.", labels=["queue"])
        age = GaugeMetricFamily(
            "ttsq_queue_oldest_age_seconds",
            "Age of the oldest task waiting in each queue (0 when empty): the autoscaling signal.",
            labels=["queue"],
        )
        with self._redis.pipeline(transaction=False) as pipe:
            for queue in self._queues:
                pipe.llen(queue)
                pipe.lindex(queue, -1)  # producers LPUSH, workers BRPOP: the oldest is at the tail
            replies = pipe.execute()
        now = time.time()
        for index, queue in enumerate(self._queues):
            depth.add_metric([queue], float(replies[2 * index]))
            age.add_metric([queue], oldest_age_s(replies[2 * index + 1], now))
        finished = CounterMetricFamily(
            "ttsq_jobs_finished",
            "Jobs that reached a terminal status, by status and error code.",
            labels=["status", "code"],
        )
        for (status, code), count in sorted(job_stats.read_finished(self._redis).items()):
            finished.add_metric([status, code], count)
        return [depth, age, finished, *self._histograms()]

    def _histograms(self) -> list[Metric]:
        families: list[Metric] = []
        for spec, name, doc in (
            (job_stats.JOB_LATENCY, "ttsq_job_latency_seconds", "From acceptance to success, by priority."),
            (job_stats.FIRST_AUDIO, "ttsq_time_to_first_audio_seconds", "From acceptance to the first audio."),
        ):
            family = HistogramMetricFamily(name, doc, labels=["priority"])
            for priority in Priority:
                reading = job_stats.read_histogram(self._redis, spec, priority.value)
                family.add_metric([priority.value], reading.buckets, reading.sum)
            families.append(family)
        return families


def oldest_age_s(raw_message: bytes | str | None, now: float) -> float:
    """Seconds since the message at a queue's tail was sent (0 if none, or if it carries no stamp)."""
    if raw_message is None:
        return 0.0
    try:
        headers = json.loads(raw_message).get("headers") or {}
        sent = float(headers[ENQUEUED_AT_HEADER])
    except (ValueError, TypeError, KeyError, AttributeError):
        return 0.0
    return max(0.0, now - sent)


class ApiMetrics:
    """One registry per app (tests build several apps in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.submitted = Counter(
            "ttsq_jobs_submitted", "Jobs accepted by this API process.", ["voice", "priority"], registry=self.registry
        )
        self._instrumentator = Instrumentator(
            should_group_status_codes=False, excluded_handlers=[METRICS_PATH], registry=self.registry
        ).add(
            http_metrics.latency(
                metric_namespace="ttsq",
                should_include_status=True,
                buckets=HTTP_BUCKETS_S,
                registry=self.registry,
            )
        )

    def instrument(self, app: FastAPI) -> None:
        """Measure every request of ``app`` (before it starts)."""
        self._instrumentator.instrument(app)

    def watch(self, client: redis.Redis, queues: Sequence[str]) -> None:
        """Serve the cluster's queue and job figures from ``client`` at each scrape."""
        self.registry.register(ClusterCollector(client, queues))
