"""Container/codec encoders for finished audio, through libsndfile (``soundfile``)."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import BinaryIO, Final

import soundfile

from tts_core.audio import PCM16, silence
from tts_core.errors import SynthesisError, UnsupportedFormat


class AudioFormat(StrEnum):
    """Output formats a job may ask for."""

    WAV = "wav"
    FLAC = "flac"
    OGG = "ogg"
    MP3 = "mp3"

    @classmethod
    def parse(cls, value: str) -> AudioFormat:
        """Parse a user-supplied format name, naming the valid ones on failure."""
        try:
            return cls(value.lower())
        except ValueError:
            valid = ", ".join(f.value for f in cls)
            raise UnsupportedFormat(f"unsupported format {value!r}; choose one of: {valid}") from None

    @property
    def content_type(self) -> str:
        return _CONTENT_TYPES[self]

    @property
    def extension(self) -> str:
        return self.value


DEFAULT_FORMAT: Final = AudioFormat.WAV
"""What a job gets when it names no format."""

_CONTENT_TYPES = {
    AudioFormat.WAV: "audio/wav",
    AudioFormat.FLAC: "audio/flac",
    AudioFormat.OGG: "audio/ogg",
    AudioFormat.MP3: "audio/mpeg",
}
# libsndfile (format, subtype) per output; MP3 needs libsndfile >= 1.1, which soundfile's wheels bundle.
_SNDFILE = {
    AudioFormat.WAV: ("WAV", "PCM_16"),
    AudioFormat.FLAC: ("FLAC", "PCM_16"),
    AudioFormat.OGG: ("OGG", "VORBIS"),
    AudioFormat.MP3: ("MP3", "MPEG_LAYER_III"),
}


@dataclass(frozen=True)
class EncodedAudio:
    """Finished audio as bytes, with what a client needs to know about it."""

    data: bytes
    format: AudioFormat
    sample_rate: int
    samples: int

    @property
    def duration_s(self) -> float:
        return self.samples / self.sample_rate

    @property
    def content_type(self) -> str:
        return self.format.content_type


def encode(pcm: PCM16, sample_rate: int, audio_format: AudioFormat) -> EncodedAudio:
    """Encode mono 16-bit PCM into the requested container."""
    container, subtype = _SNDFILE[audio_format]
    buffer = io.BytesIO()
    try:
        soundfile.write(buffer, pcm, sample_rate, format=container, subtype=subtype)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as e:
        raise SynthesisError(f"encoding {audio_format.value} failed: {e}") from e
    return EncodedAudio(buffer.getvalue(), audio_format, sample_rate, int(pcm.size))


def encode_stream(
    parts: Iterable[PCM16], pause_s: float, sample_rate: int, audio_format: AudioFormat, out: BinaryIO
) -> int:
    """Encode parts one after another into ``out`` (seekable), ``pause_s`` of silence between them,
    holding one part in memory at a time. Returns the number of samples written."""
    container, subtype = _SNDFILE[audio_format]
    gap = silence(pause_s, sample_rate)
    samples = 0
    try:
        with soundfile.SoundFile(out, "w", sample_rate, 1, subtype, format=container) as sink:
            for index, part in enumerate(parts):
                if index and gap.size:
                    sink.write(gap)
                    samples += gap.size
                sink.write(part)
                samples += part.size
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as e:
        raise SynthesisError(f"encoding {audio_format.value} failed: {e}") from e
    return samples


class _ForwardSink(io.RawIOBase):
    """A file for libsndfile that hands on bytes as they are appended. Encoders seek back only when
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


class StreamEncoder:
    """Encodes PCM into ``audio_format`` piece by piece, giving back the bytes each piece produced,
    for sending audio while the rest is still being synthesised. ``pcm`` (raw 16-bit little-endian
    mono, no container) is offered besides the stored formats."""

    def __init__(self, audio_format: AudioFormat | None, sample_rate: int) -> None:
        """``audio_format`` None means raw PCM."""
        self._format = audio_format
        self._sample_rate = sample_rate
        self._sink = _ForwardSink()
        self._file: soundfile.SoundFile | None = None
        self._header = b""
        if audio_format is AudioFormat.WAV:
            self._header = _streaming_wav_header(sample_rate)
        elif audio_format is not None:
            container, subtype = _SNDFILE[audio_format]
            self._file = soundfile.SoundFile(self._sink, "w", sample_rate, 1, subtype, format=container)

    def write(self, pcm: PCM16) -> bytes:
        header, self._header = self._header, b""
        if self._file is None:
            return header + pcm.astype("<i2", copy=False).tobytes()
        try:
            self._file.write(pcm)
        except (soundfile.LibsndfileError, RuntimeError, TypeError) as e:
            raise SynthesisError(f"encoding {self._format} failed: {e}") from e
        return header + self._sink.take()

    def close(self) -> bytes:
        """The encoder's last bytes (buffered frames)."""
        if self._file is None:
            return self._header
        self._file.close()
        return self._sink.take()
