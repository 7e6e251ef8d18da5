"""The text front end: normalisation and sentence splitting (pure code)."""

from __future__ import annotations

import pytest

from tts_core.base.errors import EmptyText, TextTooLong
from tts_core.text.sentences import check_text, cut_long, has_speech, normalize_text, split_sentences


def test_normalize_applies_nfc_and_collapses_whitespace() -> None:
    decomposed = "Cafe\u0301   au\tlait\n"
    assert normalize_text(decomposed) == "Café au lait"


def test_normalize_drops_control_and_format_characters() -> None:
    assert normalize_text("Hel\x00lo\u200b wor\x07ld") == "Hel lo wor ld"


def test_normalize_keeps_paragraph_breaks_as_sentence_ends() -> None:
    assert split_sentences(normalize_text("First paragraph\n\n  Second one")) == ["First paragraph", "Second one"]


def test_split_sentences_on_terminal_punctuation() -> None:
    text = 'Hello there. How are you? "Fine!" she said. The end…'
    assert split_sentences(text) == ["Hello there.", "How are you?", '"Fine!" she said.', "The end…"]


def test_split_keeps_abbreviations_inside_the_sentence() -> None:
    assert split_sentences("Dr. Smith met Mr. Jones, e.g. at noon. Then they left.") == [
        "Dr. Smith met Mr. Jones, e.g. at noon.",
        "Then they left.",
    ]


def test_a_long_sentence_stays_one_sentence() -> None:
    """Length is limited in phoneme ids, later (tests/test_segments.py), not in characters here."""
    text = ", ".join(["word " * 30] * 10).replace("  ", " ").strip() + "."
    assert split_sentences(text) == [text]


def test_long_sentence_is_cut_at_clauses_then_words() -> None:
    clause = "word " * 30
    text = ", ".join([clause.strip()] * 10) + "."
    pieces = cut_long(text, 400)
    assert len(pieces) > 1
    assert all(len(p) <= 400 for p in pieces)
    assert all(p.endswith((",", ".")) for p in pieces)
    assert " ".join(pieces).split() == text.split()


def test_unpunctuated_wall_of_text_is_cut_at_word_boundaries() -> None:
    text = " ".join(f"w{i}" for i in range(2000))
    pieces = cut_long(text, 400)
    assert all(len(p) <= 400 for p in pieces)
    assert " ".join(pieces) == text


def test_has_speech() -> None:
    assert has_speech("a")
    assert has_speech("42")
    assert not has_speech(" ... !? ")
    assert not has_speech("")


def test_check_text_counts_characters_as_submitted() -> None:
    check_text("abc", 3)
    with pytest.raises(TextTooLong, match="text has 4 characters; the limit is 3"):
        check_text("abcd", 3)
    with pytest.raises(EmptyText):
        check_text(" \u200b\n ", 100)
