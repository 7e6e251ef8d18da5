"""One run of one step of a job: the claim it holds, the attempt id its writes carry, and the check
it makes before each side effect.

A worker can be paused (SIGSTOP, a frozen VM, a long GC) past its step's lease, while Redis hands
the step's message to another worker, and then resume where it was. Two rules keep such a late
duplicate harmless:

- **Losers write elsewhere.** Every object or part a run stores carries its attempt id in its key
  (``ttsq.constants``), and the write that commits the step (the job's success, a segment's done
  mark) names the winner's; a run that loses that write deletes only what it stored itself.
- **An expired lease is noticed before any side effect.** :meth:`StepRun.ensure_current` renews the
  run's claim, takes it back if it lapsed and nobody took it, and raises :class:`StepSuperseded` if
  another task holds it now: the run stops and leaves the step to that task.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from ttsq.job_store import StepStart

log = logging.getLogger(__name__)


class StepSuperseded(Exception):
    """This run's claim on its step lapsed while it ran and another task holds the step now: the run
    must stop without any further side effect (its message is acknowledged; the step is not lost)."""


def new_attempt_id() -> str:
    """A short unique id for one run of one step (64 random bits, hex)."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class StepRun:
    """One task's run of one step (``entry``, ``segment:<n>``, ``assemble``) of a job."""

    job_id: str
    step: str
    attempt: str
    claim: Lock
    """The step's claim (``JobStore.step_lock``), held and renewed while the run lasts."""
    start: StepStart | None = None
    """What the run's start read in the round trip that counted it (an entry step's record and
    text, ``JobStore.step_started_reading``); None where it read nothing."""

    def ensure_current(self) -> None:
        """Call before a side effect: renew the claim; if it lapsed and nobody took it, take it back;
        if another task holds it, raise :class:`StepSuperseded`."""
        try:
            self.claim.reacquire()
            return
        except LockNotOwnedError:
            pass
        if self.claim.acquire(blocking=False):
            log.warning("job %s: the claim on %s lapsed while it ran; taken back", self.job_id, self.step)
            return
        raise StepSuperseded(f"job {self.job_id}: {self.step} is held by another task now")
