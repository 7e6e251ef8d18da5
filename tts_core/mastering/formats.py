"""The output formats a job may ask for, and what each allows: its file's sample rate, bit rate,
content type and extension. Encoding is :mod:`tts_core.mastering.encoding`'s job."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from tts_core.base.errors import UnsupportedFormat
from tts_core.mastering.codecs import ADTS_AAC, MP4_AAC, OPUS, Codec
from tts_core.mastering.resampling import OUTPUT_RATES


class AudioFormat(StrEnum):
    """Output formats a job may ask for."""

    WAV = "wav"
    FLAC = "flac"
    OGG = "ogg"
    MP3 = "mp3"
    OPUS = "opus"
    AAC = "aac"
    M4A = "m4a"
    MULAW = "mulaw"
    ALAW = "alaw"
    WAV_MULAW = "wav_mulaw"
    WAV_ALAW = "wav_alaw"

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
        return _EXTENSIONS.get(self, self.value)

    @property
    def codec(self) -> Codec | None:
        """The PyAV codec that encodes it; None for libsndfile's formats."""
        return _CODECS.get(self)

    @property
    def telephony(self) -> bool:
        """G.711 (μ-law, A-law): 8,000 Hz by definition."""
        return self in _TELEPHONY


DEFAULT_FORMAT: Final = AudioFormat.WAV
"""What a job gets when it names no format."""

TELEPHONY_RATE: Final = 8000

_CONTENT_TYPES = {
    AudioFormat.WAV: "audio/wav",
    AudioFormat.FLAC: "audio/flac",
    AudioFormat.OGG: "audio/ogg",
    AudioFormat.MP3: "audio/mpeg",
    AudioFormat.OPUS: "audio/ogg",
    AudioFormat.AAC: "audio/aac",
    AudioFormat.M4A: "audio/mp4",
    AudioFormat.MULAW: "audio/basic",  # RFC 2046: 8 kHz mono μ-law
    AudioFormat.ALAW: "audio/x-alaw-basic",
    AudioFormat.WAV_MULAW: "audio/wav",
    AudioFormat.WAV_ALAW: "audio/wav",
}
_EXTENSIONS = {
    AudioFormat.MULAW: "ulaw",  # Asterisk's names for raw G.711 files
    AudioFormat.ALAW: "alaw",
    AudioFormat.WAV_MULAW: "wav",
    AudioFormat.WAV_ALAW: "wav",
}
_CODECS: dict[AudioFormat, Codec] = {AudioFormat.OPUS: OPUS, AudioFormat.AAC: ADTS_AAC, AudioFormat.M4A: MP4_AAC}
_TELEPHONY = frozenset({AudioFormat.MULAW, AudioFormat.ALAW, AudioFormat.WAV_MULAW, AudioFormat.WAV_ALAW})


def allowed_rates(audio_format: AudioFormat) -> tuple[int, ...]:
    """The ``sample_rate`` values a job in ``audio_format`` may ask for."""
    if audio_format.telephony:
        return (TELEPHONY_RATE,)
    codec = audio_format.codec
    return OUTPUT_RATES if codec is None else tuple(r for r in OUTPUT_RATES if r in codec.rates)


@dataclass(frozen=True)
class AudioOutput:
    """What a job's file is to be: its format, and the sample rate and bit rate asked for (None: the
    format's own)."""

    format: AudioFormat = DEFAULT_FORMAT
    sample_rate: int | None = None
    bitrate: int | None = None

    def check(self) -> None:
        """Raise ``UnsupportedFormat`` naming the field and the values allowed, if any is wrong."""
        name = self.format.value
        if self.sample_rate is not None and self.sample_rate not in allowed_rates(self.format):
            rates = ", ".join(str(r) for r in allowed_rates(self.format))
            raise UnsupportedFormat(f"sample_rate {self.sample_rate} is not offered for {name}; choose one of: {rates}")
        if self.bitrate is None:
            return
        codec = self.format.codec
        if codec is None:
            takes = ", ".join(f.value for f in _CODECS)
            raise UnsupportedFormat(f"bitrate applies to {takes}, not {name}")
        low, high = codec.bitrates
        if not low <= self.bitrate <= high:
            raise UnsupportedFormat(f"bitrate for {name} is {low} to {high} bit/s, not {self.bitrate}")

    def rate_for(self, voice_rate: int) -> int:
        """The file's sample rate, for a voice that speaks at ``voice_rate``: the one asked for, else
        the voice's where the format has it (Opus has no 22,050 Hz: 24,000; G.711 is 8,000)."""
        if self.sample_rate is not None:
            return self.sample_rate
        if self.format.telephony:
            return TELEPHONY_RATE
        codec = self.format.codec
        return voice_rate if codec is None else codec.rate_for(voice_rate)

    @property
    def streams(self) -> bool:
        """Whether it can be sent as it is encoded (an MP4's index is written last)."""
        codec = self.format.codec
        return codec is None or not codec.needs_seek
