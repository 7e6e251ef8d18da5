"""Signing webhook events per the Standard Webhooks specification (https://www.standardwebhooks.com).

``webhook-signature`` is ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`` keyed with the
base64-decoded part of a ``whsec_`` secret; while a secret is rotated, every configured secret signs
and the signatures are sent space-separated, so receivers holding either one verify. The HMAC itself
is the ``standardwebhooks`` reference library's.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Final

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["WebhookVerificationError", "parse_secrets", "sign", "signed_headers", "verify"]

SECRET_PREFIX: Final = "whsec_"
MIN_SECRET_BYTES: Final = 24
"""Shorter keys make the HMAC guessable; the specification recommends 24 to 64 random bytes."""


def parse_secrets(value: str) -> list[bytes]:
    """The keys in a ``whsec_…`` value (several space-separated while rotating); ``ValueError``
    names the first bad token by position, never by content."""
    tokens = value.split()
    if not tokens:
        raise ValueError("webhook secret is empty; expected whsec_<base64>")
    keys = []
    for position, token in enumerate(tokens, 1):
        if not token.startswith(SECRET_PREFIX):
            raise ValueError(f"webhook secret #{position} does not start with {SECRET_PREFIX!r}")
        try:
            key = base64.b64decode(token.removeprefix(SECRET_PREFIX), validate=True)
        except binascii.Error:
            raise ValueError(f"webhook secret #{position} is not valid base64 after {SECRET_PREFIX!r}") from None
        if len(key) < MIN_SECRET_BYTES:
            raise ValueError(f"webhook secret #{position} has {len(key)} bytes; use at least {MIN_SECRET_BYTES}")
        keys.append(key)
    return keys


def sign(keys: list[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value: one ``v1,`` signature per key."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    text = body.decode("utf-8")
    return " ".join(Webhook(key).sign(msg_id, moment, text) for key in keys)


def signed_headers(keys: list[bytes], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Every header a delivery carries besides the transport's own."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(keys, msg_id, timestamp, body),
        "content-type": "application/json",
    }


def verify(keys: list[bytes], headers: dict[str, str], body: bytes) -> None:
    """Accept the event if any key made one of its signatures and its timestamp is within five
    minutes of now; raise :class:`WebhookVerificationError` otherwise."""
    error = WebhookVerificationError("no webhook secret to verify with")
    for key in keys:
        try:
            Webhook(key).verify(body, headers, json_parse=False)
            return
        except WebhookVerificationError as e:
            error = e
    raise error
