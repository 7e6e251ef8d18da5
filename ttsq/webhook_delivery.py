"""One webhook delivery attempt, and when to try again.

An attempt re-checks the receiver's addresses with the SSRF guard (DNS may have changed since the job
was submitted) and connects to the address it checked, with the real name kept in ``Host`` and, for
https, in TLS's SNI and certificate check, so the name cannot be re-resolved to somewhere else in
between. Redirects are not followed (a 3xx could point anywhere). The whole attempt, connecting
included, has one deadline. 2xx is delivered; connection errors, timeouts, 408, 429 and 5xx are
worth retrying (``Retry-After`` honoured); any other answer is final.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import random
import time
from dataclasses import dataclass
from typing import Final

import httpx

from ttsq.webhook_guard import Target, WebhookUrlRefused, check_url, resolve_allowed

RETRYABLE_STATUSES: Final = frozenset({408, 429})
MAX_RETRY_AFTER_S: Final = 24 * 3600.0
"""A receiver's Retry-After is honoured up to a day, the span of the whole schedule."""
JITTER: Final = 0.2
"""Each scheduled wait is spread by ±20%, so receivers recovering from an outage are not hit by
every queued event at the same second."""


@dataclass(frozen=True)
class Attempt:
    """What one attempt came to."""

    delivered: bool
    retryable: bool
    status: int | None
    """The receiver's HTTP status; None if it never answered."""
    error: str | None
    retry_after_s: float | None = None


def deliver(
    url: str, headers: dict[str, str], body: bytes, *, allow_private: bool, connect_timeout_s: float, timeout_s: float
) -> Attempt:
    """POST ``body`` to ``url`` once (see the module docstring)."""
    try:
        target = check_url(url)
        address = resolve_allowed(target.host, target.port, allow_private)[0]
    except WebhookUrlRefused as e:
        return Attempt(False, False, None, str(e))
    pinned, extensions = _pinned(url, target, address)
    request_headers = {**headers, "host": _host_header(target), "user-agent": "ttsq-webhooks"}
    try:
        response = asyncio.run(_post(pinned, request_headers, body, extensions, connect_timeout_s, timeout_s))
    except TimeoutError:
        return Attempt(False, True, None, f"timed out after {timeout_s:g}s ({target.host})")
    except httpx.TimeoutException:
        return Attempt(False, True, None, f"timed out ({target.host})")
    except httpx.HTTPError as e:
        return Attempt(False, True, None, f"could not reach {target.host}:{target.port} ({type(e).__name__})")
    return _judge(response)


def _judge(response: httpx.Response) -> Attempt:
    status = response.status_code
    if 200 <= status < 300:
        return Attempt(True, False, status, None)
    retryable = status >= 500 or status in RETRYABLE_STATUSES
    error = f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")
    return Attempt(False, retryable, status, error, retry_after(response.headers.get("retry-after")))


def _pinned(
    url: str, target: Target, address: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> tuple[str, dict[str, str]]:
    """The URL with the checked address in place of the name, and the SNI name for https."""
    literal = f"[{address}]" if address.version == 6 else str(address)
    pinned = str(httpx.URL(url).copy_with(host=literal.strip("[]"), port=target.port))
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return pinned, extensions


def _host_header(target: Target) -> str:
    default = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == default else f"{host}:{target.port}"


async def _post(
    url: str, headers: dict[str, str], body: bytes, extensions: dict[str, str], connect_s: float, total_s: float
) -> httpx.Response:
    timeout = httpx.Timeout(total_s, connect=connect_s)
    # trust_env off: a proxy from the environment would connect by name and undo the pinning.
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        async with asyncio.timeout(total_s):
            return await client.post(url, content=body, headers=headers, extensions=extensions)


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
