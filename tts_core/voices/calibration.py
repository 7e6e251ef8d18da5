"""A voice's leveling for audio that is sent before the whole of it exists (the speech endpoint).

A streamed job cannot be measured whole before its first bytes leave, so each voice is measured
once, on a few sentences of its language, and that gain (found with the limiter, as for a whole
job) is given to every streamed segment: each voice then lands near the target, not on it.
"""

from __future__ import annotations

from typing import Final

from tts_core.base.config import SynthesisConfig
from tts_core.mastering.level_meter import measure
from tts_core.mastering.leveling import Leveling, leveling_for
from tts_core.mastering.loudness import LoudnessTarget
from tts_core.voices.engines import SpeechModel

CALIBRATION_TEXTS: Final = {
    "en": (
        "The morning train was late again, so Peter walked to the harbour. Boats bobbed by the pier, "
        "and a fisherman asked him whether the weather would hold. Nobody could say! By noon the sky had "
        "cleared, and the quiet streets filled with people buying bread, fruit and fresh coffee."
    ),
    "ja": (
        "朝の電車はまた遅れていたので、ペーターは港まで歩きました。桟橋のそばで小舟が揺れ、漁師が"
        "天気はもつだろうかと尋ねました。誰にも分かりません。昼には空が晴れ、静かな通りはパンや果物、"
        "いれたてのコーヒーを買う人でにぎわいました。"
    ),
}
"""About fifteen seconds of ordinary prose per language: questions, exclamations and plosives included."""


def calibration_text(language: str) -> str:
    """The calibration text of the voice's language (``en_US`` → ``en``); English where none is known."""
    return CALIBRATION_TEXTS.get(language.split("_")[0].split("-")[0].lower(), CALIBRATION_TEXTS["en"])


def calibrated_leveling(model: SpeechModel, language: str, target: LoudnessTarget) -> Leveling:
    """The leveling that lands the voice's calibration text on ``target``."""
    pcm = model.speak(calibration_text(language), SynthesisConfig())
    rate = model.sample_rate
    return leveling_for(target, measure(pcm, rate), lambda: [pcm], rate)
