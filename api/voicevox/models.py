"""VOICEVOX ENGINE's request and response bodies, field for field as its OpenAPI document names them
(``AudioQuery``, ``AccentPhrase``, ``Mora``), so its clients' JSON round-trips unchanged."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Mora(BaseModel):
    """One mora: its text (katakana), consonant and vowel (phonemes) with their lengths in seconds, and its pitch."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    text: str
    consonant: str | None = None
    consonant_length: float | None = Field(None, ge=0)
    vowel: str
    vowel_length: float = Field(ge=0)
    pitch: float


class AccentPhrase(BaseModel):
    """Moras spoken as one accent phrase: ``accent`` is the mora (1-based) after which the pitch
    falls; ``pause_mora`` the pause after it (a comma), if any."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    moras: list[Mora]
    accent: int = Field(ge=0)
    pause_mora: Mora | None = None
    is_interrogative: bool = False


class AudioQuery(BaseModel):
    """What ``/synthesis`` speaks: the accent phrases and the whole utterance's settings."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    accent_phrases: list[AccentPhrase]
    # camelCase: VOICEVOX ENGINE's own field names.
    speedScale: float
    pitchScale: float
    intonationScale: float
    volumeScale: float
    prePhonemeLength: float
    postPhonemeLength: float
    pauseLength: float | None = None
    pauseLengthScale: float = 1.0
    outputSamplingRate: int
    outputStereo: bool
    kana: str | None = None
    """The reading in AquesTalk-like notation (VOICEVOX makes it; AivisSpeech puts plain text here for
    its non-Japanese input)."""
