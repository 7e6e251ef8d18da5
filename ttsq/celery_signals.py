"""Celery signal handlers connected by the process that needs them, when it starts: never by importing
a module (a module imported by the API, a test or Flower would otherwise change what every task sent
or run there does)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from celery.utils.dispatch import Signal

Handler = Callable[..., Any]
"""A signal's receiver: Celery calls it with keyword arguments."""


def connect_once(handlers: Iterable[tuple[Signal, Handler]]) -> None:
    """Connect each receiver to its signal, strongly and once per process however often asked."""
    for signal, handler in handlers:
        signal.connect(handler, weak=False, dispatch_uid=f"ttsq:{handler.__module__}.{handler.__qualname__}")
