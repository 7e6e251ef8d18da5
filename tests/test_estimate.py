"""The submit-time audio estimate (pure): what expands when spoken costs more."""

from __future__ import annotations

import pytest

from ttsq.estimate import estimate_audio_s, planned_audio_s


def test_digits_and_symbols_cost_more_than_letters() -> None:
    letters = estimate_audio_s("abcdefghij")
    assert estimate_audio_s("1234567890") > 5 * letters
    assert estimate_audio_s("%%%%%%%%%%") > 3 * letters
    assert estimate_audio_s("a b c") == pytest.approx(estimate_audio_s("abc"))  # spaces are free


def test_prose_estimate_is_near_the_measured_rate() -> None:
    """100,000 characters of English prose made 93 minutes: 0.056 s a character."""
    prose = "The quick brown fox jumps over the lazy dog. " * 100
    per_char = estimate_audio_s(prose) / len(prose)
    assert 0.05 < per_char < 0.08


def test_speed_and_wide_characters() -> None:
    assert estimate_audio_s("hello", speed=2.0) == pytest.approx(estimate_audio_s("hello") / 2)
    assert estimate_audio_s("吾輩は猫である") > estimate_audio_s("abcdefg")


def test_planned_audio_counts_ids_by_engine_and_pauses() -> None:
    """At each engine's measured rate per id: Piper 0.027 s, Kokoro 0.062 s."""
    assert planned_audio_s("piper", [100, 100], 1.0) == pytest.approx(200 * 0.027 + 1.0)
    assert planned_audio_s("kokoro", [100], 0.0, speed=0.5) == pytest.approx(200 * 0.062)
