"""Cluster-wide job figures kept in Redis: jobs finished by status and error code, and histograms of
job latency and time to first audio.

Workers on many hosts finish jobs; any API replica serves these at ``/metrics``, read from Redis, so
the figures hold across hosts and survive workers coming and going (scaled to zero, say). They are
written in the same transaction as the status change that finishes the job, so each job counts once.
Every replica shows the same totals: aggregate them with ``max``, not ``sum``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import redis

from ttsq.constants import FINISHED_STATS_KEY, stats_histogram_key

"""Hash: ``<status>|<code>`` -> jobs (code empty for succeeded and canceled jobs)."""

LATENCY_BUCKETS_S: Final = (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
FIRST_AUDIO_BUCKETS_S: Final = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


@dataclass(frozen=True)
class HistogramSpec:
    """A histogram kept in one Redis hash per label value: a count per bucket, the sum and count."""

    name: str
    buckets: tuple[float, ...]

    def key(self, label: str) -> str:
        return stats_histogram_key(self.name, label)

    def bucket_field(self, value: float) -> str:
        """Non-cumulative bucket of ``value`` (its index; the last is +Inf)."""
        return str(bisect_left(self.buckets, value))


JOB_LATENCY: Final = HistogramSpec("latency", LATENCY_BUCKETS_S)
"""From acceptance to the terminal status, by priority, for jobs that succeeded."""
FIRST_AUDIO: Final = HistogramSpec("first_audio", FIRST_AUDIO_BUCKETS_S)
"""From acceptance to the first segment's audio, by priority."""


def observe(pipe: redis.client.Pipeline, spec: HistogramSpec, label: str, value_s: float) -> None:
    """Queue the commands that add one observation (inside the caller's transaction)."""
    key = spec.key(label)
    pipe.hincrby(key, spec.bucket_field(value_s), 1)
    pipe.hincrbyfloat(key, "sum", value_s)
    pipe.hincrby(key, "count", 1)


def count_finished(pipe: redis.client.Pipeline, status: str, code: str | None) -> None:
    pipe.hincrby(FINISHED_STATS_KEY, f"{status}|{code or ''}", 1)


@dataclass(frozen=True)
class HistogramReading:
    """Cumulative bucket counts as Prometheus wants them, ending with +Inf."""

    buckets: list[tuple[str, float]]
    sum: float


def read_histogram(client: redis.Redis, spec: HistogramSpec, label: str) -> HistogramReading:
    raw = client.hgetall(spec.key(label))
    fields = {(k.decode() if isinstance(k, bytes) else str(k)): float(v) for k, v in raw.items()}
    return cumulative(spec.buckets, fields)


def cumulative(bounds: Sequence[float], fields: dict[str, float]) -> HistogramReading:
    """Per-bucket counts (fields ``"0"``.. ``str(len(bounds))``) to cumulative ``le`` pairs."""
    running = 0.0
    buckets: list[tuple[str, float]] = []
    for index, bound in enumerate([*bounds, math.inf]):
        running += fields.get(str(index), 0.0)
        buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), running))
    return HistogramReading(buckets, fields.get("sum", 0.0))


def read_finished(client: redis.Redis) -> dict[tuple[str, str], float]:
    """(status, code) -> jobs finished so far."""
    counts: dict[tuple[str, str], float] = {}
    for field, value in client.hgetall(FINISHED_STATS_KEY).items():
        text = field.decode() if isinstance(field, bytes) else str(field)
        status, _, code = text.partition("|")
        counts[(status, code)] = float(value)
    return counts
