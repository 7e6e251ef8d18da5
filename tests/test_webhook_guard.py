"""The SSRF guard against every spelling of an address (issue 19, finding 6): IPv6 forms that carry an
IPv4 address, IPv4 in octal, hex, decimal and short forms, IDNA names, zone ids. Each refused form
has a public twin that passes, so the guard is shown to decode the address, not to refuse the form."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import uuid
from typing import Any

import httpx
import pytest

from api.main import create_app
from tests.conftest import serve
from ttsq.errors import WebhookUrlRefused
from ttsq.settings import Settings
from ttsq.webhook_delivery import deliver
from ttsq.webhook_guard import address_category, check_url, embedded_ipv4, resolve_allowed

PUBLIC_V4 = "93.184.215.14"


def refusal(url: str) -> str:
    """The guard's message for ``url`` with private receivers refused; fails the test if it passes."""
    with pytest.raises(WebhookUrlRefused) as refused:
        _resolve(url)
    return str(refused.value)


def _resolve(url: str) -> None:
    target = check_url(url)
    resolve_allowed(target.host, target.port, allow_private=False)


@pytest.mark.parametrize(
    ("url", "category", "form"),
    [
        ("http://[2002:7f00:1::]/", "loopback", "6to4 form of 127.0.0.1"),
        ("http://[2002:a9fe:a9fe::1]/", "cloud metadata", "6to4 form of 169.254.169.254"),
        ("http://[2002:c0a8:101::]/", "private", "6to4 form of 192.168.1.1"),
        ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "loopback", "Teredo client form of 127.0.0.1"),
        ("http://[2001:0:a00:1::]/", "private", "Teredo server form of 10.0.0.1"),
        ("http://[64:ff9b::7f00:1]/", "loopback", "NAT64 form of 127.0.0.1"),
        ("http://[64:ff9b::a9fe:a9fe]/", "cloud metadata", "NAT64 form of 169.254.169.254"),
        ("http://[64:ff9b::10.0.0.1]/", "private", "NAT64 form of 10.0.0.1"),
        ("http://[64:ff9b:1::7f00:1]/", "loopback", "local NAT64 /96 form of 127.0.0.1"),
        ("http://[64:ff9b:1:7f00:0:100::]/", "loopback", "local NAT64 /48 form of 127.0.0.1"),
        ("http://[::127.0.0.1]/", "loopback", "IPv4-compatible form of 127.0.0.1"),
        ("http://[::a9fe:a9fe]/", "cloud metadata", "IPv4-compatible form of 169.254.169.254"),
        ("http://[::ffff:0:7f00:1]/", "loopback", "IPv4-translated form of 127.0.0.1"),
        ("http://[::ffff:7f00:1]/", "loopback", "IPv4-mapped form of 127.0.0.1"),
        ("http://[::ffff:100.64.0.1]/", "shared (CGNAT)", "IPv4-mapped form of 100.64.0.1"),
        ("http://[2600::200:5efe:a00:1]/", "private", "ISATAP form of 10.0.0.1"),
        ("http://[2600::5efe:7f00:1]/", "loopback", "ISATAP form of 127.0.0.1"),
    ],
)
def test_an_ipv6_form_is_refused_for_the_ipv4_address_it_carries(url: str, category: str, form: str) -> None:
    assert f"a {category} address ({form})" in refusal(url)


@pytest.mark.parametrize(
    "address",
    ["2002:5db8:d70e::", "64:ff9b::5db8:d70e", "::ffff:93.184.215.14", "2600::200:5efe:5db8:d70e"],
)
def test_the_same_forms_carrying_a_public_address_pass(address: str) -> None:
    """6to4, NAT64's well-known prefix, IPv4-mapped and ISATAP of a public IPv4 address reach a public
    host: the guard decodes them rather than refusing every transition address."""
    parsed = ipaddress.ip_address(address)
    assert str(embedded_ipv4(parsed)[0][1]) == PUBLIC_V4
    assert address_category(parsed) is None
    assert [str(a) for a in resolve_allowed(address, 80, allow_private=False)] == [str(ipaddress.ip_address(address))]


@pytest.mark.parametrize(
    "address", ["64:ff9b:1::5db8:d70e", "::5db8:d70e", "::ffff:0:5db8:d70e", "2001:0:4136:e378:8000:63bf:a247:28f1"]
)
def test_forms_that_are_not_public_whatever_they_carry_stay_refused(address: str) -> None:
    """The local-use NAT64 prefix (RFC 8215), the deprecated IPv4-compatible and SIIT forms, and
    Teredo (2001::/32, not globally routed as such) are refused even for a public IPv4 address."""
    assert embedded_ipv4(ipaddress.ip_address(address))
    assert address_category(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    "host",
    ["0x7f000001", "2130706433", "017700000001", "0177.0.0.1", "0x7f.1", "127.1", "127.000.000.001", "0",
     "\uff11\uff12\uff17.\uff10.\uff10.\uff11", "\u24dbocalhost", "LOCALHOST"],
)  # fmt: skip
def test_other_spellings_of_a_local_address_are_judged_by_what_they_resolve_to(host: str) -> None:
    message = refusal(f"http://{host}/hook")
    assert re.search(r"resolves to (127\.0\.0\.1|0\.0\.0\.0), an? (loopback|unspecified) address", message), message


def test_a_trailing_dot_or_an_unknown_spelling_is_refused_not_passed() -> None:
    """What the resolver cannot read is refused as unresolvable, never sent on as it is."""
    for host in ("127.0.0.1.", "0x7f.0x0.0x0.0x1.", "[::1%]"):
        assert re.search(r"does not resolve|not a valid URL|no host|a loopback address", refusal(f"http://{host}/"))


@pytest.mark.parametrize(
    ("url", "category"),
    [
        ("http://[fe80::1%25eth0]/", "link-local"),
        ("http://[::1%251]/", "loopback"),
        ("http://[fd00:ec2::254%25eth0]/", "cloud metadata"),
        ("http://[::ffff:127.0.0.1%25lo]/", "loopback"),
    ],
)
def test_a_zone_id_changes_no_rule(url: str, category: str) -> None:
    assert f"a {category} address" in refusal(url)


def test_a_delivery_to_a_transition_form_is_refused_before_connecting() -> None:
    """The worker's attempt runs the same guard; nothing listens there, and nothing is tried."""
    attempt = deliver("http://[2002:7f00:1::]:9/hook", {}, b"{}", allow_private=False, connect_timeout_s=1, timeout_s=1)
    result = asyncio.run(attempt)
    assert (result.delivered, result.retryable, result.status) == (False, False, None)
    assert "loopback address (6to4 form of 127.0.0.1)" in (result.error or "")


@pytest.mark.parametrize("url", ["http://[2002:7f00:1::]/hook", "http://[64:ff9b::a9fe:a9fe]/latest", "http://0x7f.1/"])
def test_the_api_refuses_them_at_submit(settings: Settings, redis_client: Any, url: str) -> None:
    guarded = settings.model_copy(
        update={"webhook_allow_private": False, "queue": f"guarded-{uuid.uuid4()}", "model_affinity": False}
    )
    with serve(create_app(guarded)) as api, httpx.Client(base_url=api) as http:
        response = http.post("/v1/jobs", json={"text": "A hook.", "webhook_url": url})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "webhook_url_refused"
    assert not any(redis_client.llen(q) for q in (guarded.queue, f"{guarded.queue}.interactive"))
