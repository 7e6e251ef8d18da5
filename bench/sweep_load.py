"""What sweeping and liveness cost Redis (issue 35), on a private redis-server: one sweep over a
thousand active jobs (commands, bytes, time), then a steady state of simulated workers for a while:
service workers that each run the real sweep loop (``workers.sweeping``: a candidate for the lease,
one of them sweeping every 2 s), and synthesis workers that each beat their heartbeat
(``workers.heartbeat``) and renew their held messages and one step claim (``workers.leases``), all
every second. Commands are counted by Redis itself (``INFO commandstats``, where the commands a
script runs count besides its ``EVALSHA``). kombu's own reads (the consumers' ``BRPOP``, the scans
for expired messages) are not simulated.

    python -m bench.sweep_load [--jobs 1000] [--workers 10] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final, cast

import redis

import workers.leases
from cli.embedded import RedisService
from ttsq.broker import TaskPublisher, make_producer
from ttsq.job_record import JobRecord, new_job_id, utcnow
from ttsq.liveness import WorkerLiveness
from ttsq.maintenance import Sweeper
from ttsq.settings import Settings
from ttsq.stores import Stores
from workers.heartbeat import Heartbeat
from workers.leases import LeaseKeeper
from workers.sweeping import make_sweep_loop

UNACKED: Final = "unacked"
OWN_INFO_CALLS: Final = 3
"""This script's own ``INFO`` calls counted between two readings of the counters."""


def commands(client: redis.Redis) -> Counter[str]:
    stats = cast(dict[str, dict[str, Any]], client.info("commandstats"))
    return Counter({name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()})


def output_bytes(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def measured(client: redis.Redis, run: Callable[[], object]) -> tuple[Counter[str], int, float]:
    """Commands by name (this script's own left out), bytes Redis sent, and seconds of ``run``."""
    before, sent, started = commands(client), output_bytes(client), time.monotonic()
    run()
    took = time.monotonic() - started
    delta = commands(client) - before
    delta["info"] -= OWN_INFO_CALLS
    return +delta, output_bytes(client) - sent, took


def active_jobs(stores: Stores, count: int) -> list[str]:
    """``count`` queued jobs, each named by its entry message: half waiting in the queue, half held
    by a worker (in kombu's ``unacked`` hash), as a busy pool has them."""
    settings, client, jobs = stores.settings, stores.redis, stores.jobs
    send = TaskPublisher(make_producer(settings), settings.queue)
    ids = []
    for _ in range(count):
        record = JobRecord.model_validate(
            {"id": new_job_id(), "voice": "en_US-lessac-medium", "format": "wav", "characters": 20}
            | {"created_at": utcnow()}
        )
        jobs.create(record, "Twenty characters...")
        send.entry(record.id, record.priority)
        ids.append(record.id)
    for tag in range(count // 2):
        message = client.rpop(settings.queue)
        client.hset(UNACKED, f"tag-{tag}", cast(bytes, message))
    return ids


def steady(stores: Stores, workers_count: int, seconds: float, job_ids: list[str]) -> Any:
    """``workers_count`` simulated service workers and as many synthesis workers for ``seconds``."""
    workers.leases.held_delivery_tags = lambda: ["tag-0", "tag-1"]  # as if each held two messages
    settings, client, jobs = stores.settings, stores.redis, stores.jobs
    with ExitStack() as stack:
        for n in range(workers_count):
            loop = make_sweep_loop(settings)
            loop.start()
            stack.callback(loop.stop)
            heartbeat = Heartbeat(WorkerLiveness(client, settings.queue), f"simulated-{n}", lambda: True)
            heartbeat.start()
            stack.callback(heartbeat.stop)
            keeper = LeaseKeeper(client, settings.step_lease_s)
            claim = jobs.step_lock(job_ids[n], "entry", settings.step_lease_s)
            claim.acquire()
            stack.enter_context(keeper.holding(claim))
            keeper.start()
            stack.callback(keeper.stop)
        time.sleep(2)  # every loop started, one leading
        delta, sent, took = measured(client, lambda: time.sleep(seconds))
    return {
        "seconds": round(took, 1),
        "commands_per_s": round(sum(delta.values()) / took, 1),
        "by_command_per_s": {name: round(n / took, 2) for name, n in delta.most_common()},
        "bytes_out_per_s": round(sent / took),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        service = RedisService(Path(folder) / "redis").start()
        try:
            settings = Settings(_env_file=None, redis_url=service.url)
            stores = Stores.connect(settings, 30)
            client = stores.redis
            job_ids = active_jobs(stores, args.jobs)
            send = TaskPublisher(make_producer(settings), settings.queue)
            sweeper = Sweeper(stores, stores.lifecycle(send.finish_batch), send)
            delta, sent, took = measured(client, lambda: sweeper.sweep(time.time() + 3600))
            one = {"commands": dict(delta.most_common()), "bytes_out": sent, "seconds": round(took, 3)}
            result = {
                "active_jobs": args.jobs,
                "one_sweep": one,
                "steady": steady(stores, args.workers, args.seconds, job_ids),
                "simulated_workers": {"service": args.workers, "synthesis": args.workers},
                "sweep_interval_s": settings.sweep_interval_s,
            }
        finally:
            service.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
