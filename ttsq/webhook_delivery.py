"""One webhook delivery attempt, and when to try again.

An attempt re-checks the receiver's addresses with the SSRF guard (DNS may have changed since the job
was submitted) and connects to the address it checked, with the real name kept in ``Host`` and, for
https, in TLS's SNI and certificate check, so the name cannot be re-resolved to somewhere else in
between. Redirects are not followed (a 3xx could point anywhere). The whole attempt, the name's
lookup and connecting included, has one deadline, so a receiver that trickles its answer a byte at a
time, or never ends its headers, holds the connection no longer than that. 2xx is delivered;
connection errors, timeouts, 408, 429 and 5xx are worth retrying (``Retry-After`` honoured); any
other answer is final.

Of the answer only the status line, the headers (at most httpcore's 100 KiB) and the first
``ANSWER_PREFIX_BYTES`` of the body are read, undecoded (so a compressed answer is never inflated);
then the connection is closed. A receiver answering gigabytes costs a few KiB.

An attempt is a coroutine: a dispatcher runs hundreds at once on one event loop, holding no thread
while a receiver keeps it waiting. The name lookup, which the system resolver only does blocking,
runs in a thread through the ``resolve`` the caller passes (``ttsq.webhook_dispatch`` bounds those).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import httpx

from ttsq.errors import WebhookUrlRefused
from ttsq.webhook_guard import IPAddress, Target, check_url, resolve_allowed

log = logging.getLogger(__name__)

RETRYABLE_STATUSES: Final = frozenset({408, 429})
MAX_RETRY_AFTER_S: Final = 24 * 3600.0
"""A receiver's Retry-After is honoured up to a day, the span of the whole schedule."""
JITTER: Final = 0.2
"""Each scheduled wait is spread by ±20%, so receivers recovering from an outage are not hit by
every queued event at the same second."""
ANSWER_PREFIX_BYTES: Final = 4096
"""Most bytes of an answer's body read (for the debug log); the rest is never read."""
LOGGED_ANSWER_CHARS: Final = 200

Resolve = Callable[[str, int, bool], Awaitable[list[IPAddress]]]
"""Looks a receiver's host up through the SSRF guard: ``(host, port, allow_private)`` → the
addresses, or :class:`WebhookUrlRefused`."""


@dataclass(frozen=True)
class Attempt:
    """What one attempt came to."""

    delivered: bool
    retryable: bool
    status: int | None
    """The receiver's HTTP status; None if it never answered."""
    error: str | None
    retry_after_s: float | None = None


async def resolve_in_thread(host: str, port: int, allow_private: bool) -> list[IPAddress]:
    """:func:`resolve_allowed` in the loop's default thread pool (a tool's one-off attempt)."""
    return await asyncio.to_thread(resolve_allowed, host, port, allow_private)


async def deliver(
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    allow_private: bool,
    connect_timeout_s: float,
    timeout_s: float,
    resolve: Resolve = resolve_in_thread,
) -> Attempt:
    """POST ``body`` to ``url`` once (see the module docstring)."""
    try:
        target = check_url(url)
    except WebhookUrlRefused as e:
        return Attempt(False, False, None, str(e))
    try:
        async with asyncio.timeout(timeout_s):
            address = (await resolve(target.host, target.port, allow_private))[0]
            pinned, extensions = _pinned(url, target, address)
            request_headers = {**headers, "host": _host_header(target), "user-agent": "ttsq-webhooks"}
            status, answer_headers, prefix = await _post(pinned, request_headers, body, extensions, connect_timeout_s)
    except WebhookUrlRefused as e:
        return Attempt(False, False, None, str(e))
    except TimeoutError:
        return Attempt(False, True, None, f"timed out after {timeout_s:g}s ({target.host})")
    except httpx.TimeoutException:
        return Attempt(False, True, None, f"timed out ({target.host})")
    except httpx.HTTPError as e:
        return Attempt(False, True, None, f"could not reach {target.host}:{target.port} ({type(e).__name__})")
    except OSError as e:  # a socket error httpx did not wrap
        return Attempt(False, True, None, f"could not reach {target.host}:{target.port} ({type(e).__name__})")
    if log.isEnabledFor(logging.DEBUG):
        text = prefix[:LOGGED_ANSWER_CHARS].decode("utf-8", "replace")
        log.debug("%s answered %d: %r", target.host, status, text)
    return judge(status, answer_headers.get("retry-after"))


def judge(status: int, retry_after_header: str | None) -> Attempt:
    """What an answer's status (and ``Retry-After``) makes of the attempt."""
    if 200 <= status < 300:
        return Attempt(True, False, status, None)
    retryable = status >= 500 or status in RETRYABLE_STATUSES
    error = f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")
    return Attempt(False, retryable, status, error, retry_after(retry_after_header))


def _pinned(url: str, target: Target, address: IPAddress) -> tuple[str, dict[str, str]]:
    """The URL with the checked address in place of the name, and the SNI name for https."""
    literal = f"[{address}]" if address.version == 6 else str(address)
    pinned = str(httpx.URL(url).copy_with(host=literal.strip("[]"), port=target.port))
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return pinned, extensions


def _host_header(target: Target) -> str:
    default = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == default else f"{host}:{target.port}"


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every attempt: building one loads the CA bundle (milliseconds
    of CPU), too much to repeat for each of hundreds of attempts."""
    return httpx.create_ssl_context()


async def _post(
    url: str, headers: dict[str, str], body: bytes, extensions: dict[str, str], connect_s: float
) -> tuple[int, httpx.Headers, bytes]:
    """The status, headers and at most ``ANSWER_PREFIX_BYTES`` of the body; the connection is closed
    without reading the rest. The caller's deadline bounds the whole of it."""
    # No read timeout of httpx's own: the caller's deadline covers the whole answer, however it trickles.
    timeout = httpx.Timeout(None, connect=connect_s)
    # trust_env off: a proxy from the environment would connect by name and undo the pinning. No
    # connection is kept: one pooled for one name must not carry a request for another.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(
            timeout=timeout, follow_redirects=False, trust_env=False, verify=_tls(), limits=limits
        ) as client,
        client.stream("POST", url, content=body, headers=headers, extensions=extensions) as response,
    ):
        prefix = bytearray()
        async for chunk in response.aiter_raw():
            prefix += chunk[: ANSWER_PREFIX_BYTES - len(prefix)]
            if len(prefix) >= ANSWER_PREFIX_BYTES:
                break
        return response.status_code, response.headers, bytes(prefix)


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (seconds or an HTTP date), capped at a day."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def next_delay(
    attempts_made: int, schedule: list[float], retry_after_s: float | None, rng: random.Random | None = None
) -> float | None:
    """The wait before the next attempt after ``attempts_made`` attempts, or None when the schedule
    is spent (``len(schedule) + 1`` attempts in all). The scheduled wait is jittered; a longer
    Retry-After wins."""
    if attempts_made < 1 or attempts_made > len(schedule):
        return None
    scheduled = schedule[attempts_made - 1]
    jittered = scheduled * (1 + (rng or random).uniform(-JITTER, JITTER))
    return max(jittered, retry_after_s or 0.0, 0.0)
