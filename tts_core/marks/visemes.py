"""IPA phonemes to AWS Polly's visemes: the mouth shape each phoneme is seen as, for lip-sync.

The viseme set is Polly's (``p t S T f k i r s u @ a e E o O sil``), so code written for Polly's
``viseme`` speech marks works on ttsq's. The table follows Polly's en-US phoneme/viseme table
(https://docs.aws.amazon.com/polly/latest/dg/ph-table-english-us.html) for the phonemes it lists,
with ``l`` → ``t`` as Polly's own speech marks give it ("little" → ``t i t t``), and extends it to
the other IPA symbols espeak-ng and the Japanese front end write, each to the nearest mouth shape.
It is data: docs/API.md prints it, and a test keeps the two the same.

Stress and length marks (``ˈ ˌ ː ˑ``) and combining diacritics belong to the phoneme they sit on
and do not change its viseme. Polly gives one viseme per phoneme, so consecutive phonemes of the
same viseme are not merged ("little" gives ``t`` twice in a row); ``sil`` marks a pause.
"""

from __future__ import annotations

import unicodedata
from typing import Final

SIL: Final = "sil"
"""The viseme of silence: a pause between words or sentences."""

VISEMES: Final = ("p", "t", "S", "T", "f", "k", "i", "r", "s", "u", "@", "a", "e", "E", "o", "O", SIL)
"""Polly's viseme set, in the order of its documentation."""

IPA_VISEMES: Final[dict[str, tuple[str, ...]]] = {
    "p": ("p", "b", "m"),
    "t": ("t", "d", "n", "l", "ɾ", "ɫ", "ɬ", "ʈ", "ɖ", "ɳ", "ɭ", "ɲ", "ʎ", "ɗ"),
    "S": ("tʃ", "dʒ", "ʃ", "ʒ", "ʧ", "ʤ", "ɕ", "ʑ", "ʨ", "ʥ", "ʂ", "ʐ"),
    "T": ("θ", "ð"),
    "f": ("f", "v", "ɸ", "β", "ɱ"),
    "k": ("k", "ɡ", "g", "ŋ", "h", "x", "ɣ", "q", "ɢ", "ʔ", "ɴ", "χ", "ʁ", "ç", "c", "ɟ", "ɦ"),
    "i": ("i", "ɪ", "j", "ʝ", "ɨ", "ᵻ"),
    "r": ("ɹ", "r", "ʀ", "ɻ", "ɽ"),
    "s": ("s", "z", "ts", "dz", "ʦ", "ʣ"),
    "u": ("u", "ʊ", "w", "ʍ", "ɯ", "ɥ", "y", "ʏ", "ɤ"),
    "@": ("ə", "ɚ", "ɐ", "ɘ", "ɵ"),
    "a": ("a", "æ", "ɑ", "aɪ", "aʊ", "ɶ", "ä"),
    "e": ("e", "eɪ"),
    "E": ("ɛ", "ɜ", "ɝ", "ʌ", "œ", "ɞ"),
    "o": ("o", "oʊ", "ø"),
    "O": ("ɔ", "ɔɪ", "ɒ"),
}
"""Each viseme with the IPA phonemes seen as it (modifiers stripped)."""

FALLBACK_VISEME: Final = "@"
"""A phoneme not in the table (a symbol some voice has and no rule names): a neutral, half-open mouth."""

JOINED_PHONEMES: Final = frozenset({"tʃ", "dʒ", "ts", "dz", "aɪ", "aʊ", "eɪ", "oʊ", "ɔɪ"})
"""Affricates and diphthongs a front end writes as two symbols (espeak-ng: ``t ʃ``, ``a ɪ``): one
phoneme, so one phoneme mark and one viseme, as in Polly's table."""

STRESS_MARKS: Final = frozenset("ˈˌ")
"""Written before the sound they stress: they join the phoneme after them."""
LENGTH_MARKS: Final = frozenset("ːˑ")
"""Written after the sound they lengthen: they join the phoneme before them."""

_VISEME_OF: Final = {phoneme: viseme for viseme, phonemes in IPA_VISEMES.items() for phoneme in phonemes}


def base_phoneme(symbol: str) -> str:
    """The phoneme without stress, length and combining marks (``ˈɑː`` → ``ɑ``, ``d͡ʒ`` → ``dʒ``)."""
    kept = (ch for ch in symbol if ch not in STRESS_MARKS and ch not in LENGTH_MARKS)
    return "".join(ch for ch in kept if not unicodedata.combining(ch))


def viseme_of(phoneme: str) -> str:
    """The viseme of an IPA phoneme (a phoneme mark's value): the table's, else that of the letter
    its base decomposes to (``ã`` → ``a``), else :data:`FALLBACK_VISEME`."""
    base = base_phoneme(phoneme)
    if base in _VISEME_OF:
        return _VISEME_OF[base]
    letters = unicodedata.normalize("NFD", base)
    first = letters[:1]
    return _VISEME_OF.get(first, FALLBACK_VISEME)
