"""The objects one run of a job's final step stores, owned by that run until its success write names
them: a loser, a canceled job or a failed step deletes its own and never the winner's."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import redis

from ttsq.constants import OBJECT_STEPS
from ttsq.errors import TransientError
from ttsq.job_record import JobRecord
from workers.job_context import JobContext
from workers.steps import StepRun

log = logging.getLogger(__name__)


class OwnedObjects:
    """The objects one run of a job's final step stores, each under the run's attempt prefix."""

    def __init__(self, ctx: JobContext, record: JobRecord, run: StepRun) -> None:
        self._ctx = ctx
        self._record = record
        self.run = run
        self.keys: list[str] = []

    def claim(self, *keys: str) -> None:
        """Call before storing ``keys``: the run checks it still holds its step, and the cleanup task
        will delete them when the job expires, whatever becomes of this run."""
        jobs = self._ctx.stores.jobs
        if not jobs.schedule_objects_while_held(self._record, keys, self.run.claim):
            self.run.ensure_current()  # it lapsed: taken back, or StepSuperseded
            jobs.schedule_objects(self._record, keys)
        self.keys.extend(keys)

    def commit(self) -> None:
        """The job's success write names these objects: they are the job's now. What runs that started
        and never ended stored under the same names (a worker killed between storing and committing)
        is deleted: none of them can commit any more, and nothing else would delete it before the job
        expires. Runs of every step that stores a job's objects count, not only this run's step: a
        streamed job's entry that died while storing its object, and whose assembly the sweeper then
        queued (soak seed 11774874), left its copy beside the assembly's. A run only paused still
        deletes its own when it loses."""
        jobs = self._ctx.stores.jobs
        dead = set().union(*(jobs.step_attempts(self.run.job_id, step) for step in OBJECT_STEPS)) - {self.run.attempt}
        mine = f"/{self.run.attempt}/"
        leftovers = [key.replace(mine, f"/{attempt}/") for attempt in sorted(dead) for key in self.keys]
        self.keys.clear()
        if not leftovers:
            return
        log.info("job %s: deleting what %d dead runs stored", self._record.id, len(dead))
        try:
            self._ctx.stores.objects.delete_many(leftovers)
            self._ctx.stores.jobs.forget_object(*leftovers)
        except (TransientError, redis.RedisError) as e:  # the cleanup task deletes them when the job expires
            log.warning("job %s: leftovers of dead runs kept until the job expires: %s", self._record.id, e)

    def discard(self) -> None:
        """Delete this run's own objects (never another run's: their keys differ)."""
        if self.keys:
            log.info(
                "job %s: %s did not commit; deleting its own %d objects", self._record.id, self.run.step, len(self.keys)
            )
            self._ctx.stores.objects.delete_many(self.keys)
            self._ctx.stores.jobs.forget_object(*self.keys)
            self.keys.clear()


@contextlib.contextmanager
def owned_objects(ctx: JobContext, record: JobRecord, run: StepRun) -> Iterator[OwnedObjects]:
    """Objects the block stores; unless it commits them (its success write named them), they are
    deleted on the way out, so a loser, a job canceled meanwhile or a failed step leaves nothing of
    its own behind, and touches nothing of the winner's."""
    owned = OwnedObjects(ctx, record, run)
    try:
        yield owned
    finally:
        owned.discard()
