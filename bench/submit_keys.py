"""Every submit a bench client sends carries its own ``Idempotency-Key``, as ttsq's other clients'
do (issue 25): a submit whose answer is lost can then be repeated without making a second job.

One request hook on the bench's HTTP clients adds a fresh key to each ``POST /v1/jobs`` and
``POST /v1/batches`` that has none; a bench client that repeats a submit passes its first key
itself. The speech endpoint takes no key (its answer is the audio).
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import httpx

SUBMIT_PATHS: Final = frozenset({"/v1/jobs", "/v1/batches"})
"""The paths whose POST makes a job or a batch."""

KEY_PREFIX: Final = "bench-"


def add_idempotency_key(request: httpx.Request) -> None:
    """The request hook: a fresh key on a submit that has none."""
    if request.method == "POST" and request.url.path in SUBMIT_PATHS and "Idempotency-Key" not in request.headers:
        request.headers["Idempotency-Key"] = f"{KEY_PREFIX}{uuid.uuid4()}"


def bench_client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` (``options`` as its own) whose submits carry an ``Idempotency-Key``."""
    return httpx.Client(event_hooks={"request": [add_idempotency_key]}, **options)
