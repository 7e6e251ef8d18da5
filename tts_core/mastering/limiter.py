"""One gain for a whole job, and a look-ahead true-peak limiter that keeps its peaks under a ceiling.

True peaks are the peaks of the continuous signal the samples stand for (ITU-R BS.1770-4 Annex 2):
each sample's neighbourhood is interpolated at four phases (a 96-tap Kaiser-windowed sinc, 24
taps a phase: BS.1770's 12 a phase under-read a 22,050 Hz voice's upper band by up to 1.5 dB) and the
largest magnitude counts. Where a peak would pass the ceiling, the gain dips to just
what it allows: it starts to fall ``ATTACK_S`` ahead of the peak, holds ``HOLD_S`` after it, and
rises over ``ATTACK_S`` again, so the envelope is smooth and no sample above the ceiling gets
through. Every step is a whole-array numpy operation (a sliding minimum by the van Herk / Gil-Werman
method, box averages by cumulative sums); audio is streamed through in pieces, delayed by the
look-ahead, in memory bounded by the piece.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from tts_core.base.audio import PCM16, gain_of

ATTACK_S: Final = 0.005
HOLD_S: Final = 0.020
CEILING_MARGIN_DB: Final = 0.2
"""Held below the ceiling: four interpolated points a sample find a true peak to within about this
(checked against 8x oversampling on speech-like audio)."""
_PHASES: Final = 4
_TAPS_PER_PHASE: Final = 24
_FULL_SCALE: Final = 32768.0

Samples = npt.NDArray[np.float64]


def _interpolation_phases() -> Samples:
    """Four fractional-delay filters (rows) of a four-times windowed-sinc interpolator."""
    length = _PHASES * _TAPS_PER_PHASE
    n = np.arange(length) - (length - 1) / 2
    prototype = np.sinc(n / _PHASES) * np.kaiser(length, 6.0)
    phases = prototype.reshape(_TAPS_PER_PHASE, _PHASES).T.copy()
    phases /= phases.sum(axis=1, keepdims=True)
    return phases


_PHASE_FILTERS: Final = _interpolation_phases()
_FILTER_REACH: Final = _TAPS_PER_PHASE
"""Samples of context either side the interpolation needs (a little more than half its length)."""


def true_peaks(audio: Samples) -> Samples:
    """Each sample's true-peak magnitude: the largest of it and the interpolated points near it."""
    peaks = np.abs(audio)
    half = _TAPS_PER_PHASE // 2
    for taps in _PHASE_FILTERS:
        interpolated = np.convolve(audio, taps, mode="full")[half - 1 : half - 1 + audio.size]
        np.maximum(peaks, np.abs(interpolated), out=peaks)
    return peaks


def sliding_min(values: Samples, width: int) -> Samples:
    """``out[i] = min(values[i : i + width])`` for each ``i`` with a full window (van Herk / Gil-Werman)."""
    count = values.size - width + 1
    if count <= 0:
        return np.empty(0)
    blocks = -(-values.size // width)
    padded = np.full(blocks * width, np.inf)
    padded[: values.size] = values
    grid = padded.reshape(blocks, width)
    prefix = np.minimum.accumulate(grid, axis=1).ravel()
    suffix = np.minimum.accumulate(grid[:, ::-1], axis=1)[:, ::-1].ravel()
    starts = np.arange(count)
    return np.minimum(suffix[starts], prefix[starts + width - 1])


def box_mean(values: Samples, width: int) -> Samples:
    """``out[i] = mean(values[i : i + width])`` for each ``i`` with a full window."""
    sums = np.concatenate(([0.0], np.cumsum(values)))
    return (sums[width:] - sums[:-width]) / width


class PeakLimiter:
    """Feed a job's PCM in order with :meth:`push`, then :meth:`finish`; each returns the PCM ready so
    far (all but the last look-ahead's worth, until the finish), times ``gain_db`` and with true
    peaks at most ``ceiling_db`` dBTP: as many samples out as went in, in the same places."""

    def __init__(self, gain_db: float, ceiling_db: float, sample_rate: int) -> None:
        self._gain = gain_of(gain_db)
        self._ceiling = gain_of(ceiling_db - CEILING_MARGIN_DB) * _FULL_SCALE
        self._attack = max(1, round(ATTACK_S * sample_rate))
        self._hold = max(1, round(HOLD_S * sample_rate))
        self._behind = self._attack + self._hold + _FILTER_REACH
        self._ahead = self._attack + _FILTER_REACH
        self._past: Samples = np.zeros(self._behind)
        self._pending: Samples = np.zeros(0)

    def push(self, pcm: PCM16) -> PCM16:
        self._pending = np.concatenate((self._pending, pcm.astype(np.float64) * self._gain))
        return self._emit(self._pending.size - self._ahead)

    def finish(self) -> PCM16:
        ready = self._pending.size
        self._pending = np.concatenate((self._pending, np.zeros(self._ahead)))
        return self._emit(ready)

    def _emit(self, ready: int) -> PCM16:
        if ready <= 0:
            return np.zeros(0, dtype=np.int16)
        work = np.concatenate((self._past, self._pending))
        gains = self._gains(work)[:ready]  # gains[i] is for work[behind + i]
        out = self._pending[:ready] * gains
        self._past = work[ready : ready + self._behind]
        self._pending = self._pending[ready:]
        return np.clip(np.rint(out), -_FULL_SCALE, _FULL_SCALE - 1).astype(np.int16)

    def _gains(self, work: Samples) -> Samples:
        """The gain of each sample of ``work`` past its first ``behind``: the lowest any peak within
        ``hold`` before it or ``attack`` after it needs, averaged over the ``attack`` before it."""
        peaks = true_peaks(work)
        size = work.size - self._behind
        if peaks.max(initial=0.0) <= self._ceiling:
            return np.ones(size)
        needed = np.minimum(1.0, self._ceiling / np.maximum(peaks, 1e-9))
        # lowest[j] = min(needed[j - hold .. j + attack]); gain[i] = mean(lowest[i - attack .. i])
        lowest = sliding_min(needed, self._hold + self._attack + 1)
        smoothed = box_mean(lowest, self._attack + 1)
        # smoothed[k] covers needed[k .. k + 2 attack + hold], and is the gain of sample k + attack + hold
        first = self._behind - self._attack - self._hold
        return np.minimum(1.0, smoothed[first : first + size])
