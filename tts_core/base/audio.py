"""Sample-level helpers: float to int16, silence and joining sentences with pauses."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatAudio = npt.NDArray[np.float32]
PCM16 = npt.NDArray[np.int16]


def to_int16(audio: FloatAudio) -> PCM16:
    """Convert model output in [-1, 1] to 16-bit PCM, clipping what overshoots."""
    clipped: PCM16 = np.clip(audio * 32767.0, -32768, 32767).astype(np.int16)
    return clipped


def gain_of(volume_db: float) -> float:
    """The factor on the samples for a change of level in dB (-inf: silent, 0)."""
    return 0.0 if math.isinf(volume_db) else float(10 ** (volume_db / 20))


def silence(seconds: float, sample_rate: int) -> PCM16:
    """A run of digital silence."""
    return np.zeros(round(seconds * sample_rate), dtype=np.int16)


def join_with_pauses(parts: Sequence[PCM16], pause_s: float, sample_rate: int) -> PCM16:
    """Concatenate utterances with ``pause_s`` of silence between consecutive ones."""
    if not parts:
        return np.zeros(0, dtype=np.int16)
    gap = silence(pause_s, sample_rate)
    pieces: list[PCM16] = []
    for index, part in enumerate(parts):
        if index:
            pieces.append(gap)
        pieces.append(part)
    return np.concatenate(pieces)


def speech_pcm(utterances: Sequence[FloatAudio], pause_s: float, sample_rate: int) -> PCM16:
    """Model outputs of consecutive utterances as one 16-bit run with ``pause_s`` between them: the
    one way ttsq turns synthesised utterances into a segment's audio."""
    return join_with_pauses([to_int16(audio) for audio in utterances], pause_s, sample_rate)


def timed_pcm(
    utterances: Sequence[FloatAudio],
    before_s: Sequence[float],
    after_s: Sequence[float],
    sample_rate: int,
    gains: Sequence[float] | None = None,
) -> PCM16:
    """Utterances with their own silence before and after each (exact SSML breaks, paragraph and
    sentence pauses), each times its gain (volume; clipped at full scale): one 16-bit run."""
    pieces: list[PCM16] = []
    factors = gains if gains is not None else [1.0] * len(utterances)
    for audio, before, after, gain in zip(utterances, before_s, after_s, factors, strict=True):
        scaled = audio if gain == 1.0 else audio * np.float32(gain)
        pieces.extend((silence(before, sample_rate), to_int16(scaled), silence(after, sample_rate)))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)


def rms_dbfs(pcm: PCM16) -> float:
    """Loudness as RMS in dB relative to full scale; -inf for silence."""
    if pcm.size == 0:
        return float("-inf")
    rms = float(np.sqrt(np.mean((pcm.astype(np.float64) / 32768.0) ** 2)))
    return 20.0 * float(np.log10(rms)) if rms > 0 else float("-inf")
