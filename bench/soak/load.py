"""The soak's mixed load, sized for a 2-core machine (about a quarter of its synthesis capacity, so
the queue drains between faults): short interactive jobs at a steady rate, some followed over SSE,
some by long polls, some with a webhook; bulk passages, each with a webhook and an SSE watcher;
speech-endpoint requests; one 1,000-item batch with a webhook; the hostile texts, spread over the
first half; and, after each fault, canary jobs until one succeeds."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from bench.soak.client import Request, follow_poll, follow_sse, new_client, speak, submit
from bench.soak.receivers import SoakReceiver
from bench.soak.texts import Hostile, bulk_text, hostile_texts, short_text

CLIENT_THREADS: Final = 256
"""Requests in flight at most: during a long outage every submit waits in its own thread."""
INTERACTIVE_FORMATS: Final = ("wav", "flac", "opus", "m4a")
"""Formats that record their exact length, so every object can be checked against ``duration_s``."""


@dataclass(frozen=True)
class LoadPlan:
    interactive_every_s: float = 2.0
    bulk_every_s: float = 45.0
    speech_every_s: float = 15.0
    batch_items: int = 1000
    batch_at_s: float = 20.0
    """When the batch is submitted, seconds after the load starts."""


class Load:
    """Every request of the load, sent from a pool of client threads."""

    def __init__(
        self, api_url: str, receivers: dict[str, str], seed: int, japanese_voice: str | None, plan: LoadPlan
    ) -> None:
        self.api_url = api_url
        self.receivers = receivers
        """Receiver name → its URL."""
        self.plan = plan
        self.requests: list[Request] = []
        self._seed = seed
        self._japanese_voice = japanese_voice
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(CLIENT_THREADS, thread_name_prefix="soak-client")
        self._futures: list[Future[None]] = []
        self._stop = threading.Event()
        self.submit_deadline = 0.0
        self.watch_deadline = 0.0

    def start(self, duration_s: float, submit_deadline: float, watch_deadline: float) -> None:
        """Send the load for ``duration_s``; submits retry until ``submit_deadline``, watchers
        follow until ``watch_deadline`` (both monotonic)."""
        self.submit_deadline, self.watch_deadline = submit_deadline, watch_deadline
        started = time.monotonic()
        streams: list[tuple[str, Callable[[random.Random, int], None], float]] = [
            ("interactive", self._interactive, self.plan.interactive_every_s),
            ("bulk", self._bulk, self.plan.bulk_every_s),
            ("speech", self._speech, self.plan.speech_every_s),
        ]
        for name, send, every in streams:
            args = (random.Random(f"{self._seed}-{name}"), send, every, started + duration_s)
            threading.Thread(target=self._stream, args=args, name=f"soak-{name}", daemon=True).start()
        hostile = hostile_texts(random.Random(f"{self._seed}-hostile"), self._japanese_voice)
        at = [(self.plan.batch_at_s, self._batch)] + [
            ((i + 1) * duration_s / (2 * len(hostile)), self._hostile_sender(h)) for i, h in enumerate(hostile)
        ]
        threading.Thread(target=self._at_times, args=(started, at), name="soak-once", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def busy(self) -> int:
        """Requests still being sent or watched."""
        with self._lock:
            return sum(1 for future in self._futures if not future.done())

    def _stream(
        self, rng: random.Random, send: Callable[[random.Random, int], None], every_s: float, until: float
    ) -> None:
        n = 0
        while time.monotonic() < until and not self._stop.is_set():
            self._spawn(send, rng, n)
            n += 1
            self._stop.wait(every_s)

    def _at_times(self, started: float, at: list[tuple[float, Callable[[], None]]]) -> None:
        for offset, send in sorted(at, key=lambda pair: pair[0]):
            if self._stop.wait(max(0.0, started + offset - time.monotonic())):
                return
            self._spawn(send)

    def _spawn(self, send: Callable[..., None], *args: Any) -> None:
        future = self._pool.submit(send, *args)
        with self._lock:
            self._futures.append(future)

    def _add(self, request: Request) -> Request:
        with self._lock:
            self.requests.append(request)
        return request

    def _receiver(self, n: int) -> str:
        names = sorted(self.receivers)
        return names[n % len(names)]

    def _job(self, request: Request, body: dict[str, Any]) -> None:
        if request.receiver is not None:
            body["webhook_url"] = self.receivers[request.receiver]
        with new_client(self.api_url) as client:
            submit(client, request, "/v1/jobs", body, self.submit_deadline)
            if request.job_id is None or request.watcher is None:
                return
            follow = follow_sse if request.watcher == "sse" else follow_poll
            request.saw = follow(client, request.job_id, self.watch_deadline)

    def _interactive(self, rng: random.Random, n: int) -> None:
        watcher = {0: "sse", 2: "poll"}.get(n % 5)
        receiver = self._receiver(n // 4) if n % 4 == 1 else None
        request = self._add(Request("interactive", watcher=watcher, receiver=receiver))
        body = {"text": short_text(rng), "format": INTERACTIVE_FORMATS[n % len(INTERACTIVE_FORMATS)]}
        self._job(request, body)

    def _bulk(self, rng: random.Random, n: int) -> None:
        request = self._add(Request("bulk", watcher="sse", receiver=self._receiver(n)))
        self._job(request, {"text": bulk_text(rng), "format": ("wav", "opus", "flac")[n % 3], "priority": "bulk"})

    def _speech(self, rng: random.Random, n: int) -> None:
        request = self._add(Request("speech"))
        text = short_text(rng) if n % 2 else bulk_text(rng, 200, 400)
        body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"}
        with new_client(self.api_url) as client:
            speak(client, request, body, self.submit_deadline)

    def _batch(self) -> None:
        rng = random.Random(f"{self._seed}-batch")
        request = self._add(Request("batch", receiver=self._receiver(0)))
        body = {
            "items": [{"text": short_text(rng), "ref": f"item-{i}"} for i in range(self.plan.batch_items)],
            "defaults": {"format": "wav"},
            "webhook_url": self.receivers[self._receiver(0)],
        }
        with new_client(self.api_url) as client:
            submit(client, request, "/v1/batches", body, self.submit_deadline)

    def _hostile_sender(self, hostile: Hostile) -> Callable[[], None]:
        def send() -> None:
            request = self._add(Request("hostile", label=hostile.name))
            with new_client(self.api_url) as client:
                if hostile.raw is not None:
                    submit(client, request, "/v1/jobs", hostile.raw, self.submit_deadline, raw=True)
                else:
                    submit(client, request, "/v1/jobs", dict(hostile.body or {}), self.submit_deadline)

        return send

    def canary(self, label: str, deadline: float, receiver: SoakReceiver | None = None) -> float | None:
        """Short interactive jobs, one after another, until one succeeds (and, with ``receiver``, until
        its webhook reached that receiver): the wall time that was seen, or ``None`` if it was not by
        ``deadline`` (monotonic)."""
        rng = random.Random(f"{self._seed}-canary-{label}")
        body: dict[str, Any] = {"text": short_text(rng), "priority": "interactive"}
        if receiver is not None:
            body["webhook_url"] = receiver.url
        with new_client(self.api_url) as client:
            while time.monotonic() < deadline:
                request = self._add(
                    Request("canary", label=label, receiver=None if receiver is None else receiver.name)
                )
                submit(client, request, "/v1/jobs", body, deadline)
                if request.job_id is None:
                    return None
                request.watcher = "poll"
                request.saw = follow_poll(client, request.job_id, deadline)
                if request.saw == "succeeded":
                    return time.time() if receiver is None else _delivered(receiver, request.job_id, deadline)
        return None


def _delivered(receiver: SoakReceiver, job_id: str, deadline: float) -> float | None:
    """When ``receiver`` had an event of ``job_id`` (wall clock), or ``None`` by ``deadline``."""
    while time.monotonic() < deadline:
        if any(d.subject == job_id for d in receiver.received()):
            return time.time()
        time.sleep(0.2)
    return None
