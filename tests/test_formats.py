"""Encoders: every format decodes back with the right rate and length."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from tts_core.audio import join_with_pauses, to_int16
from tts_core.errors import UnsupportedFormat
from tts_core.formats import AudioFormat, encode, encode_stream

RATE = 22050


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return to_int16((0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))


@pytest.mark.parametrize("audio_format", list(AudioFormat))
def test_each_format_decodes(audio_format: AudioFormat) -> None:
    pcm = tone(1.0)
    encoded = encode(pcm, RATE, audio_format)
    decoded, rate = soundfile.read(io.BytesIO(encoded.data))
    assert rate == RATE
    assert encoded.duration_s == pytest.approx(1.0)
    # Lossy codecs pad by up to a frame or two; lengths must still agree within 50 ms.
    assert abs(len(decoded) - len(pcm)) < 0.05 * RATE
    assert np.sqrt(np.mean(decoded**2)) > 0.2


def test_content_types() -> None:
    assert [f.content_type for f in AudioFormat] == ["audio/wav", "audio/flac", "audio/ogg", "audio/mpeg"]


def test_unknown_format_names_the_valid_ones() -> None:
    with pytest.raises(UnsupportedFormat, match="choose one of: wav, flac, ogg, mp3"):
        AudioFormat.parse("aiff")


def test_int16_conversion_clips() -> None:
    assert to_int16(np.array([2.0, -2.0, 0.5], dtype=np.float32)).tolist() == [32767, -32768, 16383]


def test_join_with_pauses_inserts_silence_between_parts_only() -> None:
    a, b = np.ones(10, dtype=np.int16), np.full(5, 2, dtype=np.int16)
    joined = join_with_pauses([a, b], 0.001, 1000)
    assert joined.tolist() == [1] * 10 + [0] + [2] * 5


@pytest.mark.parametrize("audio_format", [AudioFormat.WAV, AudioFormat.FLAC])
def test_streamed_parts_equal_the_joined_whole(audio_format: AudioFormat) -> None:
    parts = [tone(0.5), tone(0.2), tone(0.7)]
    sink = io.BytesIO()
    samples = encode_stream(iter(parts), 0.25, RATE, audio_format, sink)
    whole = join_with_pauses(parts, 0.25, RATE)
    assert samples == whole.size
    decoded, rate = soundfile.read(io.BytesIO(sink.getvalue()), dtype="int16")
    assert rate == RATE
    np.testing.assert_array_equal(decoded, whole)  # lossless: identical samples, pauses included
