"""Errors raised by the synthesis library.

Exception tree::

    TTSError
    ├── InvalidInput            the request itself is wrong; retrying cannot help
    │   ├── EmptyText           nothing speakable after normalisation
    │   ├── TextTooLong         more characters than the configured limit
    │   ├── VoiceNotFound       no voice with that id
    │   ├── UnsupportedText     nothing in the text is in a script the voice reads
    │   ├── UnsupportedFormat   unknown output format
    │   └── InvalidOption       a synthesis option outside its bounds
    ├── VoiceLoadError          a voice's model or config cannot be read
    ├── DeviceUnavailable       CUDA was required but cannot be used
    └── SynthesisError          inference or encoding failed

Callers translate these into their own terms (HTTP status codes live in ``api/`` only).
"""

from __future__ import annotations


class TTSError(Exception):
    """Base class for all tts_core errors; ``code`` is a stable machine-readable name, given with
    each class (``class EmptyText(InvalidInput, code="empty_text")``)."""

    code = "tts_error"

    def __init_subclass__(cls, code: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = code


class InvalidInput(TTSError, code="invalid_input"):
    """The request is wrong in a way that retrying cannot fix."""


class EmptyText(InvalidInput, code="empty_text"):
    """The text holds nothing speakable once normalised."""


class TextTooLong(InvalidInput, code="text_too_long"):
    """The text has more characters than the configured limit."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"text has {length} characters; the limit is {limit}")
        self.length = length
        self.limit = limit


class VoiceNotFound(InvalidInput, code="voice_not_found"):
    """No voice is known under the requested id."""

    def __init__(self, voice_id: str, available: list[str]) -> None:
        super().__init__(f"unknown voice {voice_id!r}; available voices: {', '.join(available)}")
        self.voice_id = voice_id
        self.available = available


class UnsupportedText(InvalidInput, code="unsupported_text"):
    """Every letter of the text is in a script the voice does not read (Japanese for an English
    voice, say); the message names the voice, what the text is written in and who could speak it."""

    def __init__(self, voice_id: str, language: str, found: list[str], alternatives: list[str]) -> None:
        could = f"voices that can: {', '.join(alternatives)}" if alternatives else "no installed voice can"
        written = ", ".join(found) or "another script"
        super().__init__(f"voice {voice_id} ({language}) cannot speak text written in {written}; {could}")
        self.voice_id = voice_id
        self.alternatives = alternatives


class UnsupportedFormat(InvalidInput, code="unsupported_format"):
    """The requested output format is not one the encoder writes."""


class InvalidOption(InvalidInput, code="invalid_option"):
    """A synthesis option lies outside its documented bounds."""


class MarksUnsupported(InvalidInput, code="marks_unsupported"):
    """Timing marks were asked for where ttsq cannot make them: for SSML (its offsets would point into
    markup), or word marks of a voice whose model does not time its input (Kokoro)."""


class VoiceLoadError(TTSError, code="voice_load_error"):
    """A voice's ONNX model or JSON config is missing or unreadable."""


class DeviceUnavailable(TTSError, code="device_unavailable"):
    """CUDA was requested explicitly but is not usable on this host."""


class SynthesisError(TTSError, code="synthesis_error"):
    """Inference or encoding failed for a reason other than bad input."""
