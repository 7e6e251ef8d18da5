"""The Piper engine: VITS voices (ONNX) read through espeak-ng, several utterances a call, every
input id timed by the graph.

Its voices are the bundled one and the configured folder's (``catalog.bundled_voices``,
``catalog.folder_voices``), known from their JSON configs alone. The model (``tts_core.voices.voice``) and
espeak-ng (``tts_core.frontend.phonemes``) are imported only where a worker needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tts_core.base.config import VoiceConfig
from tts_core.base.device import Device, Spinning
from tts_core.base.errors import VoiceLoadError
from tts_core.base.timing import MODIFIER_SYMBOLS, SILENT_SYMBOLS, Weigh
from tts_core.lexicon.lexicon import IPA_SYLLABLE_MARKS
from tts_core.voices.catalog import bundled_voices, folder_voices
from tts_core.voices.engines import SpeechEngine, SpeechModel, register
from tts_core.voices.voice_info import EngineName, VoiceInfo

if TYPE_CHECKING:
    from tts_core.frontend.segments import FrontEnd

MIN_IDS_PER_NONZERO_DIGIT: Final = 5
"""Fewest model ids a Piper voice spends on a digit 1-9 (measured, espeak-ng en-us: a run of ones
6.4, of eights 8.3, "11" 8.1, random digits 18.6, "1,000,000,000,000" 28 per non-zero digit; zeros
inside a number may be silent, and letters can cost next to nothing: "I I I" is read as numerals)."""


@dataclass(frozen=True)
class PiperSource:
    """A Piper voice's files and what its JSON says."""

    model_path: Path
    config_path: Path
    config: VoiceConfig


class PiperEngine(SpeechEngine):
    """Piper's VITS voices: espeak-ng phonemes, padded batches, durations per input id."""

    name = "piper"
    times_words = True
    times_phonemes = True
    batches = True
    seconds_per_id = 0.027
    """Piper's ids put a pad between phonemes, so each is worth little (measured 0.024 to 0.026 s on
    prose, digits and letters)."""
    warm_up_text = "Warming up."

    def voices(self, voices_dir: Path | None) -> list[VoiceInfo]:
        paths = bundled_voices()
        if voices_dir is not None:
            paths.update(folder_voices(voices_dir))
        return [piper_voice(voice_id, model, config) for voice_id, (model, config) in paths.items()]

    def load(self, info: VoiceInfo, device: Device, intra_op_threads: int, spinning: Spinning) -> SpeechModel:
        from tts_core.voices.voice import Voice  # ONNX Runtime and onnx: workers only

        files = piper_source(info)
        return Voice.load(files.model_path, files.config_path, device, intra_op_threads, spinning)

    def front_end(self, info: VoiceInfo) -> FrontEnd:
        from tts_core.frontend.segments import PiperFrontEnd  # espeak-ng: workers only

        return PiperFrontEnd(piper_source(info).config)

    def unspeakable_phonemes(self, info: VoiceInfo, ipa: str) -> str | None:
        """Symbols outside the voice's phoneme map (spaces and syllable marks aside)."""
        known = piper_source(info).config.phoneme_id_map
        said = (symbol for symbol in ipa if not symbol.isspace() and symbol not in IPA_SYLLABLE_MARKS)
        missing = sorted({symbol for symbol in said if symbol not in known})
        if not missing:
            return None
        return f"voice {info.id} has no phoneme {', '.join(repr(m) for m in missing)}"

    def word_weight(self, info: VoiceInfo) -> Weigh:
        """The phonemes espeak-ng makes of the word, as the voice reads it."""
        return espeak_weight(piper_source(info).config.espeak_voice)

    def least_segments(self, text: str, segment_max_ids: int) -> int:
        """Each digit 1-9 costs at least :data:`MIN_IDS_PER_NONZERO_DIGIT` ids."""
        digits = sum(text.count(d) for d in "123456789")
        return digits * MIN_IDS_PER_NONZERO_DIGIT // segment_max_ids


PIPER: Final = register(PiperEngine())


def piper_voice(voice_id: str, model_path: Path, config_path: Path) -> VoiceInfo:
    """A Piper voice as the catalog knows it, from its JSON config."""
    config = VoiceConfig.from_file(config_path)
    return VoiceInfo(
        id=voice_id,
        engine=EngineName(PIPER.name),
        language=config.language,
        sample_rate=config.sample_rate,
        quality=config.quality,
        num_speakers=config.num_speakers,
        speaker_id_map=dict(config.speaker_id_map),
        source=PiperSource(model_path, config_path, config),
    )


def piper_source(info: VoiceInfo) -> PiperSource:
    """The voice's Piper files; a :class:`VoiceLoadError` for a voice of another engine."""
    if not isinstance(info.source, PiperSource):
        raise VoiceLoadError(f"voice {info.id} is a {info.engine.value} voice, not a Piper one")
    return info.source


@cache
def espeak_weight(espeak_voice: str) -> Weigh:
    """Phonemes espeak-ng makes of a word alone (one per espeak voice; each caches its words, as a
    book repeats them)."""
    from tts_core.frontend.phonemes import phonemize  # espeak-ng: workers only

    @lru_cache(maxsize=65536)
    def weigh(word: str) -> int:
        symbols = (p for sentence in phonemize(word, espeak_voice) for p in sentence)
        return sum(p not in SILENT_SYMBOLS and p not in MODIFIER_SYMBOLS for p in symbols) or 1

    return weigh
