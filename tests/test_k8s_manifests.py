"""deploy/k8s, rendered by ``kubectl kustomize`` for each overlay and checked offline: every object
against the Kubernetes API schema, and the wiring against the code (settings, routes, ports, metric
and queue names, the image's user). Nothing is applied; no cluster is needed, only kubectl.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
import subprocess
import wsgiref.util
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from api.main import create_app
from api.metrics import METRICS_PATH
from cli.main import main as cli
from tts_core.voices.catalog import VoiceCatalog
from ttsq import tracing
from ttsq.constants import DEFAULT_QUEUE, MAINTENANCE_QUEUE, bulk_segments_queue, interactive_queue, model_queue
from ttsq.settings import Settings, settings_env
from workers.metrics import WorkerProbes, make_app

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
BASE, DEV, PRODUCTION = "base", "overlays/dev", "overlays/production"
ALL = (BASE, DEV, PRODUCTION)
GPU_OVERLAYS = (BASE, PRODUCTION)
KUBERNETES_VERSION = "1.30"
"""Oldest Kubernetes the manifests target; kubernetes-validate bundles the schemas of 1.25 and later."""
MIN_KUSTOMIZE_MAJOR = 5
NAMESPACE = "ttsq"
WORKER = "ttsq-worker"
API = "ttsq-api"
SECRET = "ttsq-secrets"
OPERATOR_SECRET = {
    "REDIS_PASSWORD": "9d4e1f7a2b8c6e0d3a5f7b1c",
    "TTSQ_REDIS_URL": "rediss://:9d4e1f7a2b8c6e0d3a5f7b1c@redis.example.com:6379/0",
    "TTSQ_S3__ACCESS_KEY_ID": "AKIAIOSFODNN7TTSQ001",
    "TTSQ_S3__SECRET_ACCESS_KEY": "kQ7v2Lx9TfR4wNz8HcBm3Yp6",
    "TTSQ_WEBHOOK_SECRET": "whsec_" + base64.b64encode(bytes(range(7, 39))).decode(),
    "FLOWER_BASIC_AUTH": "ops:Jf83kd9Qm2LxVw",
    "TTSQ_WYOMING_API_KEY": "ttsq_" + "Zq8" * 14 + "x",
}
"""The ttsq-secrets an operator creates for base and production (docs/DEPLOYMENT.md), real-looking."""
SECRET_KEYS = set(OPERATOR_SECRET)
DEV_SECRET_KEYS = SECRET_KEYS - {"TTSQ_REDIS_URL", "TTSQ_WYOMING_API_KEY"}
"""The dev overlay's Redis runs beside ttsq: base builds the URL from REDIS_PASSWORD; a Wyoming key
exists only once made in the cluster's Redis (the Secret's key is optional; development needs none)."""
GPU = "nvidia.com/gpu"
KEDA_API_VERSION = "keda.sh/v1alpha1"
MIN_GRACE_S = 300
"""Warm shutdown must outlast the longest task; also the least time the worker gets to load its model."""
CLUSTER_SCOPED = {"Namespace"}

Manifest = dict[str, Any]


def kubectl() -> str:
    """kubectl with kustomize v5, or a failure saying how to get it (never a skip: CI must render)."""
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl not found: install kubectl 1.27 or later (it carries kustomize v5), "
            "see https://kubernetes.io/docs/tasks/tools/; Debian bookworm's kubernetes-client is 1.20, too old"
        )
    version = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, check=False)
    kustomize = json.loads(version.stdout or "{}").get("kustomizeVersion", "")
    match = re.match(r"v(\d+)\.", kustomize)
    if match is None or int(match.group(1)) < MIN_KUSTOMIZE_MAJOR:
        pytest.fail(f"{path} carries kustomize {kustomize or 'unknown'}; install kubectl 1.27 or later (kustomize v5)")
    return path


@cache
def render(overlay: str) -> tuple[Manifest, ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(K8S / overlay)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, f"kubectl kustomize {overlay}: {result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def of_kind(objects: tuple[Manifest, ...], kind: str) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] == kind]


def deployment(objects: tuple[Manifest, ...], name: str) -> Manifest:
    found = [obj for obj in of_kind(objects, "Deployment") if obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one Deployment {name}"
    return found[0]


def pod_spec(obj: Manifest) -> Manifest:
    spec: Manifest = obj["spec"]["template"]["spec"]
    return spec


def containers(obj: Manifest) -> list[Manifest]:
    result: list[Manifest] = pod_spec(obj)["containers"]
    return result


def is_ttsq_image(image: str) -> bool:
    """``ttsq:latest``, ``registry.example.com/ttsq:0.1.0``: the project's own image, any registry."""
    return re.split(r"[:@]", image.rsplit("/", 1)[-1])[0] == "ttsq"


def ttsq_containers(objects: tuple[Manifest, ...]) -> Iterator[tuple[str, Manifest]]:
    for obj in of_kind(objects, "Deployment"):
        for container in containers(obj):
            if is_ttsq_image(container["image"]):
                yield obj["metadata"]["name"], container


def config_data(objects: tuple[Manifest, ...]) -> dict[str, str]:
    """The one generated ttsq-config (its name carries kustomize's hash suffix)."""
    found = [obj for obj in of_kind(objects, "ConfigMap") if obj["metadata"]["name"].startswith("ttsq-config")]
    assert len(found) == 1, "expected one ttsq-config ConfigMap"
    data: dict[str, str] = found[0]["data"]
    return data


def secret_values(objects: tuple[Manifest, ...]) -> dict[str, str] | None:
    """ttsq-secrets as generated by the dev overlay; None where the overlay leaves it to the operator."""
    found = [obj for obj in of_kind(objects, "Secret") if obj["metadata"]["name"].startswith(SECRET)]
    if not found:
        return None
    return {key: base64.b64decode(value).decode() for key, value in found[0]["data"].items()}


def expand(value: str, env: Mapping[str, str | None]) -> str | None:
    """The kubelet's expansion of ``$(VAR)`` (variables defined before, ``$$`` escapes); None where a
    variable it uses is known only at run time. Undefined variables stay as written, as in Kubernetes."""
    unknown = False

    def one(match: re.Match[str]) -> str:
        nonlocal unknown
        if match.group(1):
            return "$"
        name = match.group(2)
        if name in env and env[name] is None:
            unknown = True
        return env.get(name) or match.group(0)

    expanded = re.sub(r"\$(?:(\$)|\(([A-Za-z_][A-Za-z0-9_]*)\))", one, value)
    return None if unknown else expanded


def container_env(
    container: Manifest, objects: tuple[Manifest, ...], operator_secret: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """What the container's environment holds: ConfigMap values, plain values (expanded) and the dev
    Secret's values, or ``operator_secret``'s where the overlay leaves the Secret to the operator; None
    for values known only at run time (downward API, a Secret the operator makes)."""
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, f"{container['name']}: secrets go in env, key by key"
        env.update(config_data(objects))
    secrets = secret_values(objects) or operator_secret or {}
    for entry in container.get("env", []):
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        value = entry.get("value")
        env[entry["name"]] = secrets.get(ref["key"]) if ref else None if value is None else expand(value, env)
    return env


def test_expansion_follows_the_kubelet() -> None:
    env = {"A": "x", "RUNTIME": None}
    assert expand("$(A)-$$(A)-$(UNDEFINED)", env) == "x-$(A)-$(UNDEFINED)"
    assert expand("redis://:$(RUNTIME)@redis", env) is None


def resolve_port(container: Manifest, port: int | str) -> int:
    """A probe's or Service's port, by number or by the container's port name."""
    declared = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    if isinstance(port, str):
        assert port in declared, f"{container['name']} declares no port named {port!r}"
        return int(declared[port])
    assert port in declared.values(), f"{container['name']} declares no port {port}"
    return port


def probes(container: Manifest) -> Iterator[tuple[str, Manifest]]:
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            yield kind, container[kind]


# --- Rendering and schema -----------------------------------------------------------------------


@pytest.mark.parametrize("overlay", ALL)
def test_objects_match_the_kubernetes_schema(overlay: str) -> None:
    for obj in render(overlay):
        if obj["apiVersion"] == KEDA_API_VERSION:
            continue  # a CRD, not in the bundled schemas: test_worker_autoscaling checks it
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_schema_check_can_fail() -> None:
    broken = json.loads(json.dumps(deployment(render(BASE), API)))
    broken["spec"]["template"]["spec"]["contaners"] = broken["spec"]["template"]["spec"].pop("containers")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", ALL)
def test_everything_lives_in_the_namespace(overlay: str) -> None:
    for obj in render(overlay):
        if obj["kind"] in CLUSTER_SCOPED:
            assert obj["metadata"]["name"] == NAMESPACE
        else:
            assert obj["metadata"].get("namespace") == NAMESPACE, f"{obj['kind']} {obj['metadata']['name']}"


# --- Settings and secrets -----------------------------------------------------------------------


@pytest.mark.parametrize("overlay", ALL)
def test_environment_names_are_real_settings(overlay: str) -> None:
    known = settings_env(Settings(_env_file=None)).keys()
    objects = render(overlay)
    names = set(config_data(objects)) | set(secret_values(objects) or {})
    for _, container in ttsq_containers(objects):
        names |= set(container_env(container, objects))
    unknown = sorted(name for name in names if name.startswith("TTSQ_") and name not in known)
    assert unknown == [], f"{overlay}: {unknown} match no Settings field"


@pytest.mark.parametrize("overlay", ALL)
def test_settings_accept_the_values(overlay: str) -> None:
    """Each ttsq container's environment builds a valid Settings (types, literals, the validator with
    its production checks, given the operator's real secrets where the overlay makes none)."""
    objects = render(overlay)
    for name, container in ttsq_containers(objects):
        with pytest.MonkeyPatch.context() as patch:
            for key, value in container_env(container, objects, OPERATOR_SECRET).items():
                if key.startswith("TTSQ_") and value is not None:
                    patch.setenv(key, value)
            try:
                Settings(_env_file=None)
            except ValueError as e:
                pytest.fail(f"{overlay} {name}: {e}")


@pytest.mark.parametrize("overlay", ALL)
def test_secrets_come_from_ttsq_secrets(overlay: str) -> None:
    objects = render(overlay)
    assert not SECRET_KEYS & set(config_data(objects)), "a secret in the ConfigMap"
    for _, container in ttsq_containers(objects):
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["name"].startswith(SECRET), entry
                assert ref["key"] in SECRET_KEYS, entry


def test_only_dev_defines_the_secret() -> None:
    assert secret_values(render(BASE)) is None
    assert secret_values(render(PRODUCTION)) is None
    assert set(secret_values(render(DEV)) or {}) == DEV_SECRET_KEYS


def redis_auth_problems(objects: tuple[Manifest, ...], overlay: str) -> list[str]:
    """Every ttsq container reaches Redis with a password from ttsq-secrets: the URL built from
    REDIS_PASSWORD (base, dev) or taken whole from the Secret (production)."""
    problems = []
    for name, container in ttsq_containers(objects):
        entries = {entry["name"]: entry for entry in container.get("env", [])}
        url = entries.get("TTSQ_REDIS_URL", {})
        if "value" in url and "valueFrom" in url:
            problems.append(f"{name}: TTSQ_REDIS_URL has both value and valueFrom")
        elif overlay == PRODUCTION:
            if url.get("valueFrom", {}).get("secretKeyRef", {}).get("key") != "TTSQ_REDIS_URL":
                problems.append(f"{name}: TTSQ_REDIS_URL does not come from the Secret")
        else:
            env = container_env(container, objects, OPERATOR_SECRET)
            password = env.get("REDIS_PASSWORD")
            if password is None or urlsplit(env.get("TTSQ_REDIS_URL") or "").password != password:
                problems.append(f"{name}: TTSQ_REDIS_URL does not carry REDIS_PASSWORD")
        if "TTSQ_REDIS_URL" in config_data(objects):
            problems.append("TTSQ_REDIS_URL in the ConfigMap")
    return problems


@pytest.mark.parametrize("overlay", ALL)
def test_ttsq_reaches_redis_with_a_password(overlay: str) -> None:
    assert redis_auth_problems(render(overlay), overlay) == []


def test_redis_auth_check_can_fail() -> None:
    objects = copy.deepcopy(render(BASE))
    for entry in containers(deployment(objects, API))[0]["env"]:
        if entry["name"] == "TTSQ_REDIS_URL":
            entry["value"] = "redis://redis:6379/0"
    assert redis_auth_problems(objects, BASE) == [f"{API}: TTSQ_REDIS_URL does not carry REDIS_PASSWORD"]
    objects = copy.deepcopy(render(PRODUCTION))
    for entry in containers(deployment(objects, WORKER))[0]["env"]:
        if entry["name"] == "TTSQ_REDIS_URL":
            entry["value"] = "redis://redis.example.com:6379/0"
    assert redis_auth_problems(objects, PRODUCTION) == [f"{WORKER}: TTSQ_REDIS_URL has both value and valueFrom"]


def test_dev_redis_demands_the_password() -> None:
    """The dev overlay's Redis reads REDIS_PASSWORD from the Secret into requirepass (on standard
    input, not its command line), and its probes authenticate."""
    objects = render(DEV)
    (redis,) = containers(deployment(objects, "redis"))
    env = {entry["name"]: entry["valueFrom"]["secretKeyRef"] for entry in redis["env"]}
    assert env["REDIS_PASSWORD"] == env["REDISCLI_AUTH"]
    assert env["REDIS_PASSWORD"]["name"].startswith(SECRET)  # with the generator's hash suffix
    assert env["REDIS_PASSWORD"]["key"] == "REDIS_PASSWORD"
    script = " ".join(redis["command"] + redis["args"])
    assert script.startswith("sh -c exec docker-entrypoint.sh redis-server ")
    assert ' - <<EOF\nrequirepass "$REDIS_PASSWORD"\nEOF' in script
    assert "--requirepass" not in script
    assert "--protected-mode yes" in script
    for kind, probe in probes(redis):
        assert probe["exec"]["command"][-1] == "redis-cli ping | grep -q PONG", kind
    (api,) = containers(deployment(objects, API))
    url = container_env(api, objects)["TTSQ_REDIS_URL"] or ""
    assert urlsplit(url).password == (secret_values(objects) or {})["REDIS_PASSWORD"]


def test_dev_secrets_are_refused_in_production() -> None:
    """Each public dev value, alone among real secrets, keeps production settings from starting."""
    objects = render(DEV)
    (api,) = containers(deployment(objects, API))
    dev = {key: value for key, value in container_env(api, objects).items() if key.startswith("TTSQ_") and value}
    real = {
        key: OPERATOR_SECRET[key]
        for key in ("TTSQ_S3__ACCESS_KEY_ID", "TTSQ_S3__SECRET_ACCESS_KEY", "TTSQ_WEBHOOK_SECRET")
    }
    real["TTSQ_REDIS_URL"] = f"redis://:{OPERATOR_SECRET['REDIS_PASSWORD']}@redis:6379/0"
    production = dev | real | {"TTSQ_ENVIRONMENT": "production"}
    for key in (None, "TTSQ_REDIS_URL", "TTSQ_S3__SECRET_ACCESS_KEY", "TTSQ_WEBHOOK_SECRET"):
        with pytest.MonkeyPatch.context() as patch:
            for name, value in (production | ({key: dev[key]} if key else {})).items():
                patch.setenv(name, value)
            if key is None:
                assert Settings(_env_file=None).environment == "production"  # the real secrets pass
            else:
                with pytest.raises(ValueError, match=key):
                    Settings(_env_file=None)


@pytest.mark.parametrize("overlay", ALL)
def test_flower_is_private_and_behind_basic_auth(overlay: str) -> None:
    objects = render(overlay)
    (flower,) = containers(deployment(objects, "ttsq-flower"))
    auth = {e["name"]: e for e in flower["env"]}["FLOWER_BASIC_AUTH"]["valueFrom"]["secretKeyRef"]
    assert auth["name"].startswith(SECRET)
    assert auth["key"] == "FLOWER_BASIC_AUTH"
    assert not any(part.startswith(("--basic_auth", "--basic-auth")) for part in flower["command"])
    for service in of_kind(objects, "Service"):
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP", service["metadata"]["name"]
    assert of_kind(objects, "Ingress") == [], "nothing is exposed but through the operator's own Ingress"


# --- Processes, probes, ports -------------------------------------------------------------------


@pytest.mark.parametrize("overlay", ALL)
def test_commands_exist_in_the_cli(overlay: str) -> None:
    for name, container in ttsq_containers(render(overlay)):
        command = container["command"]
        if command[0] == "ttsq":
            assert command[1] in cli.commands, f"{name}: ttsq has no {command[1]!r} command"
        else:
            assert command[:3] == ["celery", "-A", "workers.app"], name


@pytest.mark.parametrize("overlay", ALL)
def test_api_probes_are_real_routes(overlay: str) -> None:
    # The OpenAPI paths, not app.routes: FastAPI 0.16x keeps included routers' routes out of that list.
    routes = set(create_app(Settings(_env_file=None)).openapi()["paths"])
    api = deployment(render(overlay), API)
    (container,) = containers(api)
    kinds = dict(probes(container))
    assert kinds["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert kinds["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for kind, probe in kinds.items():
        assert probe["httpGet"]["path"] in routes, f"{kind}: no route {probe['httpGet']['path']}"
        assert resolve_port(container, probe["httpGet"]["port"]) == 8000


def node_name_and_ping(container: Manifest) -> tuple[str, str]:
    """The Celery node name a worker starts as, and the one its liveness probe pings."""
    command = container["command"]
    name = command[command.index("--name") + 1]
    ping = " ".join(container["livenessProbe"]["exec"]["command"])
    match = re.search(r'--destination "?([^"\s]+)"?', ping)
    assert match, ping
    return name, match.group(1)


@pytest.mark.parametrize("overlay", ALL)
def test_liveness_pings_the_pod_own_node(overlay: str) -> None:
    """The kubelet expands $(VAR) in a probe only for plain values: POD_NAME (downward API) must go
    through a shell there, as ${POD_NAME}, while the container's command uses $(POD_NAME)."""
    for name in (WORKER, "ttsq-webhooks"):
        (container,) = containers(deployment(render(overlay), name))
        node, pinged = node_name_and_ping(container)
        assert "$(POD_NAME)" in node
        assert pinged == node.replace("$(POD_NAME)", "${POD_NAME}"), f"{name}: starts as {node}, pings {pinged}"
        assert container["livenessProbe"]["exec"]["command"][:2] == ["sh", "-c"]
        downward = {e["name"] for e in container["env"] if "fieldRef" in e.get("valueFrom", {})}
        assert downward == {"POD_NAME"}


def worker_serves(path: str) -> bool:
    """Whether the worker's own HTTP server (workers.metrics) answers ``path`` with anything but 404."""
    environ: dict[str, Any] = {"PATH_INFO": path}
    wsgiref.util.setup_testing_defaults(environ)
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None, /) -> Callable[[bytes], None]:
        statuses.append(status)
        return lambda data: None

    make_app(WorkerProbes())(environ, start_response)
    return not statuses[0].startswith("404")


def test_worker_path_check_can_fail() -> None:
    assert worker_serves("/readyz")
    assert not worker_serves("/ready")


@pytest.mark.parametrize("overlay", ALL)
def test_worker_serves_on_the_metrics_port(overlay: str) -> None:
    objects = render(overlay)
    worker = deployment(objects, WORKER)
    (container,) = containers(worker)
    port = int(config_data(objects)["TTSQ_WORKER__METRICS_PORT"])
    assert resolve_port(container, "metrics") == port
    # Loopback by default; the kubelet's probes and Prometheus come to the pod's own address.
    assert config_data(objects)["TTSQ_WORKER__METRICS_HOST"] == "0.0.0.0"
    for kind, probe in probes(container):
        if "httpGet" in probe:
            assert resolve_port(container, probe["httpGet"]["port"]) == port, kind
            assert probe["httpGet"]["path"] == "/readyz", kind
    annotations = worker["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    assert worker_serves(annotations["prometheus.io/path"])


@pytest.mark.parametrize("overlay", ALL)
def test_worker_shuts_down_warm_and_may_load_slowly(overlay: str) -> None:
    worker = deployment(render(overlay), WORKER)
    assert pod_spec(worker)["terminationGracePeriodSeconds"] >= MIN_GRACE_S
    (container,) = containers(worker)
    startup = container["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] >= MIN_GRACE_S


def test_api_is_scraped_by_prometheus() -> None:
    api = deployment(render(BASE), API)
    annotations = api["spec"]["template"]["metadata"]["annotations"]
    (container,) = containers(api)
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == METRICS_PATH
    assert int(annotations["prometheus.io/port"]) == resolve_port(container, "http")
    assert api["spec"]["replicas"] >= 2


@pytest.mark.parametrize("overlay", ALL)
def test_ttsq_containers_run_as_the_image_user(overlay: str) -> None:
    uid = int(re.findall(r"useradd .*--uid (\d+)", (ROOT / "Dockerfile").read_text())[0])
    objects = render(overlay)
    for obj in of_kind(objects, "Deployment"):
        if not any(is_ttsq_image(c["image"]) for c in containers(obj)):
            continue
        pod = pod_spec(obj)["securityContext"]
        assert pod["runAsNonRoot"] is True, obj["metadata"]["name"]
        assert pod["runAsUser"] == uid, obj["metadata"]["name"]
        volumes = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
        for container in containers(obj):
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            tmp = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
            assert tmp, f"{container['name']}: /tmp must be writable"
            assert "emptyDir" in volumes[tmp[0]["name"]], container["name"]


# --- GPUs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_each_worker_takes_exactly_one_gpu(overlay: str) -> None:
    worker = deployment(render(overlay), WORKER)
    (container,) = containers(worker)
    resources = container["resources"]
    assert int(resources["limits"][GPU]) == 1
    assert int(resources.get("requests", {}).get(GPU, 1)) == 1
    assert container_env(container, render(overlay))["TTSQ_WORKER__DEVICE"] == "cuda"
    tolerations = pod_spec(worker)["tolerations"]
    assert any(t["key"] == GPU and t["effect"] == "NoSchedule" for t in tolerations)


def test_dev_worker_runs_on_cpu() -> None:
    (container,) = containers(deployment(render(DEV), WORKER))
    assert GPU not in container["resources"].get("limits", {})
    assert GPU not in container["resources"].get("requests", {})
    assert container_env(container, render(DEV))["TTSQ_WORKER__DEVICE"] == "cpu"


@pytest.mark.parametrize("overlay", ALL)
def test_nothing_sets_cuda_visible_devices(overlay: str) -> None:
    """The NVIDIA device plugin sets it to the GPU it allocated; a fixed value would point elsewhere."""
    objects = render(overlay)
    assert "CUDA_VISIBLE_DEVICES" not in config_data(objects)
    for name, container in ttsq_containers(objects):
        assert "CUDA_VISIBLE_DEVICES" not in container_env(container, objects), name


# --- Selectors, Services, disruption budget -----------------------------------------------------


def pod_labels(obj: Manifest) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


@pytest.mark.parametrize("overlay", ALL)
def test_deployment_selectors_match_their_pods(overlay: str) -> None:
    deployments = of_kind(render(overlay), "Deployment")
    for obj in deployments:
        selector = obj["spec"]["selector"]["matchLabels"]
        assert selects(selector, pod_labels(obj)), obj["metadata"]["name"]
        overlap = [o["metadata"]["name"] for o in deployments if o is not obj and selects(selector, pod_labels(o))]
        assert overlap == [], f"{obj['metadata']['name']} also selects {overlap}"


@pytest.mark.parametrize("overlay", ALL)
def test_services_reach_a_declared_port(overlay: str) -> None:
    objects = render(overlay)
    for service in of_kind(objects, "Service"):
        name = service["metadata"]["name"]
        targets = [d for d in of_kind(objects, "Deployment") if selects(service["spec"]["selector"], pod_labels(d))]
        assert len(targets) == 1, f"Service {name} selects {len(targets)} Deployments"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert any(
                target in (p.get("name"), p["containerPort"])
                for c in containers(targets[0])
                for p in c.get("ports", [])
            ), f"Service {name}: no container declares port {target}"


@pytest.mark.parametrize("overlay", ALL)
def test_a_disruption_budget_guards_the_workers(overlay: str) -> None:
    objects = render(overlay)
    worker = deployment(objects, WORKER)
    budgets = [
        b
        for b in of_kind(objects, "PodDisruptionBudget")
        if selects(b["spec"]["selector"]["matchLabels"], pod_labels(worker))
    ]
    assert len(budgets) == 1
    assert budgets[0]["spec"]["maxUnavailable"] == 1


# --- Images -------------------------------------------------------------------------------------


def test_production_pins_every_image() -> None:
    for obj in of_kind(render(PRODUCTION), "Deployment"):
        for container in containers(obj):
            image = container["image"]
            last = image.rsplit("/", 1)[-1]
            assert "@" in last or (":" in last and not last.endswith(":latest")), f"{image} is not pinned"
            assert "/" in image, f"{image}: name the registry"


# --- KEDA ---------------------------------------------------------------------------------------


def exposed_metric_names() -> set[str]:
    """``ttsq_*`` metric names quoted in the API's source (prometheus_client takes them as strings)."""
    names: set[str] = set()
    for path in (ROOT / "api").rglob("*.py"):
        names |= set(re.findall(r"""["'](ttsq_[a-z0-9_]+)["']""", path.read_text()))
    return names


def queried_metrics(query: str) -> set[str]:
    return {re.sub(r"_(bucket|sum|count|total)$", "", name) for name in re.findall(r"\bttsq_[a-z0-9_]+", query)}


def same_redis(url: str, address: str, namespace: str) -> bool:
    """Whether KEDA's host:port names the server of TTSQ_REDIS_URL (KEDA runs in its own namespace,
    so an in-cluster short name must be spelled out in full)."""
    parts = urlsplit(url)
    host, _, port = address.rpartition(":")
    in_cluster = {f"{parts.hostname}.{namespace}.svc", f"{parts.hostname}.{namespace}.svc.cluster.local"}
    return int(port) == (parts.port or 6379) and (host == parts.hostname or host in in_cluster)


def scaled_object(overlay: str) -> Manifest:
    found = [obj for obj in render(overlay) if obj["kind"] == "ScaledObject"]
    assert len(found) == 1
    return found[0]


def triggers(obj: Manifest) -> dict[str, dict[str, str]]:
    result: dict[str, dict[str, str]] = {}
    for trigger in obj["spec"]["triggers"]:
        metadata = trigger["metadata"]
        assert all(isinstance(v, str) for v in metadata.values()), f"KEDA takes strings only: {metadata}"
        result[trigger.get("name", trigger["type"])] = metadata
    return result


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_worker_autoscaling(overlay: str) -> None:
    obj = scaled_object(overlay)
    assert obj["apiVersion"] == KEDA_API_VERSION
    target = obj["spec"]["scaleTargetRef"]
    assert target.get("kind", "Deployment") == "Deployment"
    assert deployment(render(overlay), target["name"])["metadata"]["name"] == WORKER
    assert obj["spec"]["minReplicaCount"] >= 1, "interactive jobs need a warm worker (docs/DEPLOYMENT.md)"
    assert obj["spec"]["maxReplicaCount"] > obj["spec"]["minReplicaCount"]
    assert "replicas" not in deployment(render(overlay), WORKER)["spec"], "KEDA owns the worker count"
    assert set(triggers(obj)) == {"bulk-age", "bulk-depth", "redis"}
    assert [t["type"] for t in obj["spec"]["triggers"]] == ["prometheus", "prometheus", "redis"]


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
@pytest.mark.parametrize("name", ["bulk-age", "bulk-depth"])
def test_prometheus_triggers_read_every_bulk_segment_queue_the_api_exposes(overlay: str, name: str) -> None:
    """Each Prometheus trigger reads a metric the API exposes, over the bulk segment queues: the
    general one and every model queue (voice affinity), never the interactive or entry queue."""
    prometheus = triggers(scaled_object(overlay))[name]
    assert urlsplit(prometheus["serverAddress"]).scheme in ("http", "https")
    assert float(prometheus["threshold"]) > 0
    missing = queried_metrics(prometheus["query"]) - exposed_metric_names()
    assert queried_metrics(prometheus["query"])
    assert not missing, f"api/ exposes no {sorted(missing)}"
    (matcher,) = re.findall(r'queue=~"([^"]+)"', prometheus["query"])
    bulk = [
        bulk_segments_queue(DEFAULT_QUEUE),
        *(model_queue(DEFAULT_QUEUE, key) for key in VoiceCatalog.discover().model_keys()),
    ]
    assert all(re.fullmatch(matcher, queue) for queue in bulk), (matcher, bulk)
    others = [
        interactive_queue(DEFAULT_QUEUE),
        DEFAULT_QUEUE,
        MAINTENANCE_QUEUE,
        "tts.modelx",
        model_queue(DEFAULT_QUEUE, "kokoro", interactive=True),
    ]
    assert not any(re.fullmatch(matcher, queue) for queue in others)


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_redis_trigger_watches_the_segment_queue_on_our_redis(overlay: str) -> None:
    objects = render(overlay)
    redis = triggers(scaled_object(overlay))["redis"]
    assert redis["listName"] == bulk_segments_queue(DEFAULT_QUEUE)
    assert int(redis["listLength"]) > 0
    (container,) = containers(deployment(objects, WORKER))
    env = container_env(container, objects, OPERATOR_SECRET)
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]["key"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs[redis["passwordFromEnv"]] == "REDIS_PASSWORD", "KEDA authenticates with the Redis password"
    address, url = env[redis["addressFromEnv"]], env["TTSQ_REDIS_URL"]
    assert address is not None
    assert url is not None
    if refs.get("TTSQ_REDIS_URL"):
        return  # production: the operator's URL, in the Secret; docs/DEPLOYMENT.md asks for the same server
    assert same_redis(url, address, NAMESPACE), f"KEDA watches {address}, ttsq uses {url}"
    assert redis["databaseIndex"] == (urlsplit(url).path.strip("/") or "0")


def test_same_redis_can_fail() -> None:
    assert same_redis("redis://redis:6379/0", "redis.ttsq.svc.cluster.local:6379", "ttsq")
    assert not same_redis("redis://redis:6379/0", "redis.other.svc.cluster.local:6379", "ttsq")
    assert not same_redis("redis://redis.example.com:6380/0", "redis.example.com:6379", "ttsq")


# --- Redis run by Sentinel ----------------------------------------------------------------------

SENTINEL_PATCH = "redis-sentinel.yaml"


def sentinel_production(root: Path) -> tuple[Manifest, ...]:
    """The production overlay switched to Sentinel as its kustomization's comments say: the Sentinel
    patch in place of the URL one, the ``TTSQ_REDIS_SENTINEL__*`` literals uncommented (rendered from
    a copy of deploy/k8s under ``root``)."""
    shutil.copytree(K8S, root / "k8s")
    kustomization = root / "k8s" / PRODUCTION / "kustomization.yaml"
    text = kustomization.read_text()
    assert "  - path: redis-url-from-secret.yaml\n" in text
    text = text.replace("  - path: redis-url-from-secret.yaml\n", f"  - path: {SENTINEL_PATCH}\n")
    text, uncommented = re.subn(r"^(\s*)# (- TTSQ_REDIS_SENTINEL__\w+=)", r"\1\2", text, flags=re.MULTILINE)
    assert uncommented == 2, "the kustomization shows TTSQ_REDIS_SENTINEL__HOSTS and __MASTER, commented"
    kustomization.write_text(text)
    result = subprocess.run(
        [kubectl(), "kustomize", str(kustomization.parent)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, f"kubectl kustomize (Sentinel): {result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def test_production_switches_to_sentinel_as_documented(tmp_path: Path) -> None:
    """Every ttsq container then finds Redis through the sentinels, with the Secret's REDIS_PASSWORD
    (no TTSQ_REDIS_URL left, none needed in the Secret), and passes the production checks."""
    objects = sentinel_production(tmp_path)
    secret = {key: value for key, value in OPERATOR_SECRET.items() if key != "TTSQ_REDIS_URL"}
    names = set()
    for name, container in ttsq_containers(objects):
        names.add(name)
        entries = {entry["name"]: entry for entry in container.get("env", [])}
        assert "TTSQ_REDIS_URL" not in entries, name
        ref = entries["TTSQ_REDIS_SENTINEL__PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": SECRET, "key": "REDIS_PASSWORD"}, name
        with pytest.MonkeyPatch.context() as patch:
            for key, value in container_env(container, objects, secret).items():
                if key.startswith("TTSQ_") and value is not None:
                    patch.setenv(key, value)
            settings = Settings(_env_file=None)
        assert settings.environment == "production", name
        assert settings.redis_sentinel.enabled, name
        assert settings.redis_sentinel.password is not None, name
        assert settings.redis_sentinel.password.get_secret_value() == OPERATOR_SECRET["REDIS_PASSWORD"], name
    assert names == {obj["metadata"]["name"] for obj in of_kind(objects, "Deployment")}
    for obj in of_kind(objects, "Deployment"):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


# --- Traces (components/tracing) ------------------------------------------------------------------

OTLP_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
COLLECTOR = "otel-collector"


def traced_production(root: Path) -> tuple[Manifest, ...]:
    """The production overlay with the tracing component, as its kustomization's comment says
    (rendered from a copy of deploy/k8s under ``root``)."""
    shutil.copytree(K8S, root / "k8s")
    kustomization = root / "k8s" / PRODUCTION / "kustomization.yaml"
    text, uncommented = re.subn(
        r"^# (components:\n)# (  - \.\./\.\./components/tracing\n)", r"\1\2", kustomization.read_text(), flags=re.M
    )
    assert uncommented == 1, "the production kustomization shows the tracing component, commented"
    kustomization.write_text(text)
    result = subprocess.run(
        [kubectl(), "kustomize", str(kustomization.parent)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, f"kubectl kustomize (traces): {result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, ...]:
    return traced_production(tmp_path_factory.mktemp("traced"))


def named(objects: tuple[Manifest, ...], kind: str, prefix: str) -> Manifest:
    """The one object of ``kind`` whose name is ``prefix`` (a generated one's, with kustomize's hash)."""
    found = [o for o in of_kind(objects, kind) if re.fullmatch(rf"{prefix}(-[a-z0-9]{{10}})?", o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {prefix}"
    return found[0]


def host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def collector_config_of(objects: tuple[Manifest, ...]) -> tuple[dict[str, Any], list[str]]:
    """The configuration the collector reads: the file its ``--config`` names, in the ConfigMap
    generated for it, mounted there; and the problems in finding it that way."""
    collector = deployment(objects, COLLECTOR)
    (container,) = containers(collector)
    config_map = named(objects, "ConfigMap", f"{COLLECTOR}-config")
    path = Path(next(arg.removeprefix("--config=") for arg in container["args"] if arg.startswith("--config=")))
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v.get("configMap", {}).get("name") for v in pod_spec(collector).get("volumes", [])}
    mounted_at = {mounts.get(volume) for volume, name in volumes.items() if name == config_map["metadata"]["name"]}
    problems = (
        [] if str(path.parent) in mounted_at else [f"collector: its configuration is not mounted at {path.parent}"]
    )
    return yaml.safe_load(config_map["data"].get(path.name, "{}")), problems


def collector_problems(objects: tuple[Manifest, ...]) -> list[str]:
    """The collector reads the configuration generated for it, receives OTLP/HTTP on every address of
    its pod at the port its Service serves, and passes what it receives through a pipeline of defined
    parts; its probes reach its health endpoint; every ttsq container exports to that Service."""
    collector = deployment(objects, COLLECTOR)
    (container,) = containers(collector)
    config, problems = collector_config_of(objects)
    host, port = host_port(config["receivers"]["otlp"]["protocols"]["http"]["endpoint"])
    if host != "0.0.0.0":
        problems.append("collector: OTLP/HTTP receiver not on every address of its pod")
    pipeline = config["service"]["pipelines"]["traces"]
    for part in ("receivers", "processors", "exporters"):
        undefined = [name for name in pipeline[part] if name not in config[part]]
        problems += [f"collector: pipeline {part[:-1]} {name!r} undefined" for name in undefined]
    health_host, health_port = host_port(config["extensions"]["health_check"]["endpoint"])
    probed = {resolve_port(container, probe["httpGet"]["port"]) for _, probe in probes(container)}
    if health_host != "0.0.0.0" or probed != {health_port}:
        problems.append("collector: probes miss the health_check endpoint")
    service = named(objects, "Service", COLLECTOR)
    if not selects(service["spec"]["selector"], pod_labels(collector)):
        problems.append("collector: its Service selects other pods")
    served = {p["port"]: resolve_port(container, p["targetPort"]) for p in service["spec"]["ports"]}
    return problems + export_problems(
        objects, {(COLLECTOR, number) for number, target in served.items() if target == port}
    )


def export_problems(objects: tuple[Manifest, ...], receivers: set[tuple[str, int]]) -> list[str]:
    """Every ttsq container exports to one of ``receivers`` (a Service's name and port)."""
    problems = []
    for name, container in ttsq_containers(objects):
        endpoint = container_env(container, objects, OPERATOR_SECRET).get(OTLP_VARIABLE)
        if endpoint is None:
            problems.append(f"{name}: no {OTLP_VARIABLE}")
        elif (urlsplit(endpoint).hostname, urlsplit(endpoint).port) not in receivers:
            problems.append(f"{name}: {endpoint} is not the collector's OTLP/HTTP receiver")
    return problems


def test_the_tracing_component_wires_ttsq_to_its_collector(traced: tuple[Manifest, ...]) -> None:
    assert collector_problems(traced) == []
    for obj in traced:
        if obj["apiVersion"] != KEDA_API_VERSION:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]["name"]
    for name, container in ttsq_containers(traced):
        with pytest.MonkeyPatch.context() as patch:
            for variable in tracing.ENDPOINT_VARIABLES:
                patch.delenv(variable, raising=False)
            patch.setenv(OTLP_VARIABLE, str(container_env(container, traced, OPERATOR_SECRET)[OTLP_VARIABLE]))
            assert tracing.enabled(), name


@pytest.mark.parametrize("overlay", ALL)
def test_no_overlay_traces_unless_asked(overlay: str) -> None:
    objects = render(overlay)
    assert not [name for name, c in ttsq_containers(objects) if OTLP_VARIABLE in container_env(c, objects)]
    assert not [o for o in objects if o["metadata"]["name"].startswith(COLLECTOR)]


def collector_config(objects: tuple[Manifest, ...], change: Callable[[dict[str, Any]], None]) -> None:
    config_map = named(objects, "ConfigMap", f"{COLLECTOR}-config")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    change(config)
    config_map["data"]["config.yaml"] = yaml.safe_dump(config)


def on_localhost(objects: tuple[Manifest, ...]) -> None:
    collector_config(objects, lambda c: c["receivers"]["otlp"]["protocols"]["http"].update(endpoint="localhost:4318"))


def other_service_port(objects: tuple[Manifest, ...]) -> None:
    named(objects, "Service", COLLECTOR)["spec"]["ports"][0]["port"] = 4317


def ttsq_not_told(objects: tuple[Manifest, ...]) -> None:
    del named(objects, "ConfigMap", "ttsq-config")["data"][OTLP_VARIABLE]


def undefined_exporter(objects: tuple[Manifest, ...]) -> None:
    collector_config(objects, lambda c: c["service"]["pipelines"]["traces"].update(exporters=["jaeger"]))


def health_elsewhere(objects: tuple[Manifest, ...]) -> None:
    collector_config(objects, lambda c: c["extensions"]["health_check"].update(endpoint="0.0.0.0:13134"))


def config_not_mounted(objects: tuple[Manifest, ...]) -> None:
    (container,) = containers(deployment(objects, COLLECTOR))
    container["args"] = ["--config=/etc/otelcol/config.yaml"]


@pytest.mark.parametrize(
    ("breaks", "problem"),
    [
        (on_localhost, "collector: OTLP/HTTP receiver not on every address of its pod"),
        (other_service_port, f"{API}: http://{COLLECTOR}:4318 is not the collector's OTLP/HTTP receiver"),
        (ttsq_not_told, f"{WORKER}: no {OTLP_VARIABLE}"),
        (undefined_exporter, "collector: pipeline exporter 'jaeger' undefined"),
        (health_elsewhere, "collector: probes miss the health_check endpoint"),
        (config_not_mounted, "collector: its configuration is not mounted at /etc/otelcol"),
    ],
)
def test_collector_check_can_fail(
    traced: tuple[Manifest, ...], breaks: Callable[[tuple[Manifest, ...]], None], problem: str
) -> None:
    broken = copy.deepcopy(traced)
    breaks(broken)
    assert problem in collector_problems(broken), collector_problems(broken)
