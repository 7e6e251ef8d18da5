"""How ``ttsq narrate`` waits between two reads of its batch (``Narration._until_next_read``): on the
first pending chapter's job with the API's long poll, which answers the moment the job ends, so a
chapter is downloaded then and not up to a poll later; the plain pause where that cannot help.

Pure code: the client is a stand-in that answers from plain data and notes what it was asked. The
real path (a book narrated through the stack) is tests/test_narrate.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from narration.client import ClientError, TTSQClient
from narration.narrate import POLL_S, Narration
from narration.planning import NarrateOptions
from tts_core.books.common import Book, Chapter

OPTIONS = NarrateOptions(voice=None, format="wav", speed=None)


class JobsOnly:
    """Answers ``get(job_id, wait_s)`` with the status it is given, or raises ``ClientError``; and
    ``get_batch`` with the next of the batches it is given."""

    def __init__(self, status: str | None, batches: list[dict[str, Any]] | None = None) -> None:
        self.status = status
        self.batches = batches or []
        self.asked: list[tuple[str, float]] = []

    def get(self, job_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        self.asked.append((job_id, wait_s))
        if self.status is None:
            raise ClientError(f"job {job_id} not found")
        return {"id": job_id, "status": self.status}

    def get_batch(self, batch_id: str) -> dict[str, Any]:
        return self.batches.pop(0)


def narration_with(tmp_path: Path, client: JobsOnly, job_ids: list[str | None]) -> Narration:
    chapters = [Chapter(n, f"Chapter {n}", f"Chapter {n} has a sentence to say.") for n in range(1, len(job_ids) + 1)]
    narration = Narration(Book("A book", chapters), tmp_path, OPTIONS, cast(TTSQClient, client))
    for outcome, job_id in zip(narration.state.chapters.values(), job_ids, strict=True):
        outcome.job_id = job_id
    return narration


def test_following_a_batch_waits_on_the_pending_jobs_long_poll_not_a_pause(tmp_path: Path) -> None:
    """The batch read twice: its chapter's job running, then failed; between the reads, the job's
    long poll, and no pause (``time.sleep``, which ``follow`` pauses with here, is never reached)."""
    client = JobsOnly("failed")
    narration = narration_with(tmp_path, client, [None])
    narration.state.batch_id = "batch-1"
    ((ref, outcome),) = narration.state.chapters.items()
    running: dict[str, Any] = {"ref": ref, "status": "running", "job_id": "job-1"}
    failed = {**running, "status": "failed", "error": {"code": "synthesis_failed", "message": "no"}}
    client.batches = [{"items": [running]}, {"items": [failed]}]
    narration.follow(lambda: None)
    assert client.asked == [("job-1", POLL_S)]
    assert outcome.status == "failed"


def test_the_wait_is_the_first_pending_jobs_long_poll(tmp_path: Path) -> None:
    client, paused = JobsOnly("running"), list[float]()
    narration = narration_with(tmp_path, client, [None, "job-2", "job-3"])
    narration._until_next_read(paused.append)
    assert client.asked == [("job-2", POLL_S)]
    assert paused == []


def test_a_job_that_ended_while_its_chapter_still_shows_pending_is_waited_for_by_the_pause(tmp_path: Path) -> None:
    """Without this, a batch read that lags its job's end would be read again at once, in a loop."""
    client, paused = JobsOnly("succeeded"), list[float]()
    narration = narration_with(tmp_path, client, ["job-1"])
    narration._until_next_read(paused.append)
    narration._until_next_read(paused.append)
    assert client.asked == [("job-1", POLL_S)]
    assert paused == [POLL_S]


def test_without_a_job_to_wait_on_the_wait_is_the_pause(tmp_path: Path) -> None:
    cases: list[tuple[JobsOnly, list[str | None]]] = [(JobsOnly("running"), [None]), (JobsOnly(None), ["gone"])]
    for client, job_ids in cases:
        paused = list[float]()
        narration_with(tmp_path, client, job_ids)._until_next_read(paused.append)
        assert paused == [POLL_S]
