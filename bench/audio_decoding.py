"""Audio read back as a player reads it: FFmpeg's decoders through PyAV, independent of the
encoders under test (libsndfile for WAV/FLAC/Vorbis/MP3, PyAV's muxers for Opus and AAC)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np


@dataclass(frozen=True)
class Decoded:
    """A file's first audio stream, decoded whole: its first channel as float samples."""

    samples: np.ndarray
    sample_rate: int
    channels: int
    codec: str
    container_duration_s: float | None
    """What the container's header says (MP4's, from its edit list), where it says anything."""

    @property
    def duration_s(self) -> float:
        return self.samples.size / self.sample_rate


def decode(data: bytes, demuxer: str | None = None, sample_rate: int | None = None) -> Decoded:
    """``demuxer`` and ``sample_rate`` for headerless audio (raw G.711: ``mulaw``, ``alaw``)."""
    options = {} if demuxer is None or sample_rate is None else {"sample_rate": str(sample_rate), "ch_layout": "mono"}
    with av.open(io.BytesIO(data), "r", format=demuxer, options=options) as container:
        stream = container.streams.audio[0]
        frames = [frame.to_ndarray() for frame in container.decode(stream)]
        channels = stream.codec_context.channels
        header = None if container.duration is None else container.duration / av.time_base
        first_channel = [f[0] if f.shape[0] == channels else f.reshape(-1)[::channels] for f in frames]
        pcm = np.concatenate(first_channel) if first_channel else np.zeros(0, dtype=np.float32)
        if pcm.dtype.kind == "i":
            pcm = pcm.astype(np.float32) / np.iinfo(pcm.dtype).max
        return Decoded(pcm, stream.codec_context.sample_rate, channels, stream.codec_context.name, header)
