"""The benchmark's measure of a streamed answer's stalls: what a listener playing it as it arrives
waits for after the first audio (pure arithmetic on arrival times; ``bench.first_audio`` reports it)."""

from __future__ import annotations

import struct

import pytest

from bench.peer import WAV_HEADER_BYTES, playback_stall_s

BYTE_RATE = 48_000
"""24 kHz, 16-bit, mono: a second of audio is 48,000 bytes."""


def header() -> bytes:
    """A WAV header whose byte rate is :data:`BYTE_RATE`."""
    return b"RIFF" + bytes(24) + struct.pack("<I", BYTE_RATE) + bytes(WAV_HEADER_BYTES - 32)


def arrived(*chunks: tuple[float, float]) -> list[tuple[float, int]]:
    """Arrival times of the header at 0.1 s, then of each (time, seconds of audio) chunk."""
    total, out = WAV_HEADER_BYTES, [(0.1, WAV_HEADER_BYTES)]
    for at, seconds in chunks:
        total += round(seconds * BYTE_RATE)
        out.append((at, total))
    return out


def test_audio_that_arrives_before_the_previous_runs_out_never_stalls() -> None:
    assert playback_stall_s(arrived((0.8, 1.5), (1.9, 3.0), (2.0, 0.5)), header()) == 0.0


def test_a_chunk_after_the_audio_ran_out_is_a_stall_and_playback_resumes_from_it() -> None:
    # 1.5 s from 0.8 runs out at 2.3; the next comes at 3.3 (1 s waited) and runs 2 s to 5.3; the
    # third at 5.8: half a second more.
    stalls = playback_stall_s(arrived((0.8, 1.5), (3.3, 2.0), (5.8, 1.0)), header())
    assert stalls == pytest.approx(1.5)


def test_the_header_alone_starts_nothing() -> None:
    """The wait for the first audio is first-byte time, not a stall."""
    assert playback_stall_s(arrived((4.0, 1.0), (4.5, 1.0)), header()) == 0.0
