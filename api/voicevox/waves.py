"""The WAV files VOICEVOX clients expect: 16-bit PCM at the query's rate, mono or stereo, with the
query's silence before and after; and ``/connect_waves``' joining of such files."""

from __future__ import annotations

import base64
import binascii
import io
import wave
from dataclasses import dataclass
from typing import Final

import numpy as np
import soundfile

from api.voicevox.deps import Refused
from tts_core.base.audio import PCM16
from tts_core.mastering.resampling import StreamResampler

MAX_WAVES: Final = 100
"""Most files one ``/connect_waves`` joins."""

PCM16_BYTES: Final = 2
"""Bytes of one decoded sample (each channel's), as the waves are read and joined."""


def silence(seconds: float, rate: int) -> PCM16:
    return np.zeros(round(seconds * rate), dtype=np.int16)


def resampled(pcm: PCM16, from_rate: int, to_rate: int) -> PCM16:
    resampler = StreamResampler(from_rate, to_rate)
    return np.concatenate([resampler.push(pcm), resampler.finish()])


def wav_bytes(pcm: PCM16, rate: int, stereo: bool) -> bytes:
    """16-bit PCM WAV; stereo is the mono signal on both channels, as VOICEVOX makes it."""
    frames = np.repeat(pcm[:, None], 2, axis=1) if stereo else pcm
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(2 if stereo else 1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(np.ascontiguousarray(frames, dtype="<i2").tobytes())
    return out.getvalue()


def connect_waves(encoded: list[str], max_bytes: int) -> bytes:
    """One WAV of the files given (base64), in order; they must share rate and channel count, as
    VOICEVOX ENGINE requires (it answers 422 otherwise too). Decoded, they may take at most
    ``max_bytes`` together (the request body cap: PCM WAVs, which VOICEVOX makes, decode to fewer
    bytes than their base64), so a compressed file (GSM 6.10 decodes to ten times its size) cannot
    make the API hold more than an uncompressed one; each is measured from its header before it is
    decoded, and decoded no further than what is left."""
    if not encoded:
        raise Refused(("body",), "no waves to connect", "value_error")
    if len(encoded) > MAX_WAVES:
        raise Refused(("body",), f"{len(encoded)} waves; at most {MAX_WAVES} are connected at once", "value_error")
    parts: list[np.ndarray] = []
    rate = channels = 0
    left = max_bytes
    for index, text in enumerate(encoded):
        audio, file_rate = _decoded(text, index, Budget(left, max_bytes))
        left -= audio.nbytes
        file_channels = audio.shape[1]
        if index == 0:
            rate, channels = file_rate, file_channels
        elif (file_rate, file_channels) != (rate, channels):
            message = f"{file_rate} Hz, {file_channels} channel(s); the first wave is {rate} Hz, {channels} channel(s)"
            raise Refused(("body", index), message, "value_error.wave_mismatch")
        parts.append(audio)
    joined = np.concatenate(parts)
    out = io.BytesIO()
    soundfile.write(out, joined, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


@dataclass(frozen=True)
class Budget:
    """Decoded bytes a wave may still take, of the ``total`` all the waves of a request may."""

    left: int
    total: int

    def frames(self, channels: int) -> int:
        return self.left // (PCM16_BYTES * channels)

    def refusal(self, index: int, frames: int, channels: int) -> Refused:
        size = frames * PCM16_BYTES * channels
        message = (
            f"wave {index} decodes to {size} bytes of 16-bit audio; the waves together may decode to at most "
            f"{self.total} bytes (max_request_bytes), {self.left} were left"
        )
        return Refused(("body", index), message, "value_error.wave_too_long")


def _decoded(text: str, index: int, budget: Budget) -> tuple[np.ndarray, int]:
    try:
        data = base64.b64decode(text, validate=True)
        if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
            raise ValueError("no RIFF/WAVE header")
        info = soundfile.info(io.BytesIO(data))
        allowed = budget.frames(info.channels)
        if info.frames > allowed:
            raise budget.refusal(index, info.frames, info.channels)
        # A header may understate its frames: decode no further than the budget either way.
        audio, rate = soundfile.read(io.BytesIO(data), frames=allowed + 1, dtype="int16", always_2d=True)
    except (binascii.Error, ValueError, RuntimeError) as e:  # soundfile's errors are RuntimeErrors
        reason = str(e).rsplit(": ", 1)[-1]  # not the BytesIO's repr that libsndfile's message starts with
        raise Refused(("body", index), f"not a base64 WAV file ({reason})", "value_error.wave_invalid") from None
    if len(audio) > allowed:
        raise budget.refusal(index, len(audio), audio.shape[1])
    return audio, int(rate)
