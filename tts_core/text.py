"""Text front end: normalise user text and cut it into sentence-sized utterances.

Phonemisation (espeak-ng) is in ``phonemes.py``; this module only deals with characters.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from tts_core.errors import EmptyText, TextTooLong

_ABBREVIATIONS: Final = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "approx"}
)
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
    ``tts_core.segments``)."""
    sentences: list[str] = []
    for paragraph in text.split("\n"):
        sentences.extend(_merge_abbreviations(_SENTENCE_END.split(paragraph)))
    return [stripped for sentence in sentences if (stripped := sentence.strip())]


def _merge_abbreviations(parts: list[str]) -> list[str]:
    """Re-join false splits: after an abbreviation ("Dr.", "e.g.") or before a lowercase word
    ('"Fine!" she said')."""
    merged: list[str] = []
    for part in parts:
        if merged and (_ends_with_abbreviation(merged[-1]) or part[:1].islower()):
            merged[-1] = f"{merged[-1]} {part}"
        else:
            merged.append(part)
    return merged


def _ends_with_abbreviation(piece: str) -> bool:
    words = piece.rstrip().split()
    return bool(words) and words[-1].rstrip(".").lower() in _ABBREVIATIONS and words[-1].endswith(".")


def cut_long(sentence: str, limit: int) -> list[str]:
    """Cut at clause punctuation where possible, else at word boundaries, else hard."""
    if len(sentence) <= limit:
        return [sentence]
    pieces: list[str] = []
    for clause in _pack(_CLAUSE_END.split(sentence), limit):
        pieces.extend(_pack(clause.split(" "), limit) if len(clause) > limit else [clause])
    return [chunk for piece in pieces for chunk in _hard_cut(piece, limit)]


def _pack(parts: list[str], limit: int) -> list[str]:
    """Greedily join consecutive parts with spaces while the result stays within ``limit``."""
    packed: list[str] = []
    for part in parts:
        if packed and len(packed[-1]) + 1 + len(part) <= limit:
            packed[-1] = f"{packed[-1]} {part}"
        else:
            packed.append(part)
    return packed


def _hard_cut(piece: str, limit: int) -> list[str]:
    return [piece[i : i + limit] for i in range(0, len(piece), limit)] if len(piece) > limit else [piece]
