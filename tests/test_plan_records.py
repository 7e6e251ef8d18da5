"""A job's plan as stored in Redis: what the entry step writes, the segment steps read back."""

from __future__ import annotations

import json

from tts_core.base.plan import PlannedUtterance


def round_trip(utterance: PlannedUtterance) -> PlannedUtterance:
    return PlannedUtterance.from_json(json.loads(json.dumps(utterance.to_json())))


def test_every_field_survives_the_round_trip() -> None:
    for utterance in (
        PlannedUtterance([1, 2, 3]),
        PlannedUtterance([1, 2], rate=0.75, pause_after_s=0.5, pause_before_s=1.0, span=(4, 9), sentence_start=True),
        PlannedUtterance([1], rate=1.25, pause_after_s=0.0, gain=0.25),  # SSML: a volume, no span
        PlannedUtterance([7], span=(0, 3), gain=0.0),  # silent
    ):
        assert round_trip(utterance) == utterance


def test_plans_stored_before_gains_existed_read_as_full_volume() -> None:
    """A job queued by the previous version is finished by this one (a rolling upgrade)."""
    assert PlannedUtterance.from_json([[1, 2], 1.0, None, 0.0]) == PlannedUtterance([1, 2])
    assert PlannedUtterance.from_json([[1], 1.0, 0.3, 0.0, [2, 5], True]) == PlannedUtterance(
        [1], pause_after_s=0.3, span=(2, 5), sentence_start=True
    )


def test_full_volume_is_stored_as_before() -> None:
    assert PlannedUtterance([1, 2], span=(0, 4)).to_json() == [[1, 2], 1.0, None, 0.0, [0, 4], False]
