"""Container/codec encoders for finished audio, through libsndfile (``soundfile``)."""

from __future__ import annotations

import io
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
