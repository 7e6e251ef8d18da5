"""The API's ``/metrics``: its own requests and submissions, and the cluster's queues and job figures.

Request latency (by route template, method and status) is measured by
``prometheus-fastapi-instrumentator``; submissions are counted by this process. Queue depth, the age
of each queue's oldest task (the autoscaling signal), jobs finished and the job latency histograms
are read from Redis at each scrape, so they hold for the whole cluster and every replica shows the
same values (aggregate those with ``max``). Labels never carry text or job ids.

Every label value comes from a closed set, whatever a request says: ``/metrics`` is open and a
series is kept for the life of the process, so a label taken from the request as it came (a method
made up, a path with a job id in it) would let anyone grow this process's memory and the scrape
without limit (issue 19: 20,000 made-up methods made 343,072 series). ``method`` is one of
:data:`HTTP_METHODS` or ``other``; ``handler`` is one of the app's route templates or ``none``;
``status`` is a registered HTTP status or its class (``5xx``); ``voice`` and ``priority`` are those
a job was accepted with (the catalog's and the enum's); ``queue`` the configured queues; ``status``
and ``code`` of finished jobs a job status and an error code, at most :data:`MAX_FINISHED_CODES`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import Final

import redis
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator.metrics import Info
from starlette.routing import BaseRoute, Mount

from ttsq import job_stats
from ttsq.broker import ENQUEUED_AT_HEADER
from ttsq.job_record import JobStatus, Priority

log = logging.getLogger(__name__)

HTTP_BUCKETS_S: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
METRICS_PATH: Final = "/metrics"

HTTP_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods kept as they are in the ``method`` label; any other (HTTP allows any token) is ``other``."""
OTHER: Final = "other"
UNMATCHED: Final = "none"
"""The ``handler`` of a request no route template matched (the instrumentator's own word for it)."""
KNOWN_STATUSES: Final = frozenset(str(status.value) for status in HTTPStatus)
MAX_FINISHED_CODES: Final = 100
"""Distinct (status, code) pairs of ``ttsq_jobs_finished`` shown; any more are added to ``other``.
Codes are the error classes' (a few dozen), so this only bounds what a stray write to Redis adds."""
_CODE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
_JOB_STATUSES: Final = frozenset(status.value for status in JobStatus)


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
        for (status, code), count in sorted(fold_finished(job_stats.read_finished(self._redis)).items()):
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


def fold_finished(counts: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Finished-job counts with every label in a closed set: a status that is no job status, a code
    that is not code-shaped, or a pair past the :data:`MAX_FINISHED_CODES` most frequent, is counted
    under ``other``."""
    folded: dict[tuple[str, str], float] = {}
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    for rank, ((status, code), count) in enumerate(ranked):
        known = status in _JOB_STATUSES and (code == "" or _CODE.fullmatch(code) is not None)
        label = (status, code) if known and rank < MAX_FINISHED_CODES else (_fold_job_status(status), OTHER)
        folded[label] = folded.get(label, 0.0) + count
    return folded


def _fold_job_status(status: str) -> str:
    return status if status in _JOB_STATUSES else OTHER


def fold_method(method: str) -> str:
    return method if method in HTTP_METHODS else OTHER


def fold_status(status: str) -> str:
    """A registered status as it is; any other number by its class (``5xx``); anything else ``other``."""
    if status in KNOWN_STATUSES:
        return status
    return f"{status[0]}xx" if len(status) == 3 and status.isdigit() and "1" <= status[0] <= "5" else OTHER


def route_templates(routes: Iterable[BaseRoute], prefix: str = "") -> frozenset[str]:
    """Every handler name a matched route has: its path template, a mount's path joined to those of
    its routes (an opaque mount, such as static files, is its own path). FastAPI's included routers
    give their routes, prefix and all, through ``effective_route_contexts``."""
    found: set[str] = set()
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        members = [getattr(c, "starlette_route", None) or c for c in contexts()] if callable(contexts) else [route]
        for member in members:
            path = getattr(member, "path", None)
            if not isinstance(path, str):
                continue
            if isinstance(member, Mount) and member.routes:
                found |= route_templates(member.routes, prefix + path)
            else:
                found.add(prefix + path)
    return frozenset(found)


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
        self.requests = Histogram(
            "ttsq_http_request_duration_seconds",
            "Duration of HTTP requests in seconds, by route template, method and status (closed sets).",
            ["handler", "method", "status"],
            buckets=HTTP_BUCKETS_S,
            registry=self.registry,
        )
        self._templates: frozenset[str] | None = None
        # The instrumentator names a request's route template, and "none" for no route; but for a
        # path one slash away from a route (/v1/jobs/<anything>/) it gives the path as it came,
        # which is why the handler is checked against the app's templates here.
        self._instrumentator = Instrumentator(
            should_group_status_codes=False,
            should_group_untemplated=True,
            excluded_handlers=[f"^{re.escape(METRICS_PATH)}$"],
            registry=self.registry,
        ).add(self._observe)

    def instrument(self, app: FastAPI) -> None:
        """Measure every request of ``app`` (before it starts)."""
        self._instrumentator.instrument(app)

    def _observe(self, info: Info) -> None:
        templates = self._templates if self._templates is not None else self._read_templates(info.request.app)
        handler = info.modified_handler if info.modified_handler in templates else UNMATCHED
        labels = (handler, fold_method(info.method), fold_status(info.modified_status))
        self.requests.labels(*labels).observe(info.modified_duration)

    def _read_templates(self, app: FastAPI) -> frozenset[str]:
        """The app's route templates, read once the routes are all there (requests come). Metrics never
        break an answer: if reading them fails (FastAPI rebuilds each route's parameters for it, and
        pydantic may warn about one, an error under the test suite), this request counts as unmatched
        and the next one reads them again."""
        try:
            self._templates = route_templates(app.routes)
        except Exception:
            log.warning("could not read the app's route templates; request counted as unmatched", exc_info=True)
            return frozenset()
        return self._templates

    def watch(self, client: redis.Redis, queues: Sequence[str]) -> None:
        """Serve the cluster's queue and job figures from ``client`` at each scrape."""
        self.registry.register(ClusterCollector(client, queues))
