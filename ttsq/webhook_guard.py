"""The SSRF guard of webhook URLs: only http(s), and only hosts whose every address is public.

A job's owner chooses the URL a ttsq worker will POST to, from inside the deployment's network;
without this guard that is a way to reach Redis, the object store, cloud metadata services or
anything else on private addresses. It runs at submit (a clear 422) and again at each delivery,
where the checked address is also the one connected to (``webhook_delivery``), so a DNS answer
that changes in between cannot slip a private address through.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ttsq.errors import RequestRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud instance metadata services (AWS, ECS, AWS IPv6, Alibaba): credentials live there."""

ALLOWED_SCHEMES: Final = {"http": 80, "https": 443}


class WebhookUrlRefused(RequestRefused, code="webhook_url_refused"):
    """A webhook URL ttsq will not send to; the message names the reason."""


@dataclass(frozen=True)
class Target:
    """Where a webhook URL points."""

    scheme: str
    host: str
    port: int


def check_url(url: str) -> Target:
    """The URL's scheme, host and port, or :class:`WebhookUrlRefused` saying what is wrong with it."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise WebhookUrlRefused(f"webhook_url is not a valid URL: {e}") from None
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise WebhookUrlRefused(f"webhook_url must use http or https, not {scheme or 'no scheme'!r}")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlRefused("webhook_url must not carry credentials (user:password@)")
    if not parts.hostname:
        raise WebhookUrlRefused("webhook_url has no host")
    return Target(scheme, parts.hostname, port or ALLOWED_SCHEMES[scheme])


def address_category(address: IPAddress) -> str | None:
    """Why an address is not a public one (``loopback``, ``private``…), or None if it is public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address_category(address.ipv4_mapped)
    checks = (
        (address in METADATA_ADDRESSES, "cloud metadata"),
        (address.is_loopback, "loopback"),
        (address.is_unspecified, "unspecified"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "shared (CGNAT)"),
        (address.is_reserved, "reserved"),
        (address.is_private, "private"),
        (not address.is_global, "non-public"),
    )
    return next((name for refused, name in checks if refused), None)


_SHARED: Final = ipaddress.ip_network("100.64.0.0/10")


def resolve_allowed(host: str, port: int, allow_private: bool) -> list[IPAddress]:
    """Every address ``host`` resolves to, if all may be sent to; else :class:`WebhookUrlRefused`
    naming the first refused address and its category."""
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        addresses = _resolve(host, port)
    if not allow_private:
        for address in addresses:
            category = address_category(address)
            if category is not None:
                raise WebhookUrlRefused(
                    f"webhook_url host {host!r} resolves to {address}, a {category} address; only public "
                    "addresses receive webhooks (TTSQ_WEBHOOK_ALLOW_PRIVATE allows others, for development)"
                )
    return addresses


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise WebhookUrlRefused(f"webhook_url host {host!r} does not resolve: {e}") from None
    unique = dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos)
    if not unique:
        raise WebhookUrlRefused(f"webhook_url host {host!r} does not resolve")
    return list(unique)
