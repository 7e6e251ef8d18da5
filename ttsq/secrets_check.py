"""Telling a real secret from a placeholder, a well-known default or a value too weak to be one.

The settings refuse such values in production (``Settings._check_consistency``). Every function here
judges strings and answers in words that name the setting, never its value, so that no message,
log line or validation error echoes a secret.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr

from ttsq.webhook_signing import parse_secrets

MIN_SECRET_CHARS: Final = 12
"""Shorter values are typed by people, not generated (``openssl rand -hex 32`` gives 64)."""

MIN_DISTINCT_CHARS: Final = 6
"""``aaaaaaaaaaaa``, ``abcabcabcabc``: long enough, yet no generator makes them."""

PLACEHOLDER_WORDS: Final = (
    "changeme",
    "changethis",
    "replaceme",
    "placeholder",
    "notasecret",
    "example",
    "password",
    "secret",
    "minioadmin",
    "ttsqdev",
    "insecure",
)
"""Found anywhere in the folded value (see :func:`normalise`), each marks a default, a sample from
documentation or a dev value (``ttsq-dev-secret``, ``Change_Me``, AWS's ``…EXAMPLEKEY``). A generated
secret holds none of them by chance."""

TEMPLATE: Final = re.compile(r"\$\{|\$\(|\{\{")
"""An unexpanded ``${VAR}`` (shell, compose), ``$(VAR)`` (Kubernetes) or ``{{ var }}`` (Helm)."""

UNIX_SOCKET_SCHEMES: Final = frozenset({"unix", "redis+socket", "socket"})
"""Redis URLs of a local socket (redis-py's and kombu's spellings): file permissions guard them."""


def normalise(value: str) -> str:
    """``value`` folded for comparison: no surrounding whitespace, one case, no separators, so that
    ``" Change_Me "``, ``"CHANGE-ME"`` and ``"changeme"`` are one word."""
    return re.sub(r"[\s\-_.:/]+", "", value.strip().casefold())


def weakness(value: str) -> str | None:
    """Why ``value`` cannot be a production secret, in words that never quote it; None if it can."""
    stripped = value.strip()
    folded = normalise(value)
    if TEMPLATE.search(stripped):
        return "an unexpanded template"
    if len(stripped) < MIN_SECRET_CHARS:
        return f"shorter than {MIN_SECRET_CHARS} characters"
    if any(word in folded for word in PLACEHOLDER_WORDS):
        return "a placeholder or well-known default"
    if len(set(folded)) < MIN_DISTINCT_CHARS:
        return f"fewer than {MIN_DISTINCT_CHARS} distinct characters"
    return None


def secret_problem(setting: str, value: str) -> str | None:
    reason = weakness(value)
    return None if reason is None else f"{setting} is a placeholder, not a secret ({reason}); set a real one"


def redis_url_problem(setting: str, url: str) -> str | None:
    """A Redis URL must carry a real password (``redis://:<password>@host:6379/0``), unless it names
    a unix socket."""
    parts = urlsplit(url.strip())
    if parts.scheme in UNIX_SOCKET_SCHEMES:
        return None
    if not parts.password:
        return f"{setting} has no password; use redis://:<password>@host:6379/0"
    return secret_problem(f"the password in {setting}", unquote(parts.password))


class SentinelSecrets(NamedTuple):
    """The passwords of a Redis run by Sentinel (``TTSQ_REDIS_SENTINEL__*``)."""

    password: SecretStr | None
    sentinel_password: SecretStr | None


def sentinel_problems(secrets: SentinelSecrets) -> list[str]:
    """The master and replicas must require a real password; the sentinels' own, where set, must be
    real too (sentinels without one are the operator's choice: they hold no data)."""
    setting = "TTSQ_REDIS_SENTINEL__PASSWORD"
    problems = []
    if secrets.password is None or not secrets.password.get_secret_value().strip():
        problems.append(f"{setting} is not set; the Redis master and its replicas need a password")
    elif problem := secret_problem(setting, secrets.password.get_secret_value()):
        problems.append(problem)
    if secrets.sentinel_password is not None:
        value = secrets.sentinel_password.get_secret_value()
        if problem := secret_problem("TTSQ_REDIS_SENTINEL__SENTINEL_PASSWORD", value):
            problems.append(problem)
    return problems


def s3_problems(access_key_id: str | None, secret_access_key: SecretStr | None) -> list[str]:
    """Both keys or neither (boto3 then finds credentials itself: instance roles, ``AWS_*``)."""
    has_id = bool(access_key_id and access_key_id.strip())
    if secret_access_key is None:
        return ["TTSQ_S3__ACCESS_KEY_ID is set without TTSQ_S3__SECRET_ACCESS_KEY"] if has_id else []
    problem = secret_problem("TTSQ_S3__SECRET_ACCESS_KEY", secret_access_key.get_secret_value())
    if problem:
        return [problem]
    return [] if has_id else ["TTSQ_S3__SECRET_ACCESS_KEY is set without TTSQ_S3__ACCESS_KEY_ID"]


def webhook_problems(webhook_secret: SecretStr | None) -> list[str]:
    """Each ``whsec_`` secret's key, judged as text when it is text (a generated key is random bytes)."""
    if webhook_secret is None:
        return []  # jobs with a webhook_url are refused instead
    problems = []
    for position, key in enumerate(parse_secrets(webhook_secret.get_secret_value()), 1):
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            continue
        problem = secret_problem(f"TTSQ_WEBHOOK_SECRET #{position}", text)
        if problem:
            problems.append(problem)
    return problems


def production_problems(
    *,
    redis_url: str,
    sentinel: SentinelSecrets | None = None,
    s3_access_key_id: str | None,
    s3_secret_access_key: SecretStr | None,
    webhook_secret: SecretStr | None,
) -> list[str]:
    """Everything that keeps these secrets from serving in production, one sentence each. With
    ``sentinel`` (Redis run by Sentinel) its passwords are judged, not ``redis_url``, which is unused."""
    if sentinel is not None:
        redis = sentinel_problems(sentinel)
    else:
        problem = redis_url_problem("TTSQ_REDIS_URL", redis_url)
        redis = [problem] if problem else []
    return [
        *redis,
        *s3_problems(s3_access_key_id, s3_secret_access_key),
        *webhook_problems(webhook_secret),
    ]
