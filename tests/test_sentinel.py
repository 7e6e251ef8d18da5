"""Redis run by Sentinel: the settings that name it, the clients and the broker that follow its master,
and a whole stack through a failover (master SIGKILLed, replica promoted by real sentinels).

The cluster (``tests/sentinel_support.py``) is real ``redis-server`` processes: a master, a replica
and three sentinels, which fail over about two seconds after the master dies.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import redis
from kombu import Connection
from pydantic import ValidationError
from redis.sentinel import MasterNotFoundError

from api.main import create_app
from cli.commands import beat_argv, webhook_worker_argv
from cli.embedded import LOOPBACK, SeaweedService, stack_settings
from cli.processes import ManagedProcess, free_port
from cli.workerpool import start_local_worker, wait_for_node
from tests.conftest import serve, stop_all, wait_for_job
from tests.sentinel_support import SentinelCluster, sentinel_cluster
from tests.test_broker_transport import USES, closed_channel
from ttsq import broker_transport
from ttsq.broker import celery_config, make_producer
from ttsq.redis_clients import async_redis_client, redis_client, redis_outage
from ttsq.settings import SentinelSettings, Settings, settings_env
from ttsq.stores import Stores

REAL_PASSWORD: Final = "9d4e1f7a2b8c6e0d3a5f"
SENTINELS: Final = "10.0.0.1:26379, 10.0.0.2:26380,[fd00::3]"
"""Three sentinels as an operator writes them: with ports, spaces, an IPv6 one on the default port."""


def production(**sentinel: Any) -> Settings:
    """Production settings on Sentinel with real-looking secrets besides ``sentinel``'s."""
    return Settings(
        _env_file=None,
        environment="production",
        redis_sentinel=SentinelSettings(hosts=["s0:26379"], master="ttsq", **sentinel),
        s3={"access_key_id": "AKIAIOSFODNN7TTSQ001", "secret_access_key": "kQ7v2Lx9TfR4wNz8HcBm3Yp6"},
    )


def test_sentinels_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTSQ_REDIS_SENTINEL__HOSTS", SENTINELS)
    monkeypatch.setenv("TTSQ_REDIS_SENTINEL__MASTER", "ttsq")
    monkeypatch.setenv("TTSQ_REDIS_SENTINEL__DB", "2")
    sentinel = Settings(_env_file=None).redis_sentinel
    assert sentinel.enabled
    assert sentinel.addresses == [("10.0.0.1", 26379), ("10.0.0.2", 26380), ("fd00::3", 26379)]
    assert (sentinel.master, sentinel.db) == ("ttsq", 2)


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"hosts": ["s0:26379"]}, "TTSQ_REDIS_SENTINEL__HOSTS is set without TTSQ_REDIS_SENTINEL__MASTER"),
        ({"master": "ttsq"}, "TTSQ_REDIS_SENTINEL__MASTER is set without TTSQ_REDIS_SENTINEL__HOSTS"),
        ({"password": REAL_PASSWORD}, "TTSQ_REDIS_SENTINEL__PASSWORD set without TTSQ_REDIS_SENTINEL__HOSTS"),
        ({"db": 1}, "TTSQ_REDIS_SENTINEL__DB set without TTSQ_REDIS_SENTINEL__HOSTS"),
        ({"hosts": "s0:port", "master": "ttsq"}, "'s0:port' is not a sentinel address"),
        ({"hosts": "s0:0", "master": "ttsq"}, "'s0:0' is not a sentinel address"),
        ({"hosts": ":26379", "master": "ttsq"}, "':26379' is not a sentinel address"),
    ],
)
def test_incomplete_or_wrong_sentinel_settings_are_refused(group: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(_env_file=None, redis_sentinel=group)


def test_production_judges_the_sentinel_passwords_not_the_url() -> None:
    accepted = production(password=REAL_PASSWORD, sentinel_password="b7e2a9c4f1d8e3b6a0c5")
    assert accepted.redis_url == "redis://127.0.0.1:6379/0"  # no password, and unused
    assert production(password=REAL_PASSWORD).redis_sentinel.sentinel_password is None  # sentinels without one
    with pytest.raises(ValidationError, match="TTSQ_REDIS_SENTINEL__PASSWORD is not set"):
        production()
    with pytest.raises(ValidationError, match="TTSQ_REDIS_SENTINEL__PASSWORD is a placeholder"):
        production(password="changeme")
    with pytest.raises(ValidationError, match="TTSQ_REDIS_SENTINEL__SENTINEL_PASSWORD is a placeholder") as error:
        production(password=REAL_PASSWORD, sentinel_password="sentinel-password")
    assert "sentinel-password" not in str(error.value), "the error echoes the secret"


def test_broker_names_every_sentinel_and_the_master() -> None:
    sentinel = SentinelSettings(hosts=["s0:26379", "[fd00::1]:26380"], master="ttsq", password="p@ss/word", db=2)
    config = celery_config(Settings(_env_file=None, redis_sentinel=sentinel))
    assert config["broker_url"] == "sentinel://:p%40ss%2Fword@s0:26379/2;sentinel://:p%40ss%2Fword@[fd00::1]:26380/2"
    assert config["broker_transport"] == broker_transport.SENTINEL_ALIAS
    assert config["broker_transport_options"]["master_name"] == "ttsq"
    default_timeout = Settings(_env_file=None).visibility_timeout_s
    assert config["broker_transport_options"]["visibility_timeout"] == default_timeout  # every broker's options stay


def test_a_switch_to_the_next_sentinel_keeps_ttsqs_transport() -> None:
    """kombu takes the transport of the next URL from its scheme: that must still be ttsq's channel
    (closed-connection fix, affinity order), not kombu's own Sentinel transport."""
    config = celery_config(Settings(_env_file=None, redis_sentinel={"hosts": "s0,s1", "master": "ttsq"}))
    connection = Connection(config["broker_url"], transport=config["broker_transport"])
    try:
        assert connection.transport_cls == broker_transport.SENTINEL_ALIAS
        assert type(connection.transport) is broker_transport.SentinelTransport
        connection.maybe_switch_next()
        assert connection.hostname == "s1"
        assert type(connection.transport) is broker_transport.SentinelTransport
        assert issubclass(connection.transport.Channel, broker_transport.Channel)
    finally:
        connection.release()


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (redis.ConnectionError("Connection refused"), True),
        (MasterNotFoundError("No master found for 'ttsq'"), True),
        (redis.ReadOnlyError("You can't write against a read only replica."), True),
        (redis.ResponseError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), True),
        (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        (redis.ResponseError("ERR Error running script: attempt to compare nil with number"), False),
    ],
)
def test_outages_are_told_from_wrong_calls(error: redis.RedisError, outage: bool) -> None:
    assert redis_outage(error) is outage


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    with sentinel_cluster(tmp_path / "redis") as started:
        yield started


@pytest.mark.recovery
def test_clients_and_broker_follow_the_master_through_a_failover(cluster: SentinelCluster) -> None:
    settings = Settings(
        _env_file=None, redis_url=f"redis://{LOOPBACK}:{free_port()}/0", redis_sentinel=cluster.settings()
    )  # the URL leads nowhere: every client must go through the sentinels
    client = redis_client(settings, 2, 2)
    stores = Stores.connect(settings, 2, 2)
    producer = make_producer(settings)
    try:
        for expected_port in (cluster.master.port, cluster.replica.port):
            assert client.info("server")["tcp_port"] == expected_port
            assert stores.redis.info("server")["tcp_port"] == expected_port
            assert asyncio.run(_async_port(settings)) == expected_port
            producer.send_task("sentinel.check", args=[expected_port], queue="sentinel-check")
            assert client.llen("sentinel-check") == 1  # the broker wrote to the master the client reads
            client.delete("sentinel-check")
            if expected_port == cluster.master.port:
                client.set("written-before", 1)
                assert client.wait(1, 5000) == 1
                cluster.kill_master()
                unexpected = _calls_until_promoted(client, cluster)
                assert unexpected == [], "a call failed otherwise than as a lost connection"
        assert client.get("written-before") == b"1"
        assert client.role()[0] == b"master"
        client.config_set("min-replicas-to-write", 1)  # the operator's lever; its replica is dead
        with pytest.raises(redis.ResponseError) as refused:
            client.set("written-after", 1)
        assert redis_outage(refused.value), f"{refused.value} taken for a wrong call, not an outage"
    finally:
        producer.close()
        stores.close()
        client.close()


async def _async_port(settings: Settings) -> int:
    client = async_redis_client(settings, 2, 2)
    try:
        port: int = (await client.info("server"))["tcp_port"]
        return port
    finally:
        await client.aclose()


def _calls_until_promoted(client: redis.Redis, cluster: SentinelCluster) -> list[str]:
    """Call Redis through ``client`` until the sentinels have promoted the replica; returns the calls
    that failed otherwise than with a ``redis.ConnectionError`` (``MasterNotFoundError`` is one), the
    outage every caller handles."""
    unexpected: list[str] = []
    done = threading.Event()

    def call() -> None:
        while not done.is_set():
            try:
                client.ping()
            except redis.ConnectionError:
                pass
            except Exception as e:
                unexpected.append(repr(e))
            time.sleep(0.05)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        cluster.wait_for_failover()
    finally:
        done.set()
        caller.join(30)
    return unexpected


def test_a_sentinel_channel_keeps_ttsqs_behaviour(cluster: SentinelCluster) -> None:
    """Over Sentinel too, a channel of a closed connection fails as a lost connection (which Celery
    retries; kombu's own raised an AttributeError that stopped workers), and model queues are asked
    for in affinity order (tests/test_broker_transport.py has both for plain Redis)."""
    producer = make_producer(Settings(_env_file=None, redis_sentinel=cluster.settings()))
    try:
        for use in USES.values():
            connection = producer.connection_for_write()
            assert isinstance(connection.transport, broker_transport.SentinelTransport)
            channel = closed_channel(connection)
            assert isinstance(channel._queue_cycle, broker_transport.AffinityCycle)
            with pytest.raises(redis.ConnectionError, match="was closed"):
                use(channel)
    finally:
        producer.close()


# The whole stack through a failover.

STACK_SETTINGS: Final[dict[str, Any]] = {
    "sweep_interval_s": 2.0,
    "sweep_grace_s": 5.0,
    "visibility_timeout_s": 20,
    "step_lease_s": 10,
    "task_retry_backoff_max_s": 5,
}
"""Outages retried within seconds, a vanished job's work sent again after seconds (production: a
minute and more), so that the test sees recovery in its time."""

BEFORE_KILL_JOBS: Final = 6
HTTP_TIMEOUT_S: Final = 30.0
"""Longer than any answer of the API while Redis is out should take: a request past it hung."""


@dataclass
class Submissions:
    """POST /v1/jobs from a thread while the master is gone: what each answered."""

    api_url: str
    statuses: list[int] = field(default_factory=list)
    refusals_without_retry_after: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.api_url, timeout=HTTP_TIMEOUT_S) as http:
            n = 0
            while not self.stop.is_set():
                n += 1
                try:
                    answer = http.post("/v1/jobs", json={"text": f"Submitted during the failover, number {n}."})
                except httpx.TimeoutException as e:
                    self.hangs.append(repr(e))
                    continue
                self.statuses.append(answer.status_code)
                if answer.status_code == 202:
                    self.accepted.append(answer.json()["id"])
                elif answer.status_code == 503 and "Retry-After" not in answer.headers:
                    self.refusals_without_retry_after.append(answer.text)
                time.sleep(0.1)


@pytest.fixture
def stack(cluster: SentinelCluster, s3_service: SeaweedService, tmp_path: Path) -> Iterator[str]:
    """The API (in this process), a synthesis worker, the service worker and beat, all on Sentinel."""
    settings = stack_settings(
        f"redis://{LOOPBACK}:{free_port()}/0", s3_service, redis_sentinel=cluster.settings(), **STACK_SETTINGS
    )
    env = {**os.environ, **settings_env(settings)}
    processes: list[ManagedProcess] = []
    try:
        service = ManagedProcess(
            "service", webhook_worker_argv(2, "sentinel-service@%h"), tmp_path / "service.log", env
        )
        processes.append(service.start())
        processes.append(
            ManagedProcess("beat", beat_argv(tmp_path / "beat-schedule"), tmp_path / "beat.log", env).start()
        )
        processes.append(start_local_worker(settings, "sentinel-worker", tmp_path / "worker.log", timeout_s=120))
        wait_for_node(settings, "sentinel-service@", service, 60)
        with serve(create_app(settings)) as api_url:
            yield api_url
    finally:
        stop_all(processes)


@pytest.mark.recovery
@pytest.mark.timeout(300)
def test_a_stack_on_sentinel_survives_a_master_failover(cluster: SentinelCluster, stack: str) -> None:
    api_url = stack
    with httpx.Client(base_url=api_url, timeout=HTTP_TIMEOUT_S) as http:
        first = http.post("/v1/jobs", json={"text": "Before the failover."})
        assert first.status_code == 202, first.text
        assert wait_for_job(http, first.json()["id"])["status"] == "succeeded"

        before = [
            http.post("/v1/jobs", json={"text": f"Accepted before the kill, number {n}."})
            for n in range(BEFORE_KILL_JOBS)
        ]
        assert [a.status_code for a in before] == [202] * BEFORE_KILL_JOBS
        with redis.Redis(LOOPBACK, cluster.master.port, socket_timeout=5) as master:
            master.set("sentinel-test:replicated", 1)  # after every write of those submissions
            assert master.wait(1, 5000) == 1, "the replica did not acknowledge the submissions"
        cluster.kill_master()  # while the worker is in the middle of them

        during = Submissions(api_url)
        submitter = threading.Thread(target=during.run, daemon=True)
        submitter.start()
        try:
            cluster.wait_for_failover()
        finally:
            during.stop.set()
            submitter.join(HTTP_TIMEOUT_S + 5)
        assert during.hangs == [], "a request hung while no master was elected"
        assert set(during.statuses) <= {202, 503}, f"answers while the master was gone: {during.statuses}"
        assert during.refusals_without_retry_after == []

        after = http.post("/v1/jobs", json={"text": "After the failover."})
        assert after.status_code == 202, after.text
        assert wait_for_job(http, after.json()["id"])["status"] == "succeeded"
        for job_id in [a.json()["id"] for a in before] + during.accepted:
            assert wait_for_job(http, job_id, 120)["status"] == "succeeded", job_id
    assert cluster.master_port() == cluster.replica.port
