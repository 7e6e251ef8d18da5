"""What a Wyoming client is told about ttsq's voices (``describe`` → ``info``), and which voice a
``synthesize`` event's ``voice`` field selects."""

from __future__ import annotations

from typing import Final

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker
from wyoming.tts import SynthesizeVoice

from tts_core.base.errors import VoiceNotFound
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.voice_info import VoiceInfo

PROGRAM: Final = Attribution(name="ttsq", url="")
"""Who answers (ttsq has no public address to give)."""

ENGINE_ATTRIBUTIONS: Final = {
    "piper": Attribution(name="rhasspy", url="https://github.com/rhasspy/piper"),
    "kokoro": Attribution(name="hexgrad", url="https://huggingface.co/hexgrad/Kokoro-82M"),
}
"""Who made each engine's models; an engine missing here is credited to ttsq."""

VERSION: Final = "0.1.0"


def wyoming_info(catalog: VoiceCatalog) -> Info:
    """Every voice of the catalog as a Wyoming voice (its id as name, its language, its speakers if it
    has several), in one program that takes streamed text."""
    voices = [_voice(info) for info in catalog.all()]
    program = TtsProgram(
        name="ttsq",
        attribution=PROGRAM,
        installed=True,
        description="ttsq: a queue of text-to-speech workers",
        version=VERSION,
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program])


def _voice(info: VoiceInfo) -> TtsVoice:
    speakers = [TtsVoiceSpeaker(name=name) for name in info.speakers] if info.num_speakers > 1 else None
    return TtsVoice(
        name=info.id,
        attribution=ENGINE_ATTRIBUTIONS.get(info.engine.value, PROGRAM),
        installed=True,
        description=f"{info.id} ({info.engine.value}, {info.sample_rate} Hz)",
        version=None,
        languages=[info.language],
        speakers=speakers,
    )


def chosen_voice(catalog: VoiceCatalog, default: str, wanted: SynthesizeVoice | None) -> tuple[str, str | int | None]:
    """The voice id and speaker a request's ``voice`` selects: its name (checked when the job is
    drafted), else the first voice of its language (the default voice first), else the default."""
    if wanted is None or (wanted.name is None and wanted.language is None):
        return default, None
    if wanted.name is not None:
        return wanted.name, _speaker(catalog, wanted.name, wanted.speaker)
    assert wanted.language is not None
    language = _language_key(wanted.language)
    ids = [default, *catalog.ids()]
    for voice_id in ids:
        if voice_id in catalog.ids() and _language_key(catalog.get(voice_id).language).startswith(language):
            return voice_id, None
    raise VoiceNotFound(f"language {wanted.language}", catalog.ids())


def _language_key(language: str) -> str:
    """``en-US``, ``en_us`` and ``en_US`` as one; ``en`` a prefix of each."""
    return language.replace("-", "_").casefold()


def _speaker(catalog: VoiceCatalog, voice_id: str, speaker: str | None) -> str | int | None:
    """A speaker's name, or its index when the name is digits the voice does not use as a name (as
    wyoming-piper reads it)."""
    if speaker is None or voice_id not in catalog.ids():
        return speaker
    if speaker not in catalog.get(voice_id).speaker_id_map and speaker.isdigit():
        return int(speaker)
    return speaker
