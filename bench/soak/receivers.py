"""Webhook receivers the soak can drop: ``ttsq webhook-listen``'s receiver (signatures verified) on
a fixed loopback port, closed for a while (the dispatcher's attempts are refused) and opened again
on the same port. Every POST it got is kept as a :class:`~bench.soak.checks.Delivery`."""

from __future__ import annotations

import re
import threading
import time
from typing import Final

from bench.soak.checks import Delivery
from cli.embedded import LOOPBACK
from cli.processes import free_port
from cli.webhook_listen import WebhookListener

_LINE: Final = re.compile(r"^(?P<event>\S+) job=(?P<subject>\S+) status=\S+ webhook-id=(?P<id>\S+) (?P<verdict>.*)$")
"""``cli.webhook_listen.describe``'s line: ``job.succeeded job=<id> status=… webhook-id=msg_… verified``."""


def parse_line(line: str) -> Delivery | None:
    """The delivery a listener's line describes; ``None`` for a body it could not read."""
    found = _LINE.match(line)
    if found is None:
        return None
    return Delivery(found["id"], found["event"], found["subject"], found["verdict"] == "verified")


class SoakReceiver:
    """One receiver, up from its creation until :meth:`drop`, up again after :meth:`start`."""

    def __init__(self, name: str, keys: list[bytes]) -> None:
        self.name = name
        self.port = free_port()
        self.deliveries: list[Delivery] = []
        self.first_seen: dict[str, float] = {}
        """Subject (a job's or a batch's id) → when its first delivery arrived (wall clock)."""
        self.unreadable = 0
        self._keys = keys
        self._lock = threading.Lock()
        self._listener: WebhookListener | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/{self.name}"

    @property
    def up(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        self._listener = WebhookListener(self._keys, LOOPBACK, self.port, echo=self._record).start()

    def drop(self) -> None:
        """Close the port: attempts meanwhile are refused, as with a receiver that went away."""
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    def _record(self, line: str) -> None:
        delivery = parse_line(line)
        with self._lock:
            if delivery is None:
                self.unreadable += 1
            else:
                self.deliveries.append(delivery)
                self.first_seen.setdefault(delivery.subject, time.time())

    def received(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def seen(self) -> dict[str, float]:
        """Subject → when its first delivery arrived (wall clock)."""
        with self._lock:
            return dict(self.first_seen)
