"""Text front end: normalise user text and cut it into sentence-sized utterances.

Phonemisation (espeak-ng) is in ``phonemes.py``; this module only deals with characters.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final

from tts_core.base.errors import EmptyText, TextTooLong

_ABBREVIATIONS: Final = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "approx"}
)
ABBREVIATION_CONTEXT: Final = 16
"""Longest word still read as an abbreviation ("approx." and a few more periods): whether a sentence
ends depends on at most this many characters before it, so a stream can be cut from a bounded window
of its text (``api.wyoming.sentences``) and nothing is looked at twice."""
_SENTENCE_END = re.compile(r"(?:(?<=[.!?…。！？])|(?<=[.!?…。！？][\"'”’)\]]))\s+")
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_WHITESPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """NFC-normalise, drop control and format characters, collapse whitespace runs to one space.

    Paragraph breaks (blank lines) survive as a single newline so they still end sentences.
    """
    text = unicodedata.normalize("NFC", text)
    kept = "".join(ch if ch in "\n\t " or not _is_control(ch) else " " for ch in text)
    paragraphs = (_WHITESPACE.sub(" ", p).strip() for p in _PARAGRAPH_BREAK.split(kept))
    return "\n".join(p for p in paragraphs if p)


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in {"Cc", "Cf", "Cs", "Co", "Cn"}


def has_speech(text: str) -> bool:
    """Whether the text holds at least one letter or digit, i.e. something to say."""
    return any(ch.isalnum() for ch in text)


def check_text(text: str, max_chars: int) -> None:
    """Refuse text over ``max_chars`` (as submitted) or with nothing speakable once normalised."""
    if len(text) > max_chars:
        raise TextTooLong(len(text), max_chars)
    if not has_speech(normalize_text(text)):
        raise EmptyText("text is empty or has nothing to speak (no letters or digits)")


def split_sentences(text: str) -> list[str]:
    """Split normalised text into sentences (how long they may be is decided in phoneme ids, by
    ``tts_core.frontend.segments``)."""
    sentences: list[str] = []
    for paragraph in text.split("\n"):
        sentences.extend(_merge_abbreviations(_SENTENCE_END.split(paragraph)))
    return [stripped for sentence in sentences if (stripped := sentence.strip())]


def _merge_abbreviations(parts: list[str]) -> list[str]:
    """Re-join false splits: after an abbreviation ("Dr.", "e.g.") or before a lowercase word
    ('"Fine!" she said'). Each sentence is gathered as a list and joined once, each part looked at
    once: growing a string part by part was quadratic on "a. a. a." and "Dr. Dr. Dr."."""
    merged: list[str] = []
    sentence: list[str] = []
    after_abbreviation = False
    for part in parts:
        if sentence and not (after_abbreviation or part[:1].islower()):
            merged.append(" ".join(sentence))
            sentence, after_abbreviation = [], False
        sentence.append(part)
        words = part.rsplit(maxsplit=1)
        if words:  # an empty last part leaves the sentence ending where it did
            after_abbreviation = _is_abbreviation(words[-1])
    if sentence:
        merged.append(" ".join(sentence))
    return merged


def _is_abbreviation(word: str) -> bool:
    return len(word) <= ABBREVIATION_CONTEXT and word.endswith(".") and word.rstrip(".").lower() in _ABBREVIATIONS


def cut_long(sentence: str, limit: int) -> list[str]:
    """Cut at clause punctuation where possible, else at word boundaries, else hard."""
    if len(sentence) <= limit:
        return [sentence]
    pieces: list[str] = []
    for clause in _pack(_CLAUSE_END.split(sentence), limit):
        pieces.extend(_pack(clause.split(" "), limit) if len(clause) > limit else [clause])
    return [chunk for piece in pieces for chunk in _hard_cut(piece, limit)]


def _pack(parts: list[str], limit: int) -> list[str]:
    """Greedily join consecutive parts with spaces while the result stays within ``limit`` (each
    piece gathered as a list and joined once)."""
    packed: list[str] = []
    piece: list[str] = []
    length = 0
    for part in parts:
        if piece and length + 1 + len(part) <= limit:
            piece.append(part)
            length += 1 + len(part)
            continue
        if piece:
            packed.append(" ".join(piece))
        piece, length = [part], len(part)
    if piece:
        packed.append(" ".join(piece))
    return packed


def _hard_cut(piece: str, limit: int) -> list[str]:
    return [piece[i : i + limit] for i in range(0, len(piece), limit)] if len(piece) > limit else [piece]


def split_long_tokens(text: str, limit: int) -> str:
    """``text`` with every run of more than ``limit`` characters without a space cut into pieces of
    ``limit`` by spaces: what reaches a native phonemiser never holds a longer word."""
    return _long_token(limit).sub(lambda found: " ".join(_hard_cut(found.group(0), limit)), text)


def bounded_pieces(text: str, limit: int, breaks: str = " ") -> list[str]:
    """``text`` in consecutive pieces of at most ``limit`` characters that join back into it, each
    cut after the last of ``breaks`` within the limit where there is one, else hard. For front ends
    whose cost or safety depends on the length of one call (espeak-ng, OpenJTalk)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > limit:
        window = text[start : start + limit]
        cut = max(window.rfind(ch) for ch in breaks) + 1
        end = start + (cut if cut > 0 else limit)
        pieces.append(text[start:end])
        start = end
    if start < len(text):
        pieces.append(text[start:])
    return pieces


@functools.cache
def _long_token(limit: int) -> re.Pattern[str]:
    return re.compile(rf"(?<!\S)\S{{{limit + 1},}}")  # tried where a run starts, not in every run again
