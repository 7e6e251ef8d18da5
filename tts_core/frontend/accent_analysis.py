"""Japanese text to accent phrases as VOICEVOX ENGINE makes them: OpenJTalk's full-context labels
read phoneme by phoneme (``p3`` the phoneme, ``a2`` its mora in the phrase, ``f2`` the phrase's
accent, ``f3`` its interrogative flag, ``f5``/``i3`` which phrase and breath group it is in); a
pause (``pau``) between breath groups becomes the pause after the phrase before it.

OpenJTalk runs as the Kokoro front end runs it (``use_sudachi_kanji_yomi=False``, the same user
dictionary), so the readings here are the ones a Kokoro job speaks. pyopenjtalk-plus loads ONNX
Runtime when imported (its 何 reading model), so this module belongs where inference may run: the
API calls it in a child process (``api.voicevox.analysis``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Any, Final

import pyopenjtalk

from tts_core.frontend.kokoro_reading import dictionary_jtalk
from tts_core.frontend.mora_kana import PAUSE_VOWEL, KanaMora, KanaPhrase, mora_of
from tts_core.frontend.openjtalk_input import openjtalk_pieces
from tts_core.lexicon.kokoro_dictionary import load_user_dictionary
from tts_core.lexicon.lexicon import LexiconEntry
from tts_core.text.first_part import ends_clause

_LABEL: Final = re.compile(
    r"-(?P<p3>[^+]+)\+.*?/A:[^+]+\+(?P<a2>[^+]+)\+.*?/F:(?P<f1>[^_]+)_(?P<f2>[^#]+)#(?P<f3>[^_]+)_[^@]+@(?P<f5>[^_]+)_"
    r".*?/I:[^-]+-[^@]+@(?P<i3>[^+]+)\+"
)
"""The fields of a full-context label VOICEVOX ENGINE reads (HTS-2.3's Japanese ``lab_format.pdf``)."""
SILENT: Final = frozenset({"sil", PAUSE_VOWEL})
MAX_MORA_INDEX: Final = 49
"""OpenJTalk numbers moras in a phrase up to 49: past it a phrase's moras cannot be told apart, and
VOICEVOX ENGINE stops the phrase there (its issue #57); so does this."""
JTALKS_KEPT: Final = 16
"""OpenJTalk instances with a user dictionary kept per process (each maps the system dictionary once)."""


@dataclass(frozen=True)
class _Label:
    phoneme: str
    mora: str
    accent: str
    interrogative: bool
    phrase: tuple[str, str]
    """(breath group, phrase in it): the phrase a phoneme belongs to."""


def accent_phrases(text: str, entries: Sequence[LexiconEntry] = ()) -> list[KanaPhrase]:
    """The text's accent phrases; ``entries`` (a lexicon's readings) as a user dictionary. OpenJTalk
    reads it in pieces as the G2P does (``tts_core.frontend.openjtalk_input``); a piece that ends in clause
    punctuation ends in a pause, as it would inside one call."""
    jtalk = load_user_dictionary(entries, _jtalk)
    pieces = openjtalk_pieces(text)
    phrases: list[KanaPhrase] = []
    for number, piece in enumerate(pieces, start=1):
        features = pyopenjtalk.run_frontend(piece, use_sudachi_kanji_yomi=False, jtalk=jtalk)
        found = labels_to_phrases(pyopenjtalk.make_label(features, jtalk=jtalk) if features else [])
        if found and number < len(pieces) and ends_clause(piece):
            found[-1] = replace(found[-1], pause=True)
        phrases.extend(found)
    return phrases


def dictionaries_loaded() -> int:
    """How many user dictionaries this process has loaded: each OpenJTalk instance maps the system
    dictionary again (measured: the analysis child went from 190 to 392 MiB with 16), so a long-lived
    caller replaces the process after a bound (``api.voicevox.analysis``)."""
    return _jtalk.cache_info().misses


@lru_cache(maxsize=JTALKS_KEPT)
def _jtalk(dictionary: Path) -> Any:
    return dictionary_jtalk(dictionary)


def labels_to_phrases(labels: Sequence[str]) -> list[KanaPhrase]:
    """Phrases of full-context labels, grouped as VOICEVOX ENGINE groups them."""
    parsed = [_parse(label) for label in labels]
    groups = [list(group) for silent, group in groupby(parsed, lambda label: label is None) if not silent]
    phrases: list[KanaPhrase] = []
    for number, group in enumerate(groups, start=1):
        in_group = [list(p) for _, p in groupby(group, lambda label: label.phrase)]  # type: ignore[union-attr]
        for index, phrase_labels in enumerate(in_group, start=1):
            pause = index == len(in_group) and number < len(groups)
            phrases.append(_phrase(phrase_labels, pause))  # type: ignore[arg-type]
    return phrases


def _parse(label: str) -> _Label | None:
    """The label's fields; None for silence (``sil``, ``pau``)."""
    found = _LABEL.search(label)
    if found is None:
        raise ValueError(f"not a full-context label: {label!r}")
    if found["p3"] in SILENT or found["f1"] == "xx":
        return None
    return _Label(found["p3"], found["a2"], found["f2"], found["f3"] == "1", (found["i3"], found["f5"]))


def _phrase(labels: list[_Label], pause: bool) -> KanaPhrase:
    moras: list[KanaMora] = []
    for mora_index, group in groupby(labels, lambda label: label.mora):
        if int(mora_index) >= MAX_MORA_INDEX:
            break
        phonemes = [label.phoneme for label in group]
        consonant = phonemes[0] if len(phonemes) == 2 else None
        moras.append(mora_of(consonant, phonemes[-1]))
    accent = int(labels[0].accent)
    # OpenJTalk may give an accent past the phrase's end (VOICEVOX ENGINE's issue #55) or 0: VOICEVOX's
    # phrases always carry one, so both become the last mora (a flat phrase, as VOICEVOX writes it).
    accent = len(moras) if accent == 0 or accent > len(moras) else accent
    return KanaPhrase(tuple(moras), accent, pause, labels[-1].interrogative)
