"""The webhook library on its own: secrets, signatures, the SSRF guard, one delivery attempt against
real local HTTP servers, the retry schedule, and ``ttsq webhook-listen``'s receiver."""

from __future__ import annotations

import asyncio
import base64
import random
import re
import time
from collections.abc import Iterator
from email.utils import formatdate

import pytest

from cli.webhook_listen import WebhookListener
from tests.receiver import HANG_S, Answer, Receiver
from tests.test_webhooks import spec_signature
from ttsq.errors import WebhookUrlRefused
from ttsq.webhook_delivery import Attempt, deliver, next_delay, retry_after
from ttsq.webhook_guard import check_url, resolve_allowed
from ttsq.webhook_signing import WebhookVerificationError, parse_secrets, sign, signed_headers, verify


def post(url: str, headers: dict[str, str], body: bytes, allow_private: bool = True, timeout_s: float = 1.0) -> Attempt:
    """One attempt, run to its end (``deliver`` is a coroutine)."""
    return asyncio.run(
        deliver(url, headers, body, allow_private=allow_private, connect_timeout_s=1.0, timeout_s=timeout_s)
    )


SECRET_A = "whsec_" + base64.b64encode(b"A" * 32).decode()
SECRET_B = "whsec_" + base64.b64encode(b"B" * 32).decode()
BODY = b'{"type":"job.succeeded","data":{"id":"x"}}'


def test_signature_matches_the_specification() -> None:
    keys = parse_secrets(SECRET_A)
    assert sign(keys, "msg_1", 1700000000, BODY) == spec_signature(SECRET_A, "msg_1", "1700000000", BODY)


def test_rotation_signs_with_every_secret_and_either_verifies() -> None:
    now = int(time.time())
    headers = signed_headers(parse_secrets(f"{SECRET_A} {SECRET_B}"), "msg_2", now, BODY)
    signatures = headers["webhook-signature"].split(" ")
    assert signatures == [spec_signature(s, "msg_2", str(now), BODY) for s in (SECRET_A, SECRET_B)]
    verify(parse_secrets(SECRET_A), headers, BODY)
    verify(parse_secrets(SECRET_B), headers, BODY)


def test_verify_refuses_a_wrong_secret_a_changed_body_and_an_old_timestamp() -> None:
    keys = parse_secrets(SECRET_A)
    headers = signed_headers(keys, "msg_3", int(time.time()), BODY)
    with pytest.raises(WebhookVerificationError):
        verify(parse_secrets(SECRET_B), headers, BODY)
    with pytest.raises(WebhookVerificationError):
        verify(keys, headers, BODY.replace(b"x", b"y"))
    old = signed_headers(keys, "msg_3", int(time.time()) - 301, BODY)
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify(keys, old, BODY)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "empty"),
        ("abc", "does not start with 'whsec_'"),
        ("whsec_not*base64", "not valid base64"),
        ("whsec_" + base64.b64encode(b"short").decode(), "has 5 bytes"),
        (f"{SECRET_A} nope", "#2"),
    ],
)
def test_bad_secrets_are_refused_by_what_is_wrong(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_secrets(value)


@pytest.mark.parametrize(
    ("url", "category"),
    [
        ("http://127.0.0.1/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://10.0.0.8/hook", "private"),
        ("http://192.168.1.1/hook", "private"),
        ("http://169.254.169.254/latest", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://100.64.0.1/", "shared (CGNAT)"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
    ],
)
def test_non_public_addresses_are_refused_with_their_category(url: str, category: str) -> None:
    target = check_url(url)
    with pytest.raises(WebhookUrlRefused, match=re.escape(f"a {category} address")):
        resolve_allowed(target.host, target.port, allow_private=False)
    assert resolve_allowed(target.host, target.port, allow_private=True)


def test_a_public_address_passes_without_dns() -> None:
    target = check_url("https://93.184.215.14/hook")
    assert (target.scheme, target.port) == ("https", 443)
    assert [str(a) for a in resolve_allowed(target.host, target.port, allow_private=False)] == ["93.184.215.14"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/x", "http or https"),
        ("example.com/x", "http or https"),
        ("http://user:pw@example.com/x", "credentials"),
        ("http:///x", "no host"),
        ("http://example.com:99999/x", "not a valid URL"),
    ],
)
def test_malformed_urls_are_refused(url: str, problem: str) -> None:
    with pytest.raises(WebhookUrlRefused, match=problem):
        check_url(url)


def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(WebhookUrlRefused, match="does not resolve"):
        resolve_allowed("no-such-host.invalid", 80, allow_private=True)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def local(url: str) -> str:
    """The same receiver by name, so the attempt resolves it and pins the address it checked."""
    return url.replace("127.0.0.1", "localhost")


def attempt(receiver: Receiver, answer: Answer) -> tuple[Attempt, str]:
    url = local(receiver.path(answer))
    result = post(url, {"webhook-id": "msg_9"}, BODY)
    return result, url


@pytest.mark.parametrize(
    ("status", "delivered", "retryable"),
    [(200, True, False), (204, True, False), (500, False, True), (503, False, True), (408, False, True),
     (400, False, False), (404, False, False), (410, False, False), (302, False, False)],
)  # fmt: skip
def test_answers_decide_delivered_and_retryable(
    receiver: Receiver, status: int, delivered: bool, retryable: bool
) -> None:
    result, url = attempt(receiver, (status, {"location": "http://10.0.0.1/"} if status == 302 else {}))
    assert (result.delivered, result.retryable, result.status) == (delivered, retryable, status)
    assert len(receiver.at(url)) == 1  # a redirect is not followed


def test_the_request_carries_the_name_not_the_pinned_address(receiver: Receiver) -> None:
    _, url = attempt(receiver, 200)
    [request] = receiver.at(url)
    assert request.headers["host"] == f"localhost:{receiver.server.server_address[1]}"
    assert request.headers["webhook-id"] == "msg_9"


def test_429_gives_its_retry_after(receiver: Receiver) -> None:
    result, _ = attempt(receiver, (429, {"retry-after": "7"}))
    assert (result.retryable, result.retry_after_s) == (True, 7.0)


def test_a_silent_receiver_times_out_as_retryable(receiver: Receiver) -> None:
    started = time.monotonic()
    result, _ = attempt(receiver, "hang")
    assert time.monotonic() - started < HANG_S - 1  # its timeout, not the receiver's answer
    assert (result.delivered, result.retryable, result.status) == (False, True, None)
    assert "timed out" in (result.error or "")


def test_nobody_listening_is_retryable_and_names_only_the_host() -> None:
    result = post("http://localhost:9/hook", {}, BODY, timeout_s=2)
    assert (result.delivered, result.retryable) == (False, True)
    assert result.error == "could not reach localhost:9 (ConnectError)"


def test_the_guard_runs_again_at_delivery(receiver: Receiver) -> None:
    url = local(receiver.path(200))
    result = post(url, {}, BODY, allow_private=False)
    assert (result.delivered, result.retryable) == (False, False)
    assert "loopback" in (result.error or "")
    assert receiver.at(url) == []


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after("120") == 120.0
    assert retry_after(formatdate(1_000_060, usegmt=True), now=1_000_000) == pytest.approx(60.0)
    assert retry_after("999999999") == 24 * 3600.0
    assert retry_after("soon") is None
    assert retry_after(None) is None


def test_next_delay_follows_the_schedule_with_jitter_then_stops() -> None:
    schedule = [5.0, 30.0, 120.0]
    rng = random.Random(7)
    delays = [next_delay(n, schedule, None, rng) for n in (1, 2, 3)]
    for delay, planned in zip(delays, schedule, strict=True):
        assert delay is not None
        assert planned * 0.8 <= delay <= planned * 1.2
    assert next_delay(4, schedule, None, rng) is None  # four attempts made: the schedule is spent
    assert next_delay(1, schedule, 600.0, rng) == 600.0  # a longer Retry-After wins
    assert next_delay(1, [], None, rng) is None


def test_the_listener_prints_verified_events_and_refuses_forged_ones() -> None:
    lines: list[str] = []
    listener = WebhookListener(parse_secrets(SECRET_A), port=0, echo=lines.append).start()
    try:
        good = signed_headers(parse_secrets(SECRET_A), "msg_5", int(time.time()), BODY)
        forged = signed_headers(parse_secrets(SECRET_B), "msg_6", int(time.time()), BODY)
        ok = post(listener.url, good, BODY, timeout_s=2)
        bad = post(listener.url, forged, BODY, timeout_s=2)
    finally:
        listener.stop()
    assert (ok.status, bad.status) == (204, 400)
    assert lines[0] == "job.succeeded job=x status=None webhook-id=msg_5 verified"
    assert lines[1].startswith("job.succeeded job=x status=None webhook-id=msg_6 REJECTED")
