"""Lexicons written as W3C PLS 1.0 (``tts_core.lexicon.pls_writer``): what ``parse_pls`` reads back
is the same lexicon, whatever its entries hold. Pure: no services."""

from __future__ import annotations

import xml.dom.minidom

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import Lexicon, LexiconEntry, marked_reading
from tts_core.lexicon.lexicon_documents import parse_json_lexicon, parse_pls
from tts_core.lexicon.pls_writer import to_pls

HOSTILE = parse_json_lexicon(
    {
        "language": "en-US",
        "entries": [
            {"graphemes": ["AT&T"], "alias": "A T and T"},
            {"graphemes": ["<b>", "a < b > c"], "alias": "less than & ]]> greater"},
            {"graphemes": ['say "hi"', "it's"], "alias": "quote \" and ' apostrophe"},
            {"graphemes": ["\U0001d518\U0001d52b\U0001d526", "🙂"], "alias": "smile 😀", "case_sensitive": True},
            {"graphemes": ["שלום", "مرحبا"], "alias": "\u202eshalom\u202c \u200fmarhaba"},
            {"graphemes": ["tomato"], "phoneme": "təˈmɑːtoʊ", "alphabet": "ipa"},
            {"graphemes": ["ACE"], "alias": "ace", "case_sensitive": True},
            {"graphemes": ["&amp;", "&#x41;"], "alias": "&lt; written out"},
        ],
    }
)
JAPANESE = parse_json_lexicon(
    {
        "language": "ja",
        "entries": [
            {"graphemes": ["東京"], "reading": "トーキョー", "accent": 0},
            {"graphemes": ["客"], "reading": "キャク", "accent": 1},
            {"graphemes": ["夏目"], "reading": "ナツメ", "accent": 3, "case_sensitive": True},
            {"graphemes": ["今日"], "reading": "コンニチ"},
            {"graphemes": ["GNU"], "alias": "グヌー"},
        ],
    }
)


@pytest.mark.parametrize("lexicon", [HOSTILE, JAPANESE, Lexicon("en-GB", ())], ids=["hostile", "ja", "empty"])
def test_a_written_lexicon_reads_back_the_same(lexicon: Lexicon) -> None:
    document = to_pls(lexicon)
    assert parse_pls(document) == lexicon
    xml.dom.minidom.parseString(document)  # well-formed for any XML reader, not only ttsq's


def test_a_reading_carries_its_accent_as_the_mark() -> None:
    document = to_pls(JAPANESE).decode()
    assert '<phoneme alphabet="x-katakana">\'トーキョー</phoneme>' in document  # 0: flat, the mark first
    assert '<phoneme alphabet="x-katakana">キャ\'ク</phoneme>' in document  # after the mora and its small kana
    assert '<phoneme alphabet="x-katakana">ナツメ\'</phoneme>' in document
    assert '<phoneme alphabet="x-katakana">コンニチ</phoneme>' in document  # no accent: the dictionary's
    assert '<lexeme role="ttsq:case-sensitive">' in document
    marked = [marked_reading("キャク", accent) for accent in (None, 0, 1, 2)]
    assert marked == ["キャク", "'キャク", "キャ'ク", "キャク'"]


def test_a_case_rule_is_declared_only_where_an_entry_needs_it() -> None:
    plain = to_pls(Lexicon("en-US", (LexiconEntry(("Nguyen",), alias="win"),))).decode()
    assert "ttsq" not in plain
    assert 'xml:lang="en-US"' in plain


TEXT = st.text(
    st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\ufffe\uffff"), min_size=1, max_size=30
).filter(str.strip)


@settings(max_examples=200, deadline=None)
@given(graphemes=st.lists(TEXT, min_size=1, max_size=3), alias=TEXT, case_sensitive=st.booleans())
def test_any_alias_entry_that_is_accepted_reads_back_the_same(
    graphemes: list[str], alias: str, case_sensitive: bool
) -> None:
    entry = {"graphemes": graphemes, "alias": alias, "case_sensitive": case_sensitive}
    try:
        lexicon = parse_json_lexicon({"language": "en", "entries": [entry]})
    except InvalidLexicon:
        return
    assert parse_pls(to_pls(lexicon)) == lexicon
