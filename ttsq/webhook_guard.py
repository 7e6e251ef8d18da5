"""The SSRF guard of webhook URLs: only http(s), and only hosts whose every address is public.

A job's owner chooses the URL a ttsq worker will POST to, from inside the deployment's network;
without this guard that is a way to reach Redis, the object store, cloud metadata services or
anything else on private addresses. It runs at submit (a clear 422) and again at each delivery,
where the checked address is also the one connected to (``webhook_delivery``), so a DNS answer
that changes in between cannot slip a private address through.

Every spelling of an address is judged by the address it names: IPv4 hosts in octal, hex, decimal
or short forms (``0x7f.1``) and IDNA names are resolved by the system's resolver, and the rules apply
to what it returns; an IPv6 address that carries an IPv4 one (IPv4-mapped, -compatible and
-translated, NAT64, 6to4, Teredo, ISATAP) is refused for what the IPv4 address is; a zone id
(``fe80::1%25eth0``) changes nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from ttsq.errors import WebhookUrlRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud instance metadata services (AWS, ECS, AWS IPv6, Alibaba): credentials live there."""

ALLOWED_SCHEMES: Final = {"http": 80, "https": 443}


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
    """Why an address is not a public one (``loopback``, ``private``…), or None if it is public.

    An IPv6 address that carries an IPv4 one (:func:`embedded_ipv4`) is refused for what that IPv4
    address is: ``2002:7f00:1::`` is loopback."""
    refusal = _refusal(address)
    return None if refusal is None else refusal[0]


def embedded_ipv4(address: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of its form; empty for an
    IPv4 address or a plain IPv6 one. A network-specific NAT64 prefix (any /32../96 an operator
    picks) cannot be told from the address: see docs/SECURITY.md."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    value = int(address)
    low32 = ipaddress.IPv4Address(value & _LOW32)
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address in _TRANSLATED:
        return [("IPv4-translated", low32)]
    if address in _COMPATIBLE and value > 1:  # :: and ::1 are IPv6's own unspecified and loopback
        return [("IPv4-compatible", low32)]
    if address in _NAT64:
        return [("NAT64", low32)]
    if address in _LOCAL_NAT64:  # the prefix length is the operator's: every reading but zero padding
        readings = ((length, _rfc6052_ipv4(value, length)) for length in _LOCAL_NAT64_LENGTHS)
        return [(f"local NAT64 /{length}", carried) for length, carried in readings if carried not in _THIS_NETWORK]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address.teredo is not None:
        server, client = address.teredo
        return [("Teredo server", server), ("Teredo client", client)]
    if (value >> 32) & _ISATAP_MASK in _ISATAP_IDS:
        return [("ISATAP", low32)]
    return []


def _refusal(address: IPAddress) -> tuple[str, str] | None:
    """The category of a refused address and, for one refused for the IPv4 address it carries, a note
    naming the form and that address."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        address = ipaddress.IPv6Address(int(address))  # a zone (fe80::1%eth0) changes no rule
    for form, carried in embedded_ipv4(address):
        category = _own_category(carried)
        if category is not None:
            return category, f" ({form} form of {carried})"
    if isinstance(address, ipaddress.IPv6Address) and (
        address.ipv4_mapped is not None or address in _NAT64 or address.sixtofour is not None
    ):
        # Stands for its IPv4 address alone, which is public. 6to4 (2002:V4ADDR::/48) included: Python
        # 3.13 (and 3.12.4+) counts all of 2002::/16 as private where 3.11.7 did not, so the carried
        # address decides, the same on every Python.
        return None
    category = _own_category(address)
    return None if category is None else (category, "")


def _own_category(address: IPAddress) -> str | None:
    checks = (
        (address in METADATA_ADDRESSES, "cloud metadata"),
        (address.is_loopback, "loopback"),
        (address.is_unspecified, "unspecified"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "shared (CGNAT)"),
        (isinstance(address, ipaddress.IPv6Address) and address in _LOCAL_NAT64, "local NAT64"),
        (address.is_reserved, "reserved"),
        (address.is_private, "private"),
        (not address.is_global, "non-public"),
    )
    return next((name for refused, name in checks if refused), None)


def _rfc6052_ipv4(value: int, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address after an RFC 6052 prefix of ``prefix_length`` bits: the 32 bits that follow
    it, skipping bits 64-71 (the ``u`` octet), or the last 32 bits for a /96."""
    if prefix_length == 96:
        return ipaddress.IPv4Address(value & _LOW32)
    without_u = ((value >> 64) << 56) | (value & ((1 << 56) - 1))
    return ipaddress.IPv4Address((without_u >> (120 - prefix_length - 32)) & _LOW32)


_SHARED: Final = ipaddress.ip_network("100.64.0.0/10")
_LOW32: Final = 0xFFFF_FFFF
_TRANSLATED: Final = ipaddress.IPv6Network("::ffff:0:0:0/96")
"""SIIT's IPv4-translated addresses (RFC 2765)."""
_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")
"""IPv4-compatible addresses (deprecated by RFC 4291, still routed by some stacks)."""
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
"""NAT64's well-known prefix (RFC 6052): the address stands for the IPv4 one in its last 32 bits."""
_LOCAL_NAT64: Final = ipaddress.IPv6Network("64:ff9b:1::/48")
"""NAT64's local-use prefix (RFC 8215): never public, whatever it carries."""
_LOCAL_NAT64_LENGTHS: Final = (96, 64, 56, 48)
"""The RFC 6052 prefix lengths a network inside the local-use /48 may have: every reading is checked
(the /96 one, the usual, named first)."""
_THIS_NETWORK: Final = ipaddress.IPv4Network("0.0.0.0/8")
"""What zero bits read as: no translator maps to it, so a reading there is padding, not an address."""
_ISATAP_MASK: Final = 0xFDFF_FFFF
_ISATAP_IDS: Final = frozenset({0x0000_5EFE})
"""ISATAP interface ids ``0:5efe:a.b.c.d`` and ``200:5efe:a.b.c.d`` (the u/l bit masked off)."""


def resolve_allowed(host: str, port: int, allow_private: bool) -> list[IPAddress]:
    """Every address ``host`` resolves to, if all may be sent to; else :class:`WebhookUrlRefused`
    naming the first refused address and its category."""
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        addresses = _resolve(host, port)
    if not allow_private:
        for address in addresses:
            refusal = _refusal(address)
            if refusal is not None:
                category, note = refusal
                raise WebhookUrlRefused(
                    f"webhook_url host {host!r} resolves to {address}, a {category} address{note}; only public "
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
