"""Encoders libsndfile lacks (Opus, AAC), through PyAV's bundled FFmpeg: mono 16-bit PCM in, a
container's bytes out, written to any file object, a part at a time.

Each codec encodes in fixed frames (Opus 20 ms, AAC 1,024 samples) at rates of its own, so the PCM
goes through one resampler that converts the sample format and rate and cuts frames of the codec's
size; ``close`` drains the resampler and the encoder and writes the container's trailer (the last
Ogg page, the MP4 index), so no tail is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import RawIOBase
from typing import BinaryIO, Final, cast

import av
import numpy as np
from av.audio.frame import AudioFrame
from av.audio.resampler import AudioResampler
from av.audio.stream import AudioStream
from av.container import OutputContainer

from tts_core.base.audio import PCM16


@dataclass(frozen=True)
class Codec:
    """One PyAV output: the FFmpeg muxer and encoder, the rates the encoder takes, and the bit rate
    ttsq gives one voice by default."""

    muxer: str
    encoder: str
    rates: tuple[int, ...]
    default_bitrate: int
    bitrates: tuple[int, int]
    """The bit rates ttsq accepts for one voice (bit/s, inclusive)."""
    needs_seek: bool
    """The muxer patches its header when it closes (MP4's index): the output must be seekable."""
    options: tuple[tuple[str, str], ...] = ()
    """The encoder's FFmpeg options."""

    def rate_for(self, sample_rate: int) -> int:
        """The encoder's rate for audio at ``sample_rate``: that rate where the codec takes it, else
        the lowest it takes above it (Opus has no 22,050 Hz: 24,000), else its highest."""
        if sample_rate in self.rates:
            return sample_rate
        above = [rate for rate in self.rates if rate > sample_rate]
        return min(above) if above else max(self.rates)


OPUS: Final = Codec(
    "ogg",
    "libopus",
    (8000, 12000, 16000, 24000, 48000),
    32_000,
    (6_000, 256_000),
    needs_seek=False,
    options=(("compression_level", "5"),),
)
"""Ogg Opus (RFC 7845), OpenAI's ``opus``: 32 kbit/s is transparent for one voice. Complexity 5 of
10 (libopus's default is 10): half the encoding time (about 0.3 s a minute of speech on one core
here, against 0.6), which a worker would otherwise take from synthesis, for files 7% larger at the
same bit rate target (measured on a minute of tone and noise)."""
AAC_RATES: Final = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
AAC_BITRATES: Final = (16_000, 320_000)
ADTS_AAC: Final = Codec("adts", "aac", AAC_RATES, 64_000, AAC_BITRATES, needs_seek=False)
"""AAC-LC in ADTS frames, OpenAI's ``aac``: each frame carries its own header, so it streams."""
MP4_AAC: Final = Codec("ipod", "aac", AAC_RATES, 64_000, AAC_BITRATES, needs_seek=True)
"""AAC-LC in an MP4 (``.m4a``) whose header gives the duration."""


class CodecWriter:
    """Encodes PCM parts into ``codec``'s container on ``out`` as they come."""

    def __init__(self, out: BinaryIO | RawIOBase, codec: Codec, sample_rate: int, bitrate: int | None = None) -> None:
        self._container: OutputContainer = av.open(out, "w", format=codec.muxer)
        rate = codec.rate_for(sample_rate)
        stream = self._container.add_stream(codec.encoder, rate=rate, layout="mono", options=dict(codec.options))
        self._stream = cast(AudioStream, stream)
        self._stream.bit_rate = bitrate or codec.default_bitrate
        self._container.start_encoding()  # opens the encoder (its frame size, sample format) and writes the header
        context = self._stream.codec_context
        self._resampler = AudioResampler(
            format=context.format, layout="mono", rate=rate, frame_size=context.frame_size or None
        )
        self._input_rate = sample_rate
        self._input_samples = 0
        self._encoded_samples = 0

    def write(self, pcm: PCM16) -> None:
        if not pcm.size:
            return
        frame = AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = self._input_rate
        frame.pts = self._input_samples
        self._input_samples += pcm.size
        self._encode(self._resampler.resample(frame))

    def close(self) -> None:
        """Flush the resampler, the encoder and the container (its trailer)."""
        self._encode(self._resampler.resample(None))
        self._container.mux(self._stream.encode(None))
        self._container.close()

    def _encode(self, frames: list[AudioFrame]) -> None:
        for frame in frames:
            # Numbered from 0 in samples of the encoder's rate: the encoder then starts its packets
            # at minus its priming delay, and the muxer writes that delay down (MP4's edit list, Ogg's
            # pre-skip) so decoders drop it and the file lasts as long as the speech.
            frame.pts = self._encoded_samples
            self._encoded_samples += frame.samples
            self._container.mux(self._stream.encode(frame))
