"""Finished audio into its file: the voice's PCM leveled where the job asks (``tts_core.mastering.leveling``),
resampled once to the file's rate (soxr), then encoded by libsndfile (WAV, FLAC, Ogg Vorbis, MP3,
G.711) or PyAV (Opus, AAC), a part at a time, whole (a stored object) or as it comes (the speech
endpoint's stream)."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO, Protocol, TypeVar

import av
import numpy as np
import soundfile

from tts_core.base.audio import PCM16, silence
from tts_core.base.errors import SynthesisError, UnsupportedFormat
from tts_core.mastering.codecs import CodecWriter
from tts_core.mastering.formats import AudioFormat, AudioOutput
from tts_core.mastering.leveling import Leveling
from tts_core.mastering.limiter import PeakLimiter
from tts_core.mastering.resampling import StreamResampler

T = TypeVar("T")

# libsndfile (format, subtype) per output; MP3 needs libsndfile >= 1.1, which soundfile's wheels bundle.
_SNDFILE = {
    AudioFormat.WAV: ("WAV", "PCM_16"),
    AudioFormat.FLAC: ("FLAC", "PCM_16"),
    AudioFormat.OGG: ("OGG", "VORBIS"),
    AudioFormat.MP3: ("MP3", "MPEG_LAYER_III"),
    AudioFormat.MULAW: ("RAW", "ULAW"),
    AudioFormat.ALAW: ("RAW", "ALAW"),
    AudioFormat.WAV_MULAW: ("WAV", "ULAW"),
    AudioFormat.WAV_ALAW: ("WAV", "ALAW"),
}
_ENCODING_ERRORS = (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError, av.FFmpegError)


@dataclass(frozen=True)
class EncodedAudio:
    """Finished audio as bytes, with what a client needs to know about it."""

    data: bytes
    format: AudioFormat
    sample_rate: int
    """The file's rate."""
    duration_s: float
    """The speech's length (what the voice made, before any codec's padding)."""

    @property
    def content_type(self) -> str:
        return self.format.content_type


class _PcmSink(Protocol):
    def write(self, pcm: PCM16) -> object: ...
    def close(self) -> object: ...


class _Stage(Protocol):
    """A streaming step on PCM that may hold some back until its finish (a resampler, the limiter)."""

    def push(self, pcm: PCM16) -> PCM16: ...
    def finish(self) -> PCM16: ...


class _Through:
    """A sink that passes the PCM through ``stage`` (the file's rate, a leveling) on to the encoder."""

    def __init__(self, encoder: _PcmSink, stage: _Stage) -> None:
        self._encoder = encoder
        self._stage = stage

    def write(self, pcm: PCM16) -> None:
        if (out := self._stage.push(pcm)).size:
            self._encoder.write(out)

    def close(self) -> None:
        if (tail := self._stage.finish()).size:
            self._encoder.write(tail)
        self._encoder.close()


def _open_sink(
    out: BinaryIO | io.RawIOBase, output: AudioOutput, voice_rate: int, leveling: Leveling | None = None
) -> _PcmSink:
    """An encoder of ``output`` writing to ``out`` as the voice's PCM is given to it, leveled first
    where ``leveling`` says."""
    encoder = _open_encoder(out, output, voice_rate)
    if leveling is None:
        return encoder
    return _Through(encoder, PeakLimiter(leveling.gain_db, leveling.true_peak_db, voice_rate))


def _open_encoder(out: BinaryIO | io.RawIOBase, output: AudioOutput, voice_rate: int) -> _PcmSink:
    rate = output.rate_for(voice_rate)
    codec = output.format.codec
    encoder: _PcmSink
    if codec is not None:
        encoder = CodecWriter(out, codec, rate, output.bitrate)
    else:
        container, subtype = _SNDFILE[output.format]
        encoder = soundfile.SoundFile(out, "w", rate, 1, subtype, format=container)
    return encoder if rate == voice_rate else _Through(encoder, StreamResampler(voice_rate, rate))


def encode(pcm: PCM16, voice_rate: int, output: AudioOutput, leveling: Leveling | None = None) -> EncodedAudio:
    """Encode a voice's mono 16-bit PCM into ``output``'s file, leveled where ``leveling`` says."""
    buffer = io.BytesIO()
    samples = encode_stream([pcm], 0.0, voice_rate, output, buffer, leveling)
    return EncodedAudio(buffer.getvalue(), output.format, output.rate_for(voice_rate), samples / voice_rate)


def encode_stream(
    parts: Iterable[PCM16],
    pause_s: float,
    voice_rate: int,
    output: AudioOutput,
    out: BinaryIO,
    leveling: Leveling | None = None,
) -> int:
    """Encode parts one after another into ``out`` (seekable), ``pause_s`` of silence between them,
    holding one part in memory at a time. Returns the number of the voice's samples encoded."""
    gap = silence(pause_s, voice_rate)
    samples = 0
    try:
        sink = _open_sink(out, output, voice_rate, leveling)
        try:
            for index, part in enumerate(parts):
                if index and gap.size:
                    sink.write(gap)
                    samples += gap.size
                sink.write(part)
                samples += part.size
        finally:
            sink.close()
    except _ENCODING_ERRORS as e:
        raise SynthesisError(f"encoding {output.format.value} failed: {e}") from e
    return samples


class _ForwardSink(io.RawIOBase):
    """A file for the encoders that hands on bytes as they are appended. Encoders seek back only when
    closing, to patch sizes into headers (MP3's Xing frame, FLAC's STREAMINFO); a stream already
    sent cannot be patched, so those writes are dropped and the stream keeps "length unknown"."""

    def __init__(self) -> None:
        super().__init__()
        self._position = 0
        self._end = 0
        self._fresh = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        size = len(data)
        if self._position == self._end:
            self._fresh += data
            self._end += size
        self._position += size
        return size

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._end}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def take(self) -> bytes:
        fresh, self._fresh = bytes(self._fresh), bytearray()
        return fresh


def _streaming_wav_header(sample_rate: int) -> bytes:
    """A 16-bit mono WAV header whose sizes say "unknown" (0xFFFFFFFF), as streamed WAV is sent."""
    unknown = 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", unknown)
    )


class _RawPcm:
    """16-bit little-endian PCM with no container, as the speech endpoint's ``pcm``."""

    def __init__(self, out: _ForwardSink, header: bytes = b"") -> None:
        self._out = out
        self._out.write(header)

    def write(self, pcm: PCM16) -> None:
        self._out.write(pcm.astype("<i2", copy=False).tobytes())

    def close(self) -> None:
        return None


class StreamEncoder:
    """Encodes a voice's PCM into ``output`` piece by piece, giving back the bytes each piece
    produced, for sending audio while the rest is still being synthesised. ``output`` None is raw
    PCM (16-bit little-endian mono, no container) at ``pcm_rate`` (None: the voice's); M4A is not
    offered (its index comes last)."""

    def __init__(self, output: AudioOutput | None, voice_rate: int, pcm_rate: int | None = None) -> None:
        self._name = "pcm" if output is None else output.format.value
        self._sink = _ForwardSink()
        if output is not None and not output.streams:
            raise UnsupportedFormat(f"{output.format.value} cannot be streamed")
        self._encoder = self._guarded(lambda: self._open(output, voice_rate, pcm_rate))

    def _open(self, output: AudioOutput | None, voice_rate: int, pcm_rate: int | None) -> _PcmSink:
        if output is not None and output.format is not AudioFormat.WAV:
            return _open_sink(self._sink, output, voice_rate)
        rate = (pcm_rate or voice_rate) if output is None else output.rate_for(voice_rate)
        raw = _RawPcm(self._sink, b"" if output is None else _streaming_wav_header(rate))
        return raw if rate == voice_rate else _Through(raw, StreamResampler(voice_rate, rate))

    def write(self, pcm: PCM16) -> bytes:
        self._guarded(lambda: self._encoder.write(np.asarray(pcm, dtype=np.int16)))
        return self._sink.take()

    def close(self) -> bytes:
        """The encoder's last bytes (buffered frames, the container's trailer)."""
        self._guarded(self._encoder.close)
        return self._sink.take()

    def _guarded(self, step: Callable[[], T]) -> T:
        try:
            return step()
        except _ENCODING_ERRORS as e:
            raise SynthesisError(f"encoding {self._name} failed: {e}") from e
