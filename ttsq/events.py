"""Announcements of job changes over Redis pub/sub, so waiting clients are pushed, not polling.

Every status change is published by :meth:`ttsq.job_store.JobStore.transition_by` in the same MULTI as
the write, and every counted segment by :meth:`ttsq.segment_store.SegmentStore.mark_done` in the same
script as the count, on the job's channel (:func:`ttsq.constants.job_events_channel`). A message
says *what* changed; a listener that needs the job reads the record itself, so a missed message
costs at most a late wake-up, never a wrong state. Only the message of a terminal status carries
the record as written (the job changes no more but for its purge, which is announced too): a long
poll answers from it without reading Redis again.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel


class EventKind(StrEnum):
    STATUS = "status"
    """The job's status (or what its record holds) changed."""
    SEGMENT = "segment"
    """One more segment of a multi-segment job was counted done; its part is stored."""
    RESYNC = "resync"
    """Local only: the listener's connection was lost and restored; events may have been missed."""


class JobEvent(BaseModel):
    """One announcement on a job's channel."""

    kind: EventKind
    status: str | None = None
    """The new status (``status`` events), a :class:`ttsq.job_record.JobStatus` value."""
    index: int | None = None
    """The segment counted (``segment`` events)."""
    done: int | None = None
    """Segments done so far (``segment`` events)."""
    record: str | None = None
    """The record's JSON as written, on a terminal status (``status`` events)."""


def status_message(status: str, record: str | None = None) -> str:
    """A ``status`` event; ``record``: the record as written, for a terminal status only."""
    return JobEvent(kind=EventKind.STATUS, status=status, record=record).model_dump_json(exclude_none=True)


SEGMENT_MESSAGE_TEMPLATE = '{"kind":"segment","index":%s,"done":%s}'
"""What the segment-counting Lua script publishes (``string.format`` with index and count)."""


def parse_event(raw: bytes | str) -> JobEvent | None:
    """The event in a pub/sub message, or None for anything unreadable (never fatal to a listener)."""
    try:
        return JobEvent.model_validate_json(raw)
    except ValueError:
        return None
