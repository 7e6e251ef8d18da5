"""A Redis run by Sentinel for the tests (``tests/test_sentinel.py``): a master, a replica of it and
three sentinels, each a real ``redis-server`` on a free loopback port, as an operator runs them."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

import redis

from cli.embedded import LOOPBACK, RedisService, redis_server_binary
from cli.processes import ManagedProcess, free_port, wait_until
from ttsq.settings import SentinelSettings

MASTER_NAME: Final = "mymaster"
QUORUM: Final = 2
"""Sentinels that must agree the master is down before a failover (two of three, as in production)."""
DOWN_AFTER_MS: Final = 1000
"""A master silent this long is down to a sentinel (production: 5-30 s)."""
FAILOVER_TIMEOUT_MS: Final = 5000
READY_TIMEOUT_S: Final = 60.0
FAILOVER_WAIT_S: Final = 60.0


class SentinelServer:
    """``redis-server <config> --sentinel`` monitoring the master as ``MASTER_NAME``."""

    def __init__(self, data_dir: Path, master_port: int) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.master_port = master_port
        self.config = data_dir / "sentinel.conf"  # a sentinel rewrites it with what it learns
        argv = [str(redis_server_binary()), str(self.config), "--sentinel"]
        self.process = ManagedProcess(f"sentinel-{self.port}", argv, data_dir / "sentinel.log")

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(LOOPBACK, self.port, socket_timeout=2, socket_connect_timeout=2, decode_responses=True)

    def start(self) -> SentinelServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            f"port {self.port}\nbind {LOOPBACK}\ndir {self.data_dir}\n"
            f"sentinel monitor {MASTER_NAME} {LOOPBACK} {self.master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        self.process.start()
        wait_until(self._answers, READY_TIMEOUT_S, "sentinel", self.process)
        return self

    def _answers(self) -> bool:
        with self.client() as client:
            return bool(client.ping())

    def master_state(self) -> dict[str, str]:
        """``SENTINEL MASTER`` of ``MASTER_NAME``: its address, flags and what this sentinel knows."""
        with self.client() as client:
            return cast(dict[str, str], client.execute_command("SENTINEL", "MASTER", MASTER_NAME))

    def stop(self) -> None:
        self.process.stop()


@dataclass
class SentinelCluster:
    master: RedisService
    replica: RedisService
    sentinels: list[SentinelServer]

    def settings(self) -> SentinelSettings:
        """What a ttsq process is given to find the master."""
        return SentinelSettings(hosts=[s.address for s in self.sentinels], master=MASTER_NAME)

    def master_port(self) -> int:
        """Where every sentinel says the master is (they agree once a failover completed)."""
        ports = {int(s.master_state()["port"]) for s in self.sentinels}
        assert len(ports) == 1, f"the sentinels disagree on the master: {ports}"
        return ports.pop()

    def wait_until_watched(self) -> None:
        """Until every sentinel knows the replica and the two other sentinels (hello messages over
        the master), and the replica holds the master's data: only then can they fail over."""

        def watched() -> bool:
            states = [s.master_state() for s in self.sentinels]
            return all(int(st["num-slaves"]) == 1 and int(st["num-other-sentinels"]) == 2 for st in states)

        wait_until(watched, READY_TIMEOUT_S, "sentinels watching the master and its replica")
        wait_until(lambda: replication(self.replica)["master_link_status"] == "up", READY_TIMEOUT_S, "replica in sync")

    def kill_master(self) -> None:
        """SIGKILL: no shutdown, and what it had not sent the replica yet is gone."""
        self.master.process.kill(signal.SIGKILL)
        self.master.process.stop()

    def wait_for_failover(self) -> None:
        """Until the replica is the master, by its own word and by every sentinel's."""

        def promoted() -> bool:
            return replication(self.replica)["role"] == "master" and self.master_port() == self.replica.port

        wait_until(promoted, FAILOVER_WAIT_S, "the sentinels promoting the replica")


def replication(service: RedisService) -> dict[str, str]:
    """``INFO replication`` of one server."""
    with redis.Redis.from_url(service.url, socket_timeout=2, socket_connect_timeout=2) as client:
        info = cast(dict[str, object], client.info("replication"))
    return {key: str(value) for key, value in info.items()}


@contextmanager
def sentinel_cluster(root: Path) -> Iterator[SentinelCluster]:
    """Start a master, its replica and three sentinels under ``root``; stop them all afterwards."""
    with ExitStack() as stop:
        master = RedisService(root / "master").start()
        stop.callback(master.stop)
        replica = RedisService(root / "replica")
        replica.process.argv += ["--replicaof", LOOPBACK, str(master.port)]
        replica.start()
        stop.callback(replica.stop)
        sentinels = [SentinelServer(root / f"sentinel-{n}", master.port).start() for n in range(3)]
        for sentinel in sentinels:
            stop.callback(sentinel.stop)
        cluster = SentinelCluster(master, replica, sentinels)
        cluster.wait_until_watched()
        yield cluster
