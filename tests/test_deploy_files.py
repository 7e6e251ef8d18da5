"""docker-compose.yml, the Dockerfile and redis.conf, checked by parsing (no Docker engine runs here)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from ttsq.ops.cli import main as cli
from ttsq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
TTSQ_SERVICES = ("api", "worker-gpu0", "webhooks", "flower")
MONITORING = ("prometheus", "grafana")


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
        *("redis", "s3", "api", "worker-gpu0", "webhooks", "flower"),
        *MONITORING,
    }
    for name, service in services(compose).items():  # monitoring is opt-in, the rest always runs
        assert service.get("profiles", []) == (["monitoring"] if name in MONITORING else []), name
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


def test_secrets_are_required_not_defaulted() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for variable in ("TTSQ_S3_ACCESS_KEY_ID", "TTSQ_S3_SECRET_ACCESS_KEY", "FLOWER_BASIC_AUTH", "TTSQ_WEBHOOK_SECRET"):
        uses = re.findall(r"\$\{" + variable + r"([^}]*)\}", text)
        assert uses, f"{variable} unused"
        assert all(use == ":?Variable not set" for use in uses), f"{variable} must use :?"


def test_services_point_at_compose_hostnames(compose: dict[str, Any]) -> None:
    env = services(compose)["api"]["environment"]
    assert env["TTSQ_REDIS_URL"] == "redis://redis:6379/0"
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


def test_flower_has_basic_auth(compose: dict[str, Any]) -> None:
    flower = services(compose)["flower"]
    assert "FLOWER_BASIC_AUTH" in flower["environment"]
    assert "flower" in flower["command"]


def test_commands_exist_in_the_cli(compose: dict[str, Any]) -> None:
    for name in ("api", "worker-gpu0", "webhooks"):
        command = services(compose)[name]["command"]
        assert command[0] == "ttsq"
        assert command[1] in cli.commands, f"{name}: ttsq has no {command[1]!r} command"


def test_redis_config_never_evicts() -> None:
    conf = (ROOT / "deploy" / "redis.conf").read_text()
    assert re.search(r"^maxmemory-policy noeviction$", conf, re.MULTILINE)
    assert re.search(r"^appendonly yes$", conf, re.MULTILINE)


def test_dockerfile_copies_every_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("api", "workers", "tts_core", "ttsq"):
        assert re.search(rf"^COPY {package} \./{package}$", dockerfile, re.MULTILINE), package
    assert "celeryconfig.py" in dockerfile
    assert re.search(r"^FROM python:3\.11", dockerfile, re.MULTILINE)


def test_the_web_page_ships_in_the_package() -> None:
    """The image installs ttsq with ``pip install .``: the page's files must be package data."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["api"]
    static = ROOT / "api" / "static"
    shipped = {path.name for pattern in patterns for path in (ROOT / "api").glob(pattern)}
    assert shipped == {path.name for path in static.iterdir()} >= {"index.html", "app.js", "style.css"}


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
