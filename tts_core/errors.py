"""Errors raised by the synthesis library.

Exception tree::

    TTSError
    ├── InvalidInput            the request itself is wrong; retrying cannot help
    │   ├── EmptyText           nothing speakable after normalisation
    │   ├── TextTooLong         more characters than the configured limit
    │   ├── VoiceNotFound       no voice with that id
    │   ├── UnsupportedFormat   unknown output format
    │   └── InvalidOption       a synthesis option outside its bounds
    ├── VoiceLoadError          a voice's model or config cannot be read
    ├── DeviceUnavailable       CUDA was required but cannot be used
    └── SynthesisError          inference or encoding failed

Callers translate these into their own terms (HTTP status codes live in ``api/`` only).
"""

from __future__ import annotations


class TTSError(Exception):
    """Base class for all tts_core errors; ``code`` is a stable machine-readable name."""

    code = "tts_error"


class InvalidInput(TTSError):
    """The request is wrong in a way that retrying cannot fix."""

    code = "invalid_input"


class EmptyText(InvalidInput):
    """The text holds nothing speakable once normalised."""

    code = "empty_text"


class TextTooLong(InvalidInput):
    """The text has more characters than the configured limit."""

    code = "text_too_long"

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"text has {length} characters; the limit is {limit}")
        self.length = length
        self.limit = limit


class VoiceNotFound(InvalidInput):
    """No voice is known under the requested id."""

    code = "voice_not_found"

    def __init__(self, voice_id: str, available: list[str]) -> None:
        super().__init__(f"unknown voice {voice_id!r}; available voices: {', '.join(available)}")
        self.voice_id = voice_id
        self.available = available


class UnsupportedFormat(InvalidInput):
    """The requested output format is not one the encoder writes."""

    code = "unsupported_format"


class InvalidOption(InvalidInput):
    """A synthesis option lies outside its documented bounds."""

    code = "invalid_option"


class VoiceLoadError(TTSError):
    """A voice's ONNX model or JSON config is missing or unreadable."""

    code = "voice_load_error"


class DeviceUnavailable(TTSError):
    """CUDA was requested explicitly but is not usable on this host."""

    code = "device_unavailable"


class SynthesisError(TTSError):
    """Inference or encoding failed for a reason other than bad input."""

    code = "synthesis_error"
