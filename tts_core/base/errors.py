"""Errors raised by the synthesis library.

Exception tree::

    TTSError
    ├── InvalidInput            the request itself is wrong; retrying cannot help
    │   ├── EmptyText           nothing speakable after normalisation
    │   ├── TextTooLong         more characters than the configured limit
    │   ├── VoiceNotFound       no voice with that id
    │   ├── UnsupportedText     nothing in the text is in a script the voice reads
    │   ├── UnsupportedFormat   unknown output format
    │   ├── InvalidOption       a synthesis option outside its bounds
    │   ├── MarksUnsupported    timing marks asked for where they cannot be made
    │   ├── InvalidSsml         SSML malformed or outside the supported subset (says where)
    │   ├── PauseTooLong        breaks in a row add up to too much silence at one place
    │   ├── TooMuchSilence      a job's pauses together pass its allowance
    │   ├── InvalidLexicon      a pronunciation lexicon malformed, unsafe or unusable (says where)
    │   ├── InvalidKana         a reading in AquesTalk-like notation that cannot be parsed (says where)
    │   └── InvalidBook         a book file that cannot be read into chapters (names the file and why)
    ├── VoiceLoadError          a voice's model or config cannot be read
    ├── DeviceUnavailable       CUDA was required but cannot be used
    └── SynthesisError          inference or encoding failed

Callers translate these into their own terms (HTTP status codes live in ``api/`` only).
"""

from __future__ import annotations

from typing import Any, TypeVar

E = TypeVar("E", bound=BaseException)


def rebuilt(cls: type[E], args: tuple[Any, ...], attributes: dict[str, Any]) -> E:
    """An error made again from its message and attributes, without its ``__init__`` (whose
    parameters are not its ``args``): how the errors of this tree and ttsq's cross a process
    boundary (the API reads long texts in processes of its own, ``api.heavy_work``)."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(attributes)
    return error


class TTSError(Exception):
    """Base class for all tts_core errors; ``code`` is a stable machine-readable name, given with
    each class (``class EmptyText(InvalidInput, code="empty_text")``)."""

    code = "tts_error"

    def __init_subclass__(cls, code: str, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuilt, (type(self), self.args, self.__dict__)


class InvalidInput(TTSError, code="invalid_input"):
    """The request is wrong in a way that retrying cannot fix."""


class EmptyText(InvalidInput, code="empty_text"):
    """The text holds nothing speakable once normalised."""


class TextTooLong(InvalidInput, code="text_too_long"):
    """The text has more characters than the configured limit; ``written``: the text has that many,
    and ``length`` is what it may be spoken as (its lexicons' pronunciations in place of its words)."""

    def __init__(self, length: int, limit: int, written: int | None = None) -> None:
        if written is None:
            super().__init__(f"text has {length} characters; the limit is {limit}")
        else:
            super().__init__(
                f"text has {written} characters, spoken as up to {length} with its lexicons' pronunciations; "
                f"the limit is {limit}"
            )
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


class InvalidSsml(InvalidInput, code="invalid_ssml"):
    """The SSML is malformed or outside the supported subset; says where."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"invalid SSML at line {line}, column {column}: {message}")
        self.line = line
        self.column = column


class PauseTooLong(InvalidInput, code="pause_too_long"):
    """Breaks in a row add up to more silence at one place than the limit
    (``tts_core.text.pauses.MAX_PAUSE_AT_ONE_PLACE_S``)."""

    def __init__(self, seconds: float, place: int, limit_s: float) -> None:
        super().__init__(
            f"the breaks in a row before spoken piece {place} add up to {seconds:g} s of silence; "
            f"at most {limit_s:g} s may stand at one place"
        )
        self.seconds = seconds


class TooMuchSilence(InvalidInput, code="too_much_silence"):
    """The job's pauses together pass its allowance (``TTSQ_SILENCE_ALLOWANCE_S`` plus
    ``TTSQ_SILENCE_RATIO`` times its speech)."""

    def __init__(self, silence_s: float, allowed_s: float) -> None:
        super().__init__(
            f"the text asks for {silence_s:.0f} s of pauses (sentence and paragraph pauses and breaks); "
            f"a job may have at most {allowed_s:.0f} s (TTSQ_SILENCE_ALLOWANCE_S plus TTSQ_SILENCE_RATIO "
            "times its speech)"
        )
        self.silence_s = silence_s
        self.allowed_s = allowed_s


class InvalidLexicon(InvalidInput, code="invalid_lexicon"):
    """A pronunciation lexicon (W3C PLS or JSON) is malformed, unsafe (a DTD, entities), over its
    limits, or holds an entry its voices cannot say; the message names the line and column or the
    entry."""


class InvalidKana(InvalidInput, code="invalid_kana"):
    """A reading in VOICEVOX's AquesTalk-like notation (``コンニチワ'、セ'カイ``) that cannot be
    parsed; ``position`` is the 1-based character where the problem lies."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"invalid kana at character {position}: {message}")
        self.position = position


class InvalidBook(InvalidInput, code="invalid_book"):
    """A book (a ``.txt``, ``.md`` or ``.epub`` file, or a folder of chapter files) that cannot be
    read into chapters: missing or unreadable, not UTF-8, an unknown format, a broken or oversized
    EPUB, or nothing to speak. The message starts with the file's name and says what is wrong; the
    same words reach ``ttsq narrate``'s operator and an API client."""


class VoiceLoadError(TTSError, code="voice_load_error"):
    """A voice's ONNX model or JSON config is missing or unreadable."""


class DeviceUnavailable(TTSError, code="device_unavailable"):
    """CUDA was requested explicitly but is not usable on this host."""


class SynthesisError(TTSError, code="synthesis_error"):
    """Inference or encoding failed for a reason other than bad input."""
