"""``/audio_query`` and ``/accent_phrases``: text to VOICEVOX's AudioQuery, and an AudioQuery back to
the text a ttsq job speaks.

Japanese voices get OpenJTalk's accent phrases (``tts_core.frontend.accent_analysis``, in a child process:
``api.voicevox.analysis``) and ``kana`` in VOICEVOX's AquesTalk-like notation. ttsq's models time
and pitch speech themselves, so the moras' lengths and pitches here are nominal (fixed lengths, a
high/low pattern from the accent): they are shaped as VOICEVOX's so its clients can show and edit
them, but synthesis does not follow them. Other voices get no accent phrases and the text itself in
``kana``, as AivisSpeech does for plain text.
"""

from __future__ import annotations

from typing import Final

from api.voicevox.analysis import analyse
from api.voicevox.models import AccentPhrase, AudioQuery, Mora
from tts_core.frontend.mora_kana import PAUSE_DELIMITER, PAUSE_VOWEL, KanaMora, KanaPhrase, parse_kana, write_kana
from tts_core.lexicon.lexicon import Lexicon
from tts_core.text.scripts import base_language
from tts_core.voices.voice_info import VoiceInfo

NOMINAL_CONSONANT_S: Final = 0.06
"""Each consonant's length in a query (nominal: ttsq's model decides timing)."""
NOMINAL_VOWEL_S: Final = 0.11
"""Each vowel's length in a query (nominal)."""
NOMINAL_PAUSE_S: Final = 0.3
"""A pause mora's length in a query (nominal: ttsq's sentence and comma pauses decide)."""
NOMINAL_HIGH_PITCH: Final = 5.8
NOMINAL_LOW_PITCH: Final = 5.5
"""Pitches of high and low moras, on VOICEVOX's scale (log F0, about 5 to 6.5); 0 for devoiced
moras and pauses, as VOICEVOX gives them."""
DEFAULT_PHONEME_PAD_S: Final = 0.1
"""``prePhonemeLength`` and ``postPhonemeLength`` of a new query, VOICEVOX's defaults."""
LONG_VOWEL_MARK: Final = "ー"
SENTENCE_END: Final = "。"
INTERROGATIVE_END: Final = "？"
JAPANESE: Final = "ja"


def is_japanese(voice: VoiceInfo) -> bool:
    return base_language(voice.language) == JAPANESE


def audio_query(text: str, voice: VoiceInfo, kana: bool = False, lexicon: Lexicon | None = None) -> AudioQuery:
    """A new query for the text with VOICEVOX's default settings at the voice's rate. ``kana``: the
    text is a reading in the notation (:class:`tts_core.base.errors.InvalidKana` if malformed);
    ``lexicon``: the tenant's user dictionary (``api.lexicon_use.user_dictionary``)."""
    phrases = accent_phrases(text, voice, kana, lexicon)
    return AudioQuery(
        accent_phrases=phrases,
        speedScale=1.0,
        pitchScale=0.0,
        intonationScale=1.0,
        volumeScale=1.0,
        prePhonemeLength=DEFAULT_PHONEME_PAD_S,
        postPhonemeLength=DEFAULT_PHONEME_PAD_S,
        pauseLength=None,
        pauseLengthScale=1.0,
        outputSamplingRate=voice.sample_rate,
        outputStereo=False,
        kana=write_kana([_kana_phrase(p) for p in phrases]) if is_japanese(voice) else text,
    )


def accent_phrases(
    text: str, voice: VoiceInfo, is_kana: bool = False, lexicon: Lexicon | None = None
) -> list[AccentPhrase]:
    """The text's accent phrases for a Japanese voice (``is_kana``: parsed from the notation,
    otherwise OpenJTalk's analysis); none for other voices."""
    if not is_japanese(voice):
        return []
    entries = lexicon.entries if lexicon is not None else ()
    found = parse_kana(text) if is_kana else analyse(text, entries)
    return [_accent_phrase(p) for p in found]


def spoken_text(query: AudioQuery, voice: VoiceInfo) -> str:
    """What a ttsq job speaks for the query: for Japanese voices the moras' katakana as the query
    holds them (so an edited mora is heard), ``、`` at each pause, ``？`` after an interrogative
    phrase, phrases apart by a space (the G2P's word breaks), ``。`` at the end; otherwise ``kana``."""
    if not is_japanese(voice):
        return query.kana or ""
    parts: list[str] = []
    for phrase in query.accent_phrases:
        words = _katakana(phrase.moras)
        if phrase.is_interrogative:
            words += INTERROGATIVE_END
        if phrase.pause_mora is not None:
            words += PAUSE_DELIMITER
        parts.append(words)
    text = " ".join(parts).strip()
    if not text:
        return ""
    return text if text.endswith((INTERROGATIVE_END, PAUSE_DELIMITER, SENTENCE_END)) else text + SENTENCE_END


def _katakana(moras: list[Mora]) -> str:
    """The moras' text, a vowel that repeats the one before written ``ー`` (OpenJTalk writes a long
    vowel so, and the Kokoro G2P reads ``ー`` as length), except ``イ`` after an i (アタラシイ: the
    commoner case is two vowels)."""
    text = ""
    before: Mora | None = None
    for mora in moras:
        vowel = mora.vowel.lower()
        repeats = before is not None and before.vowel.lower() == vowel and vowel in "aueo"
        text += LONG_VOWEL_MARK if mora.consonant is None and repeats and len(mora.text) == 1 else mora.text
        before = mora
    return text


def _accent_phrase(phrase: KanaPhrase) -> AccentPhrase:
    moras = [_mora(mora, _high(index, phrase.accent)) for index, mora in enumerate(phrase.moras, start=1)]
    pause = Mora(text=PAUSE_DELIMITER, vowel=PAUSE_VOWEL, vowel_length=NOMINAL_PAUSE_S, pitch=0.0)
    return AccentPhrase(
        moras=moras,
        accent=phrase.accent,
        pause_mora=pause if phrase.pause else None,
        is_interrogative=phrase.interrogative,
    )


def _high(index: int, accent: int) -> bool:
    """Tokyo accent: the first mora low unless it is the nucleus, high up to the nucleus, low after."""
    return index <= accent and (index > 1 or accent == 1)


def _mora(mora: KanaMora, high: bool) -> Mora:
    pitch = 0.0 if mora.devoiced or mora.vowel == PAUSE_VOWEL else (NOMINAL_HIGH_PITCH if high else NOMINAL_LOW_PITCH)
    return Mora(
        text=mora.text,
        consonant=mora.consonant,
        consonant_length=NOMINAL_CONSONANT_S if mora.consonant is not None else None,
        vowel=mora.vowel,
        vowel_length=NOMINAL_VOWEL_S,
        pitch=pitch,
    )


def _kana_phrase(phrase: AccentPhrase) -> KanaPhrase:
    moras = tuple(KanaMora(m.text, m.consonant, m.vowel) for m in phrase.moras)
    return KanaPhrase(moras, phrase.accent, phrase.pause_mora is not None, phrase.is_interrogative)
