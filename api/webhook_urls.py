"""Refusing a job's ``webhook_url`` at submit, before any job exists."""

from __future__ import annotations

from api.errors import ApiError
from ttsq.settings import Settings
from ttsq.webhook_guard import check_url, resolve_allowed


def check_webhook_url(url: str, settings: Settings) -> None:
    """The server must sign (a secret is set) and the URL must pass the SSRF guard: http(s), and a
    host whose every address is public unless private receivers are allowed. DNS is asked again
    at each delivery, since its answer can change."""
    if settings.webhook_secret is None:
        raise ApiError(
            422, "webhooks_not_configured", "this server has no TTSQ_WEBHOOK_SECRET: jobs cannot ask for webhooks"
        )
    target = check_url(url)
    resolve_allowed(target.host, target.port, settings.webhook_allow_private)
