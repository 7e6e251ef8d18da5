"""Sweeping in the service worker, led by one of them at a time: every service worker is a candidate
for the sweeping lease (``ttsq.leader``, renewed every second from a thread of its own), and the one
holding it sweeps (``ttsq.maintenance.Sweeper``) every ``sweep_interval_s``, a confirming look
:data:`~ttsq.constants.SWEEP_CONFIRM_S` after a look that found work missing, and at once when Redis
restarted or failed over (its ``run_id`` changed, so writes may be lost). Any one service worker
killed or frozen delays the next sweep by the lease (``sweep_lease_s``) at most; no beat is involved.

Started and stopped with the worker (:class:`SweepLeadership`, a bootstep, as the webhook dispatcher);
its stores and connections are its own, so a sweep never waits behind the Celery threads' calls.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

import redis
from celery import bootsteps
from celery.worker import WorkController

from ttsq.broker import TaskPublisher, make_producer
from ttsq.constants import HEARTBEAT_INTERVAL_S, SWEEP_CONFIRM_S, SWEEP_LEADER_KEY, SWEEPS_KEY
from ttsq.errors import ServiceError
from ttsq.leader import Elector, Fence, LeaseLost
from ttsq.maintenance import Sweeper, SweepReport
from ttsq.redis_clients import redis_client
from ttsq.settings import Settings
from ttsq.stores import CONNECT_TIMEOUT_S, WORKER_SOCKET_TIMEOUT_S, Stores
from workers.held_models import worker_id
from workers.worker_start import WORKER_SETTINGS

log = logging.getLogger(__name__)

TICK_S: Final = min(HEARTBEAT_INTERVAL_S, SWEEP_CONFIRM_S)
"""How often the loop looks whether it leads, whether Redis restarted and whether a sweep is due."""

BUSY_SHARE: Final = 0.2
"""Most of the time a leader spends sweeping: a sweep reads every queued and held message (about
1 MB and 0.1 s at 1,000 active jobs, ``bench/sweep_load.py``), so where one takes longer than a fifth
of the interval the next waits five times as long as it took, and Redis and the service worker keep
most of their time for the work itself."""


class SweepLoop:
    """Sweeps while its elector holds the lease; every write that spends a job's re-queue budget is
    fenced by the term it swept under."""

    def __init__(self, client: redis.Redis, sweeper: Sweeper, elector: Elector, interval_s: float) -> None:
        self._redis = client
        self._sweeper = sweeper
        self._elector = elector
        self._interval_s = interval_s
        self._run_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ttsq-sweeper", daemon=True)

    def start(self) -> None:
        self._elector.start()
        self._thread.start()

    def stop(self) -> None:
        """Stop sweeping, then give the lease up so another service worker sweeps at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WORKER_SOCKET_TIMEOUT_S)
        self._elector.stop()

    def _run(self) -> None:
        due = 0.0
        while not self._stop.is_set():
            fence = self._elector.term()
            if fence is None:
                due, self._run_id = 0.0, None  # a new term sweeps at once and learns the run id afresh
            else:
                try:
                    if self._redis_restarted() or time.monotonic() >= due:
                        due = time.monotonic() + self._sweep(fence)
                except LeaseLost as e:
                    log.warning("sweep stopped: %s", e)
                except (redis.RedisError, ServiceError) as e:  # an outage: the next tick tries again
                    log.warning("sweep failed: %s", e)
                except Exception:  # a bug must not end sweeping for the life of the process
                    log.exception("sweep failed")
                    due = time.monotonic() + self._interval_s
            self._stop.wait(TICK_S)

    def _sweep(self, fence: Fence) -> float:
        """One sweep; returns the wait before the next: short while a look is to be confirmed, and
        never less than the sweep's own time over :data:`BUSY_SHARE`."""
        started = time.monotonic()
        report = self._sweeper.sweep(fence=fence)
        self._redis.incr(SWEEPS_KEY)
        _log_report(report)
        confirming = report.suspected or report.batches.suspected
        wait = SWEEP_CONFIRM_S if confirming else self._interval_s
        return max(wait, (time.monotonic() - started) / BUSY_SHARE)

    def _redis_restarted(self) -> bool:
        """Whether Redis is another server process than at the last look (a restart or a failover):
        work it lost is then looked for at once."""
        run_id = str(self._redis.info("server")["run_id"])
        restarted = self._run_id is not None and run_id != self._run_id
        self._run_id = run_id
        if restarted:
            log.warning("Redis restarted or failed over (its run id changed): sweeping now")
        return restarted


def _log_report(report: SweepReport) -> None:
    if report.requeued or report.failed or report.batches.resent:
        log.warning(
            "sweep: %d re-queued, %d failed as stalled, %d batches' finishing tasks sent again",
            len(report.requeued), len(report.failed), len(report.batches.resent),
        )  # fmt: skip


def make_sweep_loop(settings: Settings) -> SweepLoop:
    """The loop with stores, a producer and an elector of its own; the elector's calls are bounded by
    the lease, so a hung call never outlasts a term."""
    stores = Stores.connect(settings, WORKER_SOCKET_TIMEOUT_S)
    send = TaskPublisher(make_producer(settings), settings.queue)
    sweeper = Sweeper(stores, stores.lifecycle(send.finish_batch), send)
    lease_client = redis_client(settings, settings.sweep_lease_s, CONNECT_TIMEOUT_S)
    elector = Elector(lease_client, SWEEP_LEADER_KEY, settings.sweep_lease_s, worker_id())
    return SweepLoop(stores.redis, sweeper, elector, settings.sweep_interval_s)


class SweepLeadership(bootsteps.StartStopStep):
    """Runs the sweep loop while the worker runs."""

    def __init__(self, parent: WorkController, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.loop: SweepLoop | None = None

    def start(self, parent: WorkController) -> None:
        self.loop = make_sweep_loop(WORKER_SETTINGS.get())
        self.loop.start()

    def stop(self, parent: WorkController) -> None:
        if self.loop is not None:
            self.loop.stop()
            self.loop = None

    def shutdown(self, parent: WorkController) -> None:
        self.stop(parent)
