"""A job's audio at another sample rate: the SoX resampler (``soxr``, high quality), fed a part at a
time, so a job is resampled once, in order, with bounded memory and no seam between parts."""

from __future__ import annotations

from typing import Final

import numpy as np
import soxr

from tts_core.base.audio import PCM16

OUTPUT_RATES: Final = (8000, 16000, 22050, 24000, 44100, 48000)
"""The rates a job may ask for: telephony, wideband, the voices' own, and the CD and video rates."""


class StreamResampler:
    """PCM at ``from_rate`` in, PCM at ``to_rate`` out, in pieces; ``finish`` gives the filter's tail."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self._stream = None if from_rate == to_rate else soxr.ResampleStream(from_rate, to_rate, 1, dtype="int16")

    def push(self, pcm: PCM16) -> PCM16:
        if self._stream is None or not pcm.size:
            return pcm
        out: PCM16 = self._stream.resample_chunk(np.ascontiguousarray(pcm, dtype=np.int16))
        return out

    def finish(self) -> PCM16:
        if self._stream is None:
            return np.zeros(0, dtype=np.int16)
        out: PCM16 = self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True)
        return out
