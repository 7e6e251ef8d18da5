"""The sweeper's batch half: batches whose finishing task was lost.

The write that finishes a batch's last item sends ``ttsq.finish_batch`` once. If that message is
lost (Redis crashed, the broker refused the send), every item is finished but the batch never gets
its manifest (or, if it was lost while the task made them, its bundles). The sweeper lists the
batches not yet settled (``ttsq:batches:active``, not a key scan), keeps those whose items are all
finished, and sends their finishing task again when no
message names them and no task holds their ``finish`` claim at two looks at least
:data:`~ttsq.constants.SWEEP_CONFIRM_S` apart (a message moving from the queue to the service worker
is briefly in neither). A duplicate is harmless:
:func:`ttsq.batches.finish_batch` does nothing once the manifest is written, and
:func:`ttsq.bundling.make_bundles` nothing once every bundle is settled. Entries of batches that are
settled, or whose records expired, leave the index here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import redis

from ttsq.batches import READ_CHUNK, BatchStore
from ttsq.broker import ids_in_messages
from ttsq.constants import BATCH_SUSPECTS_KEY, MAINTENANCE_QUEUE, SERVICE_UNACKED_PREFIX, SWEEP_CONFIRM_S

log = logging.getLogger(__name__)

"""Hash: batch id → when a sweep first found it done, unfinished, and named by no message."""


@dataclass
class BatchSweepReport:
    """What one sweep did to batches, for the log and for tests."""

    looked_at: int = 0
    suspected: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    """Batches whose finishing task was sent again."""
    forgotten: list[str] = field(default_factory=list)
    """Batches dropped from the index: finished already, or their record expired."""


class BatchSweeper:
    """Finds batches whose items are all finished but whose finishing task was lost, and sends it again."""

    def __init__(
        self, client: redis.Redis, batches: BatchStore, send_finish: Callable[[str], None], grace_s: float
    ) -> None:
        self._redis = client
        self._batches = batches
        self._send_finish = send_finish
        self._grace_s = grace_s

    def sweep(self, now: float) -> BatchSweepReport:
        report = BatchSweepReport()
        candidates = self._batches.active_ids(created_before=now - self._grace_s)
        report.looked_at = len(candidates)
        done: list[str] = []
        for start in range(0, len(candidates), READ_CHUNK):
            done.extend(self._done(candidates[start : start + READ_CHUNK], report))
        if not done:
            self._redis.delete(BATCH_SUSPECTS_KEY)
            return report
        claimed = {b for b, held in zip(done, self._batches.claimed(done, "finish"), strict=True) if held}
        present = ids_in_messages(self._redis, [MAINTENANCE_QUEUE], SERVICE_UNACKED_PREFIX) | claimed
        raw = cast(dict[bytes, bytes], self._redis.hgetall(BATCH_SUSPECTS_KEY))
        suspects = {k.decode(): float(v) for k, v in raw.items()}
        for batch_id in done:
            if batch_id in present:
                continue
            first_seen = suspects.get(batch_id)
            if first_seen is None or now - first_seen < SWEEP_CONFIRM_S:
                self._redis.hsetnx(BATCH_SUSPECTS_KEY, batch_id, now)
                report.suspected.append(batch_id)
                continue
            self._send_finish(batch_id)  # before forgetting the suspicion: a refused send is tried again
            self._redis.hdel(BATCH_SUSPECTS_KEY, batch_id)
            log.warning("batch %s: every item finished but no finishing task anywhere; sent it again", batch_id)
            report.resent.append(batch_id)
        gone = set(suspects) - set(done) | (set(suspects) & present)
        if gone:
            self._redis.hdel(BATCH_SUSPECTS_KEY, *gone)
        return report

    def _done(self, batch_ids: list[str], report: BatchSweepReport) -> list[str]:
        """The batches among ``batch_ids`` whose items are all finished but which are not settled (no
        manifest, or a bundle pending); the settled and expired ones leave the index."""
        records = self._batches.many(batch_ids)
        finished = self._batches.finished_items(batch_ids)
        done: list[str] = []
        stale: list[str] = []
        for batch_id, record, count in zip(batch_ids, records, finished, strict=True):
            if record is None or record.settled:
                stale.append(batch_id)
            elif count >= record.total:
                done.append(batch_id)
        self._batches.forget_active(stale)
        report.forgotten.extend(stale)
        return done
