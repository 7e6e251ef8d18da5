"""``ttsq dev``: the whole stack in one foreground command, for development.

Starts Redis and SeaweedFS (unless the settings, from the environment or ``.env``, name a Redis URL or
an S3 endpoint: then those are used), one worker, the service worker, beat, the API, the Wyoming
server (on loopback, port 10200 unless ``--wyoming-port`` says otherwise) and Flower;
prints the URLs; starts again any child that dies, from the first start on (``cli.supervisor``:
Redis and SeaweedFS on the same port and data folder, Redis from its append-only file); stops every
child on Ctrl-C or SIGTERM, one waiting to be started again included. Every child gets every setting
(``settings_env``).
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis
from pydantic import SecretStr

from cli.commands import (
    SERVICE_WORKER_THREADS,
    VOICEVOX_PORT,
    api_argv,
    beat_argv,
    flower_argv,
    webhook_worker_argv,
    wyoming_argv,
)
from cli.embedded import LOOPBACK, RedisService, SeaweedService
from cli.processes import ManagedProcess, port_in_use
from cli.supervisor import Supervisor
from cli.workerpool import default_worker
from tts_core.base.stop_signal import SignalEvent, stop_on
from ttsq.constants import DEV_S3_ACCESS_KEY, DEV_S3_SECRET_KEY, WYOMING_PORT
from ttsq.errors import ServiceError
from ttsq.redis_clients import redis_client, redis_location
from ttsq.settings import DEFAULT_WORKER_METRICS_PORT, Settings, settings_env
from ttsq.storage import ObjectStore

READY_TIMEOUT_S = 180.0
OWN_REDIS_TIMEOUT_S = 2.0
"""How long the check of an operator's Redis waits to connect and for its answer."""
FRONT_STAGE, WORKERS_STAGE, STORES_STAGE = 2, 1, 0
"""The order of a stop (``Supervisor.stop``): the API, Wyoming and Flower together, then the workers
and beat together, then Redis and S3, which the others use until they end."""


class DevError(Exception):
    """The dev stack cannot start; the message says what to change."""


class StartInterrupted(Exception):
    """Ctrl-C or SIGTERM came while the stack was starting."""


@dataclass(frozen=True)
class DevPorts:
    api: int = 8000
    flower: int = 5555
    redis: int = 6379
    s3: int = 8333
    worker_metrics: int = DEFAULT_WORKER_METRICS_PORT
    wyoming: int = WYOMING_PORT
    voicevox: int = VOICEVOX_PORT


def _require_free(port: int, what: str, option: str) -> None:
    if port_in_use(port, LOOPBACK):
        raise DevError(f"port {port} ({what}) is already in use on {LOOPBACK}; stop whatever holds it or pass {option}")


class DevStack:
    """Owns every process it started: starts again each one that dies, stops them all in reverse order."""

    def __init__(self, data_dir: Path, ports: DevPorts, settings: Settings, stopping: SignalEvent) -> None:
        self.data_dir = data_dir
        self.ports = ports
        self.settings = settings
        self.supervisor = Supervisor("ttsq dev")
        self._stopping = stopping
        self._after_stop: list[Callable[[], None]] = []

    @property
    def processes(self) -> list[ManagedProcess]:
        return self.supervisor.processes

    @property
    def env(self) -> dict[str, str]:
        """The environment of every child: this one's, with every setting as it now stands."""
        return {**os.environ, **settings_env(self.settings)}

    def _wait(self, check: Callable[[], bool], what: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Supervise until ``check`` passes; :class:`StartInterrupted` if a stop is asked first."""
        if not self.supervisor.wait_until(check, timeout_s, what, self._stopping):
            raise StartInterrupted

    def _start_service(self, process: ManagedProcess, start: Callable[[], object], ready: Callable[[], bool]) -> None:
        """A local service's own start (its folders, the process, until it answers), supervised: if it
        dies meanwhile, the supervisor starts it again and the stack waits until it answers."""
        self.supervisor.watch(process, STORES_STAGE)
        try:
            start()
        except RuntimeError:  # it exited before answering; TimeoutError (not one) still ends the start
            self._wait(ready, process.name)

    def _own_redis(self) -> None:
        """Redis of the settings where they name one (a URL, or sentinels), else a private one."""
        if self.settings.redis_sentinel.enabled or "redis_url" in self.settings.model_fields_set:
            client = redis_client(self.settings, OWN_REDIS_TIMEOUT_S, OWN_REDIS_TIMEOUT_S)
            try:
                client.ping()
            except redis.RedisError as e:
                raise DevError(f"Redis at {redis_location(self.settings)} does not answer: {e}") from e
            finally:
                client.close()
            return
        _require_free(self.ports.redis, "Redis", "--redis-port")
        service = RedisService(self.data_dir / "redis", self.ports.redis, appendonly=True)
        self._start_service(service.process, service.start, lambda: _redis_answers(service.url))
        self.settings = self.settings.model_copy(update={"redis_url": service.url})

    def _own_s3(self) -> None:
        if self.settings.s3.endpoint_url is not None:
            try:
                ObjectStore(self.settings.s3).check()
            except ServiceError as e:
                raise DevError(f"TTSQ_S3__ENDPOINT_URL={self.settings.s3.endpoint_url}: {e}") from e
            return
        _require_free(self.ports.s3, "S3 / SeaweedFS", "--s3-port")
        service = SeaweedService(self.data_dir / "seaweedfs", self.settings.s3.bucket, self.ports.s3)
        s3 = self.settings.s3.model_copy(
            update={
                "endpoint_url": service.endpoint_url,
                "access_key_id": DEV_S3_ACCESS_KEY,
                "secret_access_key": SecretStr(DEV_S3_SECRET_KEY),
                "create_bucket": True,
            }
        )
        self._after_stop.append(service.stop)  # its process stopped by then: removes its sockets in /tmp
        self._start_service(service.process, service.start, lambda: _bucket_answers(ObjectStore(s3)))
        self.settings = self.settings.model_copy(update={"s3": s3})

    def _webhook_settings(self) -> None:
        """Development receivers live on this machine: allow private addresses unless the settings say
        otherwise, and sign with a secret kept in the data directory unless one is configured."""
        changes: dict[str, object] = {}
        if "webhook_allow_private" not in self.settings.model_fields_set:
            changes["webhook_allow_private"] = True
        if self.settings.webhook_secret is None:
            changes["webhook_secret"] = SecretStr(dev_webhook_secret(self.data_dir))
        self.settings = self.settings.model_copy(update=changes)

    def _spawn(
        self, name: str, argv: list[str], log_name: str | None, stage: int, env: dict[str, str] | None = None
    ) -> ManagedProcess:
        if self._stopping.is_set():  # Ctrl-C while a service was starting: start nothing more
            raise StartInterrupted
        log_path = self.data_dir / "logs" / log_name if log_name else None
        return self.supervisor.add(ManagedProcess(name, argv, log_path, {**self.env, **(env or {})}), stage)

    def start(self) -> None:
        """Start every child and wait until the API is ready. Raises :class:`DevError`,
        :class:`StartInterrupted`, ``ChildFailing`` (a child that keeps dying) or ``TimeoutError``."""
        _require_free(self.ports.api, "API", "--api-port")
        _require_free(self.ports.flower, "Flower", "--flower-port")
        _require_free(self.ports.worker_metrics, "worker metrics", "--worker-metrics-port")
        _require_free(self.ports.wyoming, "Wyoming", "--wyoming-port")
        _require_free(self.ports.voicevox, "VOICEVOX-compatible API", "--voicevox-port")
        self._own_redis()
        self._own_s3()
        self._webhook_settings()
        worker_settings = self.settings.worker.model_copy(
            update={"metrics_port": self.ports.worker_metrics, "metrics_host": LOOPBACK}
        )
        self.settings = self.settings.model_copy(update={"worker": worker_settings})
        worker = default_worker(self.settings, "worker1@%h", "INFO")
        self._spawn("worker", worker.argv, None, WORKERS_STAGE, worker.env)
        self._spawn(
            "webhooks", webhook_worker_argv(SERVICE_WORKER_THREADS, "webhooks@%h"), "webhooks.log", WORKERS_STAGE
        )
        self._spawn("beat", beat_argv(self.data_dir / "beat-schedule"), "beat.log", WORKERS_STAGE)
        self._spawn("api", api_argv(LOOPBACK, self.ports.api, self.ports.voicevox), None, FRONT_STAGE)
        self._spawn("wyoming", wyoming_argv(wyoming_uri(self.ports)), "wyoming.log", FRONT_STAGE)
        self._spawn("flower", flower_argv(LOOPBACK, self.ports.flower), "flower.log", FRONT_STAGE)
        ready_url = f"http://{LOOPBACK}:{self.ports.api}/readyz"
        self._wait(lambda: httpx.get(ready_url, timeout=5).status_code == 200, "API /readyz")

    def supervise(self) -> int:
        """Keep every child running, starting again each one that dies, until a signal arrives;
        returns the exit code."""
        self.supervisor.run(self._stopping)
        return 0

    def stop(self) -> None:
        self.supervisor.stop()
        for cleanup in self._after_stop:
            cleanup()


def _redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    finally:
        client.close()


def _bucket_answers(objects: ObjectStore) -> bool:
    objects.check()
    return True


def dev_webhook_secret(data_dir: Path) -> str:
    """A signing secret made once per data directory, so receivers keep verifying across restarts."""
    path = data_dir / "webhook-secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"whsec_{base64.b64encode(secrets.token_bytes(32)).decode()}\n")
        path.chmod(0o600)
    return path.read_text().strip()


def banner(ports: DevPorts, settings: Settings, data_dir: Path) -> str:
    api = f"http://{LOOPBACK}:{ports.api}"
    secret_file = data_dir / "webhook-secret"
    generated = "webhook_secret" not in Settings().model_fields_set
    secret = f"the secret in {secret_file}" if generated else "TTSQ_WEBHOOK_SECRET"
    listen = f'ttsq webhook-listen --secret "$(cat {secret_file})"' if generated else "ttsq webhook-listen"
    receivers = "private receivers allowed" if settings.webhook_allow_private else "public receivers only"
    return f"""
ttsq is ready.
  Web page   {api}/
  API        {api}   (OpenAPI docs: {api}/docs)
  VOICEVOX   http://{LOOPBACK}:{ports.voicevox}   (VOICEVOX-compatible API; also {api}/voicevox)
  Flower     http://{LOOPBACK}:{ports.flower}
  Wyoming    {wyoming_uri(ports)}   (Home Assistant: Wyoming Protocol, host {LOOPBACK}, port {ports.wyoming})
  Metrics    {api}/metrics (API, queues, jobs)   http://{LOOPBACK}:{ports.worker_metrics}/metrics (worker)
  Redis      {redis_location(settings)}
  S3         {settings.s3.endpoint_url}
  Webhooks   signed with {secret}; {receivers}
             a local receiver: {listen}
Try:
  curl -s -X POST {api}/v1/jobs -H 'content-type: application/json' -d '{{"text":"Hello from the queue."}}'
  curl -s '{api}/v1/jobs/<id>?wait=30'      # answers when the job is done
  curl -sL {api}/v1/jobs/<id>/audio -o hello.wav
Ctrl-C stops everything.
"""


def wyoming_uri(ports: DevPorts) -> str:
    return f"tcp://{LOOPBACK}:{ports.wyoming}"


def run_dev(data_dir: Path, ports: DevPorts) -> int:
    """Start, print the URLs, supervise, stop; the exit code for the command."""
    settings = Settings()
    with stop_on(signal.SIGINT, signal.SIGTERM) as stopping:
        stack = DevStack(data_dir, ports, settings, stopping)
        try:
            stack.start()
            print(banner(ports, stack.settings, data_dir), flush=True)
            return stack.supervise()
        except StartInterrupted:
            return 0
        finally:
            print("ttsq dev: stopping…", flush=True)
            stack.stop()
