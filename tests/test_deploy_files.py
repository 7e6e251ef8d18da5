"""docker-compose.yml, the Dockerfile and redis.conf, checked by parsing (no Docker engine runs here).

Each safety check is a function returning its problems, run on the real file and on broken copies.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import BaseModel

from cli.main import main as cli
from ttsq import tracing
from ttsq.cpu_priority import NICE_CEILING_LIMIT
from ttsq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
TTSQ_SERVICES = ("api", "worker-gpu0", "webhooks", "flower", "wyoming")
MONITORING = ("prometheus", "grafana")
PROFILES = {**{name: ["monitoring"] for name in MONITORING}, "wyoming": ["wyoming"], "jaeger": ["tracing"]}
"""Services that run only when their profile is asked for; the rest always run."""
SECRET_VARIABLES = (
    "REDIS_PASSWORD",
    "TTSQ_S3_ACCESS_KEY_ID",
    "TTSQ_S3_SECRET_ACCESS_KEY",
    "FLOWER_BASIC_AUTH",
    "TTSQ_WEBHOOK_SECRET",
    "GRAFANA_ADMIN_PASSWORD",
)
OPERATOR_ENV = {
    "REDIS_PASSWORD": "9d4e1f7a2b8c6e0d3a5f7b1c",
    "TTSQ_S3_ACCESS_KEY_ID": "AKIAIOSFODNN7TTSQ001",
    "TTSQ_S3_SECRET_ACCESS_KEY": "kQ7v2Lx9TfR4wNz8HcBm3Yp6",
    "FLOWER_BASIC_AUTH": "ops:Jf83kd9Qm2LxVw",
    "TTSQ_WEBHOOK_SECRET": "whsec_" + base64.b64encode(bytes(range(7, 39))).decode(),
    "GRAFANA_ADMIN_PASSWORD": "Wq4nR8zLp2Ty",
}
"""An operator's .env: real-looking values of every variable compose requires."""
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def settings_field_exists(env_name: str) -> bool:
    """Whether TTSQ_A__B names Settings.a.b, following nested models as pydantic-settings does."""
    model: type[BaseModel] = Settings
    parts = env_name.removeprefix("TTSQ_").lower().split("__")
    for index, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        if index < len(parts) - 1:
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return False
            model = annotation
    return True


def test_expected_services(compose: dict[str, Any]) -> None:
    assert set(services(compose)) == {
        *("redis", "s3", "api", "worker-gpu0", "webhooks", "beat", "flower", "wyoming"),
        *MONITORING,
        "jaeger",
    }
    for name, service in services(compose).items():
        assert service.get("profiles", []) == PROFILES.get(name, []), name
    assert services(compose)["redis"]["image"].startswith("redis:7")


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_app_services_wait_for_healthy_dependencies(compose: dict[str, Any]) -> None:
    for name in TTSQ_SERVICES:
        depends = services(compose)[name]["depends_on"]
        assert depends == {"redis": {"condition": "service_healthy"}, "s3": {"condition": "service_healthy"}}, name


def test_environment_names_are_real_settings(compose: dict[str, Any]) -> None:
    for name in TTSQ_SERVICES:
        env = services(compose)[name]["environment"]
        ttsq_names = [key for key in env if key.startswith("TTSQ_")]
        assert "TTSQ_REDIS_URL" in ttsq_names
        assert "TTSQ_S3__ENDPOINT_URL" in ttsq_names
        unknown = [key for key in ttsq_names if not settings_field_exists(key)]
        assert unknown == [], f"{name}: {unknown} match no Settings field"


def test_settings_field_check_can_fail() -> None:
    assert settings_field_exists("TTSQ_S3__BUCKET")
    assert not settings_field_exists("TTSQ_S3__BUCKETS")
    assert not settings_field_exists("TTSQ_REDIS_URL__X")


def unrequired_secrets(text: str) -> list[str]:
    """Secret variables that compose would start without (unused, or used with a default)."""
    problems = []
    for variable in SECRET_VARIABLES:
        uses = re.findall(r"\$\{" + variable + r"([^}]*)\}", text)
        if not uses:
            problems.append(f"{variable} unused")
        elif any(use != ":?Variable not set" for use in uses):
            problems.append(f"{variable} must use :?")
    return problems


def test_secrets_are_required_not_defaulted() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert unrequired_secrets(text) == []
    broken = text.replace("${REDIS_PASSWORD:?Variable not set}", "${REDIS_PASSWORD:-}", 1)
    assert unrequired_secrets(broken) == ["REDIS_PASSWORD must use :?"]


class MissingVariable(Exception):
    """Compose refuses to start: a ``${VAR:?}`` variable is unset or empty."""


VARIABLE = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``."""

    def one(match: re.Match[str]) -> str:
        escaped, braced, operator, argument, bare = match.groups()
        if escaped:
            return "$"
        name = braced or bare
        value = env.get(name)
        unset = value is None or (value == "" and (operator or "").startswith(":"))
        if unset and operator in (":?", "?"):
            raise MissingVariable(name)
        if unset and operator in (":-", "-"):
            return str(argument)
        return value or ""

    return VARIABLE.sub(one, text)


def test_interpolation_follows_compose() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert (
        interpolate("$$HOSTNAME ${SET} $SET ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${SET:?e}", env)
        == "$HOSTNAME x x d d  x"
    )
    for text in ("${UNSET:?Variable not set}", "${EMPTY:?e}"):
        with pytest.raises(MissingVariable):
            interpolate(text, env)


def service_env(service: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The environment a service's container gets from an operator's ``env``."""
    return {key: interpolate(str(value), env) for key, value in service.get("environment", {}).items()}


def published(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host address, container port) of each published port; "" is every address."""
    result = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            result.append((str(port.get("host_ip", "")), str(port["target"])))
        else:
            *host, _, target = str(port).split(":")
            result.append((host[0] if host else "", target))
    return result


def test_published_reads_both_syntaxes() -> None:
    assert published({"ports": ["8000:8000", "127.0.0.1:5555:5555"]}) == [("", "8000"), (LOOPBACK, "5555")]
    assert published({"ports": [{"target": 9090, "published": 9090, "host_ip": LOOPBACK}]}) == [(LOOPBACK, "9090")]


def test_services_build_valid_production_settings(compose: dict[str, Any]) -> None:
    """What each ttsq container gets from an operator's .env passes the production checks."""
    for name in TTSQ_SERVICES:
        with pytest.MonkeyPatch.context() as patch:
            for key in [key for key in os.environ if key.startswith("TTSQ_")]:
                patch.delenv(key)
            for key, value in service_env(services(compose)[name], OPERATOR_ENV).items():
                if key.startswith("TTSQ_"):
                    patch.setenv(key, value)
            settings = Settings(_env_file=None)
        assert settings.environment == "production", name
        assert urlsplit(settings.redis_url).password == OPERATOR_ENV["REDIS_PASSWORD"], name


def redis_url_problems(compose: dict[str, Any]) -> list[str]:
    """Every ttsq service's TTSQ_REDIS_URL carries REDIS_PASSWORD, and compose refuses to start without it."""
    problems = []
    without = {key: value for key, value in OPERATOR_ENV.items() if key != "REDIS_PASSWORD"}
    for name, service in services(compose).items():
        url = service.get("environment", {}).get("TTSQ_REDIS_URL")
        if url is None:
            problems += [f"{name}: no TTSQ_REDIS_URL"] if name in TTSQ_SERVICES else []
        elif urlsplit(interpolate(url, OPERATOR_ENV)).password != OPERATOR_ENV["REDIS_PASSWORD"]:
            problems.append(f"{name}: TTSQ_REDIS_URL does not carry REDIS_PASSWORD")
        else:
            try:
                interpolate(url, without)
                problems.append(f"{name}: TTSQ_REDIS_URL does not require REDIS_PASSWORD")
            except MissingVariable:
                pass
    return problems


def redis_server_problems(compose: dict[str, Any]) -> list[str]:
    """redis-server reads REDIS_PASSWORD from a compose secret (never from its command line or
    environment, which `docker inspect` shows), its healthcheck authenticates, no port reaches the host."""
    redis = services(compose)["redis"]
    secret_files = [
        f"/run/secrets/{name}"
        for name in redis.get("secrets", [])
        if compose.get("secrets", {}).get(name) == {"environment": "REDIS_PASSWORD"}
    ]
    command = " ".join(redis["command"])
    health = " ".join(redis["healthcheck"]["test"])
    problems = []
    if not any(re.search(rf"^requirepass \S*\$\$\(cat {path}\)", command, re.MULTILINE) for path in secret_files):
        problems.append("redis: requirepass is not read from the REDIS_PASSWORD secret")
    if "--requirepass" in command or OPERATOR_ENV["REDIS_PASSWORD"] in service_env(redis, OPERATOR_ENV).values():
        problems.append("redis: the password is on its command line or in its environment (docker inspect)")
    if not any(f'REDISCLI_AUTH="$$(cat {path})" redis-cli' in health for path in secret_files) or "PONG" not in health:
        problems.append("redis: the healthcheck does not authenticate (REDISCLI_AUTH) and expect PONG")
    if published(redis):
        problems.append("redis: published on the host")
    return problems


def redis_problems(compose: dict[str, Any]) -> list[str]:
    return redis_url_problems(compose) + redis_server_problems(compose)


def without_password(compose: dict[str, Any]) -> None:
    services(compose)["api"]["environment"]["TTSQ_REDIS_URL"] = "redis://redis:6379/0"


def with_default_password(compose: dict[str, Any]) -> None:
    services(compose)["webhooks"]["environment"]["TTSQ_REDIS_URL"] = "redis://:${REDIS_PASSWORD:-x}@redis:6379/0"


def password_on_command_line(compose: dict[str, Any]) -> None:
    redis = services(compose)["redis"]
    redis["command"] = ["sh", "-c", 'exec redis-server /etc/redis.conf --requirepass "$${REDIS_PASSWORD}"']
    redis["environment"] = {"REDIS_PASSWORD": "${REDIS_PASSWORD:?Variable not set}"}


def unauthenticated_healthcheck(compose: dict[str, Any]) -> None:
    services(compose)["redis"]["healthcheck"]["test"] = ["CMD", "redis-cli", "ping"]


def secret_from_a_file(compose: dict[str, Any]) -> None:
    compose["secrets"]["redis_password"] = {"file": "./redis_password.txt"}


def published_redis(compose: dict[str, Any]) -> None:
    services(compose)["redis"]["ports"] = ["6379:6379"]


@pytest.mark.parametrize(
    ("breaks", "problem"),
    [
        (without_password, "api: TTSQ_REDIS_URL does not carry REDIS_PASSWORD"),
        (with_default_password, "webhooks: TTSQ_REDIS_URL does not require REDIS_PASSWORD"),
        (password_on_command_line, "redis: requirepass is not read from the REDIS_PASSWORD secret"),
        (password_on_command_line, "redis: the password is on its command line or in its environment"),
        (unauthenticated_healthcheck, "redis: the healthcheck does not authenticate"),
        (secret_from_a_file, "redis: the healthcheck does not authenticate"),
        (published_redis, "redis: published on the host"),
    ],
)
def test_redis_check_can_fail(compose: dict[str, Any], breaks: Callable[[dict[str, Any]], None], problem: str) -> None:
    broken = copy.deepcopy(compose)
    breaks(broken)
    assert any(found.startswith(problem) for found in redis_problems(broken)), redis_problems(broken)


def test_redis_requires_the_password(compose: dict[str, Any]) -> None:
    assert redis_problems(compose) == []


def test_services_point_at_compose_hostnames(compose: dict[str, Any]) -> None:
    env = services(compose)["api"]["environment"]
    assert env["TTSQ_REDIS_URL"] == "redis://:${REDIS_PASSWORD:?Variable not set}@redis:6379/0"
    assert env["TTSQ_S3__ENDPOINT_URL"] == "http://s3:8333"
    assert env["TTSQ_ENVIRONMENT"] == "production"
    assert "-s3.port=8333" in services(compose)["s3"]["command"]


def test_gpu_worker_reserves_its_gpu(compose: dict[str, Any]) -> None:
    worker = services(compose)["worker-gpu0"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": ["0"], "capabilities": ["gpu"]}]
    assert worker["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert worker["environment"]["TTSQ_WORKER__DEVICE"] == "cuda"
    assert worker["command"][:2] == ["ttsq", "worker"]


def test_the_worker_may_bring_a_lowered_thread_back(compose: dict[str, Any]) -> None:
    """Its user is not root: a bulk step's thread comes back from nice 19 only within RLIMIT_NICE."""
    assert services(compose)["worker-gpu0"]["ulimits"]["nice"] == NICE_CEILING_LIMIT


def flower_problems(compose: dict[str, Any]) -> list[str]:
    """Flower asks for user:password from a required variable and listens on the host's loopback only."""
    flower = services(compose)["flower"]
    problems = []
    if flower.get("environment", {}).get("FLOWER_BASIC_AUTH") != "${FLOWER_BASIC_AUTH:?Variable not set}":
        problems.append("flower: FLOWER_BASIC_AUTH is not required")
    if any(part.startswith(("--basic_auth", "--basic-auth")) for part in flower["command"]):
        problems.append("flower: credentials on the command line")
    if "flower" not in flower["command"]:
        problems.append("flower: does not run flower")
    if not published(flower) or any(host != LOOPBACK for host, _ in published(flower)):
        problems.append("flower: not published on the loopback only")
    return problems


def test_flower_has_basic_auth_and_stays_private(compose: dict[str, Any]) -> None:
    assert flower_problems(compose) == []
    user, _, password = service_env(services(compose)["flower"], OPERATOR_ENV)["FLOWER_BASIC_AUTH"].partition(":")
    assert user
    assert password


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"environment": {}}, "flower: FLOWER_BASIC_AUTH is not required"),
        ({"environment": {"FLOWER_BASIC_AUTH": "${FLOWER_BASIC_AUTH:-admin:admin}"}}, "flower: FLOWER_BASIC_AUTH"),
        ({"ports": ["5555:5555"]}, "flower: not published on the loopback only"),
    ],
)
def test_flower_check_can_fail(compose: dict[str, Any], change: dict[str, Any], problem: str) -> None:
    broken = copy.deepcopy(compose)
    services(broken)["flower"].update(change)
    assert any(found.startswith(problem) for found in flower_problems(broken))


def test_internal_services_publish_no_port(compose: dict[str, Any]) -> None:
    """Clients reach the API and presigned S3 URLs only; the workers' metrics port stays internal."""
    for name in ("redis", "worker-gpu0", "webhooks"):
        assert published(services(compose)[name]) == [], name
    assert {host for host, _ in published(services(compose)["prometheus"])} == {LOOPBACK}


def test_commands_exist_in_the_cli(compose: dict[str, Any]) -> None:
    for name in ("api", "worker-gpu0", "webhooks"):
        command = services(compose)[name]["command"]
        assert command[0] == "ttsq"
        assert command[1] in cli.commands, f"{name}: ttsq has no {command[1]!r} command"


def test_redis_config_never_evicts() -> None:
    conf = (ROOT / "deploy" / "redis.conf").read_text()
    assert re.search(r"^maxmemory-policy noeviction$", conf, re.MULTILINE)
    assert re.search(r"^appendonly yes$", conf, re.MULTILINE)


def redis_conf_problems(conf: str) -> list[str]:
    """Protected mode on, and no password written in the file (it comes from a secret)."""
    directives: dict[str, str] = {}
    for line in conf.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.strip().partition(" ")
            directives[name.lower()] = value.strip()  # the last one wins, as in Redis
    problems = []
    if directives.get("protected-mode") != "yes":
        problems.append("protected-mode is not yes (the redis image's default is no)")
    problems += [f"{name}: a literal secret in git" for name in ("requirepass", "masterauth") if name in directives]
    if re.search(r"^\s*user\s.*\s>", conf, re.MULTILINE):
        problems.append("user: a literal secret in git")
    return problems


def test_redis_config_is_protected_without_a_password_in_git() -> None:
    conf = (ROOT / "deploy" / "redis.conf").read_text()
    assert redis_conf_problems(conf) == []
    assert redis_conf_problems(conf + "protected-mode no\n") == [
        "protected-mode is not yes (the redis image's default is no)"
    ]
    assert redis_conf_problems(conf.replace("protected-mode yes", "")) == [
        "protected-mode is not yes (the redis image's default is no)"
    ]
    assert redis_conf_problems(conf + "requirepass hunter2hunter2\n") == ["requirepass: a literal secret in git"]
    assert redis_conf_problems(conf + "user ttsq on >pw ~* +@all\n") == ["user: a literal secret in git"]


def test_dockerfile_copies_every_package() -> None:
    """Every package that ``pip install .`` installs (pyproject's ``packages.find``) is copied first."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    assert {"api", "workers", "tts_core", "ttsq", "cli", "narration"} <= set(packages)
    for package in packages:
        assert re.search(rf"^COPY {package} \./{package}$", dockerfile, re.MULTILINE), package
    assert "celeryconfig.py" in dockerfile
    assert re.search(r"^FROM python:3\.11", dockerfile, re.MULTILINE)
    # Both lock files, whichever EXTRAS picks (tests/test_dependencies.py checks the install itself).
    assert re.search(r"^COPY requirements/image\.txt requirements/image-cuda\.txt \./requirements/$", dockerfile, re.M)


def test_the_web_page_ships_in_the_package() -> None:
    """The image installs ttsq with ``pip install .``: the page's files must be package data."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["api"]
    static = ROOT / "api" / "static"
    shipped = {str(path.relative_to(static)) for pattern in patterns for path in (ROOT / "api").glob(pattern)}
    files = {str(path.relative_to(static)) for path in static.rglob("*") if path.is_file()}
    assert shipped == files >= {"index.html", "js/app.js", "style.css"}


def mounted(service: dict[str, Any], target: str) -> Path:
    """The repository path mounted at ``target`` in the service."""
    for volume in service["volumes"]:
        source, _, rest = str(volume).partition(":")
        if rest.split(":")[0] == target:
            return ROOT / source
    raise AssertionError(f"nothing mounted at {target}")


def test_prometheus_scrapes_the_api_and_each_worker_where_they_listen(compose: dict[str, Any]) -> None:
    prometheus = services(compose)["prometheus"]
    config = yaml.safe_load(mounted(prometheus, "/etc/prometheus/prometheus.yml").read_text())
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    targets = {t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    api_port = services(compose)["api"]["command"][-1]
    workers = [name for name in services(compose) if name.startswith("worker-")]
    expected = {f"api:{api_port}"} | {
        f"{name}:{services(compose)[name]['environment']['TTSQ_WORKER__METRICS_PORT']}" for name in workers
    }
    assert targets == expected
    assert all(job["metrics_path"] == "/metrics" for job in config["scrape_configs"])
    # The worker listens on loopback unless told otherwise: Prometheus, in another container, must reach it.
    assert all(services(compose)[name]["environment"].get("TTSQ_WORKER__METRICS_HOST") == "0.0.0.0" for name in workers)


def test_grafana_is_provisioned_with_the_dashboard(compose: dict[str, Any]) -> None:
    grafana = services(compose)["grafana"]
    provisioning = mounted(grafana, "/etc/grafana/provisioning")
    providers = yaml.safe_load((provisioning / "dashboards" / "ttsq.yml").read_text())["providers"]
    dashboards_in_container = providers[0]["options"]["path"]
    folder = mounted(grafana, dashboards_in_container)
    dashboard = json.loads((folder / "ttsq.json").read_text())
    assert dashboard["panels"]
    assert all(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    assert "GF_SECURITY_ADMIN_PASSWORD" in grafana["environment"]


SENTINEL_EXAMPLE = re.compile(r"^  # (TTSQ_REDIS_SENTINEL__\w+: .*)$", re.MULTILINE)
"""A line of the commented Sentinel example in ``x-ttsq-env``."""


def test_commented_sentinel_example_builds_valid_production_settings(compose: dict[str, Any]) -> None:
    """Uncommented as it says, the Sentinel example gives every ttsq service production settings that
    find Redis through the sentinels, and compose refuses to start without the passwords."""
    lines = SENTINEL_EXAMPLE.findall((ROOT / "docker-compose.yml").read_text())
    example: dict[str, str] = yaml.safe_load("\n".join(lines))
    assert set(example) == {
        f"TTSQ_REDIS_SENTINEL__{name}" for name in ("HOSTS", "MASTER", "PASSWORD", "SENTINEL_PASSWORD")
    }
    operator = {**OPERATOR_ENV, "REDIS_SENTINEL_PASSWORD": "Hs7d2Kq9Lm4Xw8Rz"}
    for variable in ("REDIS_PASSWORD", "REDIS_SENTINEL_PASSWORD"):
        without = {key: value for key, value in operator.items() if key != variable}
        with pytest.raises(MissingVariable):
            service_env({"environment": example}, without)
    for name in TTSQ_SERVICES:
        env = {**service_env(services(compose)[name], operator), **service_env({"environment": example}, operator)}
        with pytest.MonkeyPatch.context() as patch:
            for key in [key for key in os.environ if key.startswith("TTSQ_")]:
                patch.delenv(key)
            for key, value in env.items():
                if key.startswith("TTSQ_"):
                    patch.setenv(key, value)
            settings = Settings(_env_file=None)
        assert settings.redis_sentinel.enabled, name
        assert settings.redis_sentinel.addresses[0] == ("sentinel-0", 26379), name


OTLP_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
JAEGER_OTLP = "http://jaeger:4318"
"""The endpoint the compose file's header tells an operator to set for its Jaeger: the service's name
and OTLP/HTTP's port."""
TRACED_SERVICES = (*TTSQ_SERVICES, "beat")


def tracing_problems(compose: dict[str, Any], text: str) -> list[str]:
    """Every ttsq service exports spans where the operator sets ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
    nowhere else (the variable then empty: off); Jaeger runs only in the ``tracing`` profile, at the
    address the header tells the operator to set, its UI on the host's loopback only, its OTLP port
    reachable on the compose network only."""
    problems = []
    for name in TRACED_SERVICES:
        service = services(compose)[name]
        if OTLP_VARIABLE not in service.get("environment", {}):
            problems.append(f"{name}: no {OTLP_VARIABLE}")
            continue
        if service_env(service, OPERATOR_ENV)[OTLP_VARIABLE] != "":
            problems.append(f"{name}: traces without being asked")
        if service_env(service, {**OPERATOR_ENV, OTLP_VARIABLE: JAEGER_OTLP})[OTLP_VARIABLE] != JAEGER_OTLP:
            problems.append(f"{name}: does not take the operator's {OTLP_VARIABLE}")
    jaeger = services(compose).get(str(urlsplit(JAEGER_OTLP).hostname))
    if jaeger is None:
        return [*problems, f"no service named as in {JAEGER_OTLP}"]
    if f"{OTLP_VARIABLE}={JAEGER_OTLP} docker compose --profile tracing up" not in text:
        problems.append("the header does not say how to turn Jaeger on")
    if jaeger.get("profiles") != ["tracing"]:
        problems.append("jaeger: runs without the tracing profile")
    if jaeger.get("command") or jaeger.get("entrypoint"):
        problems.append("jaeger: not its all-in-one configuration (OTLP/HTTP on 4318, health on 13133)")
    if published(jaeger) != [(LOOPBACK, "16686")]:
        problems.append("jaeger: publishes more than its UI on the loopback")
    return problems


def test_traces_go_to_jaeger_only_when_asked(compose: dict[str, Any]) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert tracing_problems(compose, text) == []
    assert tracing_problems(compose, text.replace(JAEGER_OTLP, "http://localhost:4318")) == [
        "the header does not say how to turn Jaeger on"
    ]
    assert "13133/status" in " ".join(services(compose)["jaeger"]["healthcheck"]["test"])


def always_on(compose: dict[str, Any]) -> None:
    services(compose)["api"]["environment"][OTLP_VARIABLE] = JAEGER_OTLP


def not_passed(compose: dict[str, Any]) -> None:
    del services(compose)["webhooks"]["environment"][OTLP_VARIABLE]


def fixed_endpoint(compose: dict[str, Any]) -> None:
    services(compose)["worker-gpu0"]["environment"][OTLP_VARIABLE] = "${OTEL_ENDPOINT:-}"


def jaeger_always(compose: dict[str, Any]) -> None:
    del services(compose)["jaeger"]["profiles"]


def public_ui(compose: dict[str, Any]) -> None:
    services(compose)["jaeger"]["ports"] = ["16686:16686"]


def published_otlp(compose: dict[str, Any]) -> None:
    services(compose)["jaeger"]["ports"].append("4318:4318")


def renamed(compose: dict[str, Any]) -> None:
    services(compose)["tracing"] = services(compose).pop("jaeger")


@pytest.mark.parametrize(
    ("breaks", "problem"),
    [
        (always_on, "api: traces without being asked"),
        (not_passed, f"webhooks: no {OTLP_VARIABLE}"),
        (fixed_endpoint, f"worker-gpu0: does not take the operator's {OTLP_VARIABLE}"),
        (jaeger_always, "jaeger: runs without the tracing profile"),
        (public_ui, "jaeger: publishes more than its UI on the loopback"),
        (published_otlp, "jaeger: publishes more than its UI on the loopback"),
        (renamed, f"no service named as in {JAEGER_OTLP}"),
    ],
)
def test_trace_check_can_fail(compose: dict[str, Any], breaks: Callable[[dict[str, Any]], None], problem: str) -> None:
    broken = copy.deepcopy(compose)
    breaks(broken)
    text = (ROOT / "docker-compose.yml").read_text()
    assert problem in tracing_problems(broken, text), tracing_problems(broken, text)


@pytest.mark.parametrize("asked", [False, True])
def test_each_service_traces_exactly_when_asked(compose: dict[str, Any], asked: bool) -> None:
    """What each container gets, read by ttsq itself: the empty variable compose passes by default
    is tracing off."""
    operator = {**OPERATOR_ENV, OTLP_VARIABLE: JAEGER_OTLP} if asked else OPERATOR_ENV
    for name in TRACED_SERVICES:
        with pytest.MonkeyPatch.context() as patch:
            for variable in tracing.ENDPOINT_VARIABLES:
                patch.delenv(variable, raising=False)
            patch.setenv(OTLP_VARIABLE, service_env(services(compose)[name], operator)[OTLP_VARIABLE])
            assert tracing.enabled() is asked, name
