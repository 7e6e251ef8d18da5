"""The webhook dispatcher: takes due events from the schedule and attempts them, hundreds at once,
on one event loop, fairly between tenants and receivers.

It runs in its own thread of the service worker (``workers.webhooks`` starts it beside the Celery
consumer), so the maintenance tasks on that worker's Celery threads never wait behind a receiver,
and a receiver that keeps an attempt waiting holds a coroutine and a socket, not a thread.

**Limits.** At most ``webhook_concurrency`` attempts are in flight in one dispatcher, at most
``webhook_concurrency_per_tenant`` of one tenant, and at most ``webhook_concurrency_per_receiver``
of one tenant to one receiver (``host:port``). Every attempt has one deadline
(``webhook_timeout_s``) covering the name's lookup, connecting, sending and the answer, of which a
few KiB at most are read (``ttsq.webhook_delivery``).

**Fairness.** Filling free slots goes in rounds: each round takes the tenants with a due event
(``ttsq.webhook_schedule``, the longest-waiting first) and starts at most one attempt per tenant,
from its longest-waiting receiver that has a free slot. A tenant at its limit is skipped without
reading its backlog, and so is a receiver at its limit; since a tenant at its limit holds
``webhook_concurrency_per_tenant`` slots, a page of ``SCAN_PAGE`` tenants always reaches an open one
while slots are free (the same for receivers within a tenant). One tenant's thousands of events to a
receiver that never answers take its own slots, and the next tenant's event starts at once.

**Name lookups** block in the system resolver, which cannot be interrupted: they run in a pool of
``DNS_THREADS`` threads, at most ``DNS_PER_TENANT`` of one tenant at a time counted until the lookup
really ends (an attempt that timed out waiting for a slow DNS server still holds its lookup's
place), so one tenant's slow names cannot take every lookup thread.

**Claims.** An event is claimed for :data:`CLAIM_S` (5 s), renewed every second from the
dispatcher's loop while its attempt runs; if its dispatcher dies or freezes, it is due again when
the lease ends, and another dispatcher attempts it (a resumed one finds its outcome overtaken).
Several dispatchers (service worker replicas) may run at once: a claim is atomic, so an event is
attempted by one of them; the limits are each dispatcher's own. Record reads and writes (blocking
Redis calls, presigning links) run in a small pool of their own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import ipaddress
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind

from ttsq import logs, tracing
from ttsq.constants import HEARTBEAT_INTERVAL_S
from ttsq.job_record import WebhookState, utcnow
from ttsq.settings import Settings
from ttsq.webhook_delivery import Attempt, deliver
from ttsq.webhook_events import Event, EventStore, next_state
from ttsq.webhook_guard import IPAddress, resolve_allowed
from ttsq.webhook_schedule import DeliverySchedule, EventKind, EventRef, Lane
from ttsq.webhook_signing import parse_secrets, signed_headers

log = logging.getLogger(__name__)

T = TypeVar("T")
K = TypeVar("K")

SCAN_PAGE: Final = 100
"""Tenants (and one tenant's receivers) read per look at the schedule: more than can be at their
limit at once with the defaults (256 / 32 = 8 tenants, 32 / 8 = 4 receivers)."""

POLL_S: Final = 0.5
"""Longest wait between two looks at the schedule while nothing finishes: a new event waits at most
this long for its first attempt."""

LEASE_MARGIN_S: Final = 60.0
"""A stopping dispatcher waits for its attempts this long past their deadline: room for reading and
writing the records."""

CLAIM_S: Final = 5.0
"""A claim's lease past its last renewal (every :data:`~ttsq.constants.HEARTBEAT_INTERVAL_S`): an
event held by a killed or frozen service worker is attempted by another within seconds, while a
second or two of a busy loop is no death."""

DNS_THREADS: Final = 32
"""Threads doing name lookups (blocking ``getaddrinfo``) for one dispatcher."""

DNS_PER_TENANT: Final = 4
"""Lookups one tenant may have running at once, so its slow names leave the other threads free."""

STORE_THREADS: Final = 8
"""Threads for Redis and presigning (short calls: reading a record, writing an outcome, claiming)."""

ERROR_PAUSE_S: Final = 1.0
"""Wait after a look at the schedule failed (Redis unreachable) before the next."""


@dataclass(frozen=True)
class Limits:
    """Attempts one dispatcher runs at once: in all, per tenant, per tenant and receiver."""

    total: int
    per_tenant: int
    per_receiver: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            settings.webhook_concurrency,
            settings.webhook_concurrency_per_tenant,
            settings.webhook_concurrency_per_receiver,
        )


class Dispatcher:
    """Claims due events and attempts them under :class:`Limits` (see the module docstring)."""

    def __init__(self, settings: Settings, schedule: DeliverySchedule, events: EventStore) -> None:
        self._settings = settings
        self._schedule = schedule
        self._events = events
        self._limits = Limits.of(settings)
        self._stop_wait_s = settings.webhook_timeout_s + LEASE_MARGIN_S
        self._claims: dict[EventRef, tuple[Lane, float]] = {}
        """The events this dispatcher attempts now: their lane and the lease end their claim holds."""
        self._in_flight: Counter[Lane] = Counter()
        self._per_tenant: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._dns_permits: dict[str, asyncio.Semaphore] = {}
        self._store_pool = concurrent.futures.ThreadPoolExecutor(STORE_THREADS, "webhook-store")
        self._dns_pool = concurrent.futures.ThreadPoolExecutor(DNS_THREADS, "webhook-dns")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._wake: asyncio.Event | None = None

    @property
    def in_flight(self) -> int:
        return sum(self._per_tenant.values())

    async def run(self) -> None:
        """Dispatch until :meth:`stop`; then let the attempts in flight end (each within its deadline)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        log.info("webhook dispatcher running: %s", self._limits)
        renewing = asyncio.create_task(self._renew_claims())
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                try:
                    await self._fill()
                except Exception:
                    log.exception("webhook dispatcher: could not read the schedule; trying again")
                    await asyncio.sleep(ERROR_PAUSE_S)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(POLL_S):
                        await self._wake.wait()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=self._stop_wait_s)
        finally:
            renewing.cancel()
            for task in self._tasks:
                task.cancel()  # its event stays claimed and is due again when the lease ends
            self._store_pool.shutdown(wait=False, cancel_futures=True)
            self._dns_pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Claim nothing more and end :meth:`run` once the attempts in flight are done; from any thread."""
        self._stopping.set()
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already
                self._loop.call_soon_threadsafe(self._wake.set)

    async def _fill(self) -> None:
        """Start attempts while slots are free, one per tenant per round (see the module docstring)."""
        while self.in_flight < self._limits.total and not self._stopping.is_set():
            now = time.time()
            started = 0
            for tenant in await self._io(self._schedule.due_tenants, now, SCAN_PAGE):
                if self.in_flight >= self._limits.total:
                    return
                if self._per_tenant[tenant] < self._limits.per_tenant and await self._start_one(tenant, now):
                    started += 1
            if not started:
                return

    async def _start_one(self, tenant: str, now: float) -> bool:
        """Claim and start the event of the tenant's longest-waiting receiver with a free slot."""
        for receiver in await self._io(self._schedule.due_receivers, tenant, now, SCAN_PAGE):
            lane = Lane(tenant, receiver)
            if self._in_flight[lane] >= self._limits.per_receiver:
                continue
            ref = await self._io(self._schedule.claim, lane, now, now + CLAIM_S)
            if ref is not None:
                self._claims[ref] = (lane, now + CLAIM_S)
                self._in_flight[lane] += 1
                self._per_tenant[tenant] += 1
                task = asyncio.create_task(self._attempt(lane, ref))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return True
        return False

    async def _attempt(self, lane: Lane, ref: EventRef) -> None:
        """One attempt at a claimed event, its outcome written and the event placed again or removed.
        Whatever goes wrong leaves the event claimed: it is due again when the lease ends. Its log
        lines name the job (a job's event) and the tenant (``ttsq.logs``)."""
        with logs.job_context(ref.id if ref.kind is EventKind.JOB else None, lane.tenant):
            try:
                await self._run_attempt(lane, ref)
            except Exception:
                log.exception("%s: webhook attempt failed; the event is due again when its claim ends", ref)
            finally:
                self._claims.pop(ref, None)
                _release(self._in_flight, lane)
                _release(self._per_tenant, lane.tenant)
                if self._wake is not None:
                    self._wake.set()

    async def _renew_claims(self) -> None:
        """Every second, move the lease of each event in flight on, so that only a dispatcher that
        stopped (killed, frozen, cut off) lets its events come due again."""
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            claims = [(ref, lane, held) for ref, (lane, held) in self._claims.items()]
            until = time.time() + CLAIM_S
            try:
                renewed = await self._io(self._schedule.renew, claims, until)
            except Exception as e:  # an outage: the next round tries again
                log.warning("webhook claims not renewed: %s", e)
                continue
            for (ref, lane, _), held in zip(claims, renewed, strict=True):
                if held and ref in self._claims:
                    self._claims[ref] = (lane, until)

    async def _run_attempt(self, lane: Lane, ref: EventRef) -> None:
        event = await self._io(self._events.load, ref)
        if event is None:
            log.warning("%s has no record (expired); dropping its webhook", ref)
            await self._io(self._schedule.remove, ref, lane)
            return
        hook = event.hook
        if hook is None or event.url is None or hook.state is not WebhookState.PENDING:
            await self._io(self._schedule.remove, ref, lane)
            return
        if event.lane != lane:  # scheduled under another lane than its URL's: move it there
            await self._io(self._schedule.remove, ref, lane)
            await self._io(self._schedule.place, ref, event.lane, time.time())
            return
        if hook.next_attempt_at is not None and hook.next_attempt_at.timestamp() > time.time():
            await self._io(self._schedule.place, ref, lane, hook.next_attempt_at.timestamp())
            return
        outcome = await self._traced_delivery(event, lane.tenant, hook.attempts + 1)
        changes = next_state(hook.attempts, outcome, self._settings.webhook_retry_schedule_s, utcnow())
        if not await self._io(self._events.save, event, hook.attempts, changes):
            log.info("%s: webhook attempt %d overtaken by another; leaving the event to it", ref, hook.attempts + 1)
            return
        following = changes["next_attempt_at"]
        if following is None:
            await self._io(self._schedule.remove, ref, lane)
        else:
            await self._io(self._schedule.place, ref, lane, following.timestamp())
        state: WebhookState = changes["state"]
        log.info("%s: webhook attempt %d: %s (status %s)", ref, hook.attempts + 1, state.value, outcome.status)

    async def _traced_delivery(self, event: Event, tenant: str, attempt: int) -> Attempt:
        """One attempt as a span of its job's trace (``ttsq.webhook``): its number, the receiver's
        host (never the whole URL, whose query may hold a token) and the status it answered."""
        attributes: dict[str, str | int] = {
            "ttsq.webhook.event": event.hook.event if event.hook is not None else "",
            "ttsq.webhook.event_id": event.event_id,
            "ttsq.webhook.attempt": attempt,
            "ttsq.tenant.id": tenant,
            "server.address": urlsplit(event.url or "").hostname or "",
        }
        with tracing.span("ttsq.webhook", tracing.context_of(event.traceparent), SpanKind.CLIENT, attributes) as span:
            outcome = await self._deliver(event, tenant)
            span.set_attribute("ttsq.webhook.delivered", outcome.delivered)
            if outcome.status is not None:
                span.set_attribute("http.response.status_code", outcome.status)
            return outcome

    async def _deliver(self, event: Event, tenant: str) -> Attempt:
        settings = self._settings
        assert event.url is not None
        if settings.webhook_secret is None:
            return Attempt(False, False, None, "the webhook worker has no TTSQ_WEBHOOK_SECRET", None)
        secrets = parse_secrets(settings.webhook_secret.get_secret_value())
        body = await self._io(event.body)
        headers = signed_headers(secrets, event.event_id, int(time.time()), body)
        return await deliver(
            event.url,
            headers,
            body,
            allow_private=settings.webhook_allow_private,
            connect_timeout_s=settings.webhook_connect_timeout_s,
            timeout_s=settings.webhook_timeout_s,
            resolve=functools.partial(self._resolve, tenant),
        )

    async def _resolve(self, tenant: str, host: str, port: int, allow_private: bool) -> list[IPAddress]:
        """The guard's lookup in the lookup pool, within the tenant's share of it (module docstring);
        an address literal needs no lookup."""
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(host.strip("[]"))
            return resolve_allowed(host, port, allow_private)
        permits = self._dns_permits.setdefault(tenant, asyncio.Semaphore(DNS_PER_TENANT))
        await permits.acquire()
        lookup = self._dns_pool.submit(resolve_allowed, host, port, allow_private)
        loop = asyncio.get_running_loop()

        def release(_: object) -> None:  # when the lookup really ends, not when its waiter gives up
            with contextlib.suppress(RuntimeError):  # the loop ended already
                loop.call_soon_threadsafe(permits.release)

        lookup.add_done_callback(release)
        return await asyncio.wrap_future(lookup)

    async def _io(self, call: Callable[..., T], *args: object) -> T:
        """A blocking store call, in the store pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._store_pool, functools.partial(call, *args))


def _release(counter: Counter[K], key: K) -> None:
    """One slot of ``key`` free again; a key at zero leaves, so the counters never grow for ever."""
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


class DispatcherThread:
    """A :class:`Dispatcher` on its own event loop in its own thread, as the service worker runs it."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._thread = threading.Thread(target=self._main, name="webhook-dispatcher", daemon=True)

    def start(self) -> DispatcherThread:
        self._thread.start()
        return self

    def _main(self) -> None:
        asyncio.run(self.dispatcher.run())

    def stop(self, timeout_s: float) -> None:
        """Stop claiming; wait up to ``timeout_s`` for the attempts in flight to end."""
        self.dispatcher.stop()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("webhook dispatcher still busy after %.0fs; its claimed events come back when their leases end",
                        timeout_s)  # fmt: skip
