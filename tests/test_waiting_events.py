"""Which events make a waiter read its job again (``api.waiting.worth_a_read``): pure data."""

from __future__ import annotations

import pytest

from api.waiting import ended_record, worth_a_read
from ttsq.events import EventKind, JobEvent
from ttsq.job_record import JobRecord, JobStatus, utcnow


def status(value: str) -> JobEvent:
    return JobEvent(kind=EventKind.STATUS, status=value)


SEGMENT = JobEvent(kind=EventKind.SEGMENT, index=0, done=1)


@pytest.mark.parametrize("value", [s.value for s in JobStatus if s.terminal])
def test_a_status_that_ends_the_job_is_worth_a_read(value: str) -> None:
    assert worth_a_read([status(value)])
    assert worth_a_read([status(JobStatus.RUNNING.value), status(value)], parts=True)


@pytest.mark.parametrize("value", [s.value for s in JobStatus if not s.terminal])
def test_a_status_that_does_not_end_it_is_not(value: str) -> None:
    assert not worth_a_read([status(value)])
    assert not worth_a_read([status(value)], parts=True)


def test_a_segment_counted_is_news_only_for_a_reader_of_parts() -> None:
    assert not worth_a_read([SEGMENT])
    assert worth_a_read([SEGMENT], parts=True)
    assert worth_a_read([status(JobStatus.RUNNING.value), SEGMENT], parts=True)


def test_a_timeout_a_resync_or_an_unknown_status_is_worth_a_read() -> None:
    assert worth_a_read([None])
    assert worth_a_read([JobEvent(kind=EventKind.RESYNC)])
    assert worth_a_read([status("paused-by-a-later-release")])
    assert worth_a_read([JobEvent(kind=EventKind.STATUS)])


def test_a_waiter_answers_from_the_record_only_a_terminal_event_that_came_last_carries() -> None:
    record = JobRecord(id="j1", voice="v", format="wav", characters=3, created_at=utcnow(), status=JobStatus.SUCCEEDED)
    carried = JobEvent(kind=EventKind.STATUS, status="succeeded", record=record.model_dump_json())
    assert ended_record([status("running"), carried]) == record
    assert ended_record([carried, SEGMENT]) is None  # something came after it
    assert ended_record([status("succeeded")]) is None  # nothing carried: read it
    assert ended_record([JobEvent(kind=EventKind.STATUS, status="running", record=record.model_dump_json())]) is None
    assert ended_record([JobEvent(kind=EventKind.STATUS, status="failed", record="{not json")]) is None
    assert ended_record([None]) is None
    assert ended_record([]) is None
