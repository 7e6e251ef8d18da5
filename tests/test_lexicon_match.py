"""Finding graphemes and mapping spoken text back to written text: pure code, plain data."""

from __future__ import annotations

from tts_core.engines import engine_named
from tts_core.lexicon import Lexicon, LexiconEntry
from tts_core.lexicon_match import LexiconMatcher
from tts_core.pronunciation import Pronunciation
from tts_core.segments import iter_plain
from tts_core.spoken_text import Replacement, SpokenText, merged


def lexicon(*entries: LexiconEntry, language: str = "en-US") -> Lexicon:
    return Lexicon(language, entries)


def found(matcher: LexiconMatcher, text: str) -> list[tuple[str, str | None]]:
    return [(text[m.start : m.end], m.entry.alias or m.entry.phoneme) for m in matcher.find(text)]


def test_graphemes_match_whole_words_in_any_case_across_line_breaks() -> None:
    matcher = LexiconMatcher([lexicon(LexiconEntry(("Nguyen",), alias="win"), LexiconEntry(("New York",), alias="NY"))])
    text = "NGUYEN, nguyen's and Nguyenx or xNguyen; new\n  YORK."
    assert found(matcher, text) == [("NGUYEN", "win"), ("nguyen", "win"), ("new\n  YORK", "NY")]


def test_a_case_sensitive_entry_matches_only_as_written() -> None:
    matcher = LexiconMatcher([lexicon(LexiconEntry(("ACE",), alias="ace", case_sensitive=True))])
    assert found(matcher, "ace ACE Ace") == [("ACE", "ace")]


def test_the_longest_grapheme_of_a_lexicon_and_the_first_lexicon_win() -> None:
    first = lexicon(LexiconEntry(("New York",), alias="first"))
    second = lexicon(LexiconEntry(("New York City",), alias="longer"), LexiconEntry(("York",), alias="second"))
    assert found(LexiconMatcher([second]), "New York City") == [("New York City", "longer")]
    assert found(LexiconMatcher([first, second]), "New York City, York") == [("New York", "first"), ("York", "second")]


def test_graphemes_are_literal_text_not_patterns() -> None:
    matcher = LexiconMatcher([lexicon(LexiconEntry(("C++",), alias="C plus plus"), LexiconEntry(("a.*",), alias="x"))])
    assert found(matcher, "C++ and abc and a.*") == [("C++", "C plus plus"), ("a.*", "x")]


def test_japanese_graphemes_match_inside_words() -> None:
    pronunciation = Pronunciation(
        [lexicon(LexiconEntry(("ttsq",), alias="ティーティーエスキュー"), language="ja")], "ja_JP"
    )
    assert pronunciation.spoken("これはttsqです").text == "これはティーティーエスキューです"


def test_a_lexicon_of_another_language_does_not_apply() -> None:
    pronunciation = Pronunciation([lexicon(LexiconEntry(("Nguyen",), alias="win"), language="ja")], "en_US")
    assert not pronunciation.spoken("Nguyen").changed
    assert not pronunciation.changes_anything


def test_spoken_offsets_map_back_to_the_written_words() -> None:
    written = "Mr Nguyen paid $5 today."
    spoken = SpokenText(written, (Replacement(3, 9, "win"), Replacement(15, 17, "five dollars")))
    assert spoken.text == "Mr win paid five dollars today."
    five = spoken.text.index("five")
    dollars_end = spoken.text.index(" today")
    assert written[spoken.written_start(five) : spoken.written_end(dollars_end)] == "$5"
    today = spoken.text.index("today")
    assert written[spoken.written_start(today) : spoken.written_end(today + 5)] == "today"
    assert written[spoken.written_start(0) : spoken.written_end(2)] == "Mr"


def test_ipa_replacements_split_the_text_into_parts() -> None:
    spoken = SpokenText("a tomato, please", (Replacement(2, 8, "təˈmɑːtoʊ", ipa=True),))
    assert [(p.text, p.ipa) for p in spoken.parts] == [("a ", False), ("təˈmɑːtoʊ", True), (", please", False)]


def test_lexicon_replacements_win_over_normalisation_where_they_overlap() -> None:
    lexical = [Replacement(0, 2, "three em")]
    normal = [Replacement(0, 1, "three"), Replacement(5, 7, "five dollars")]
    assert merged(lexical, normal) == [Replacement(0, 2, "three em"), Replacement(5, 7, "five dollars")]


def test_a_long_alias_of_one_character_is_planned_within_the_id_budget() -> None:
    """A lexicon may say one written character at length; no utterance passes the budget for it
    (Kokoro's model refuses more than 512 ids)."""
    engine = engine_named("kokoro")
    voice = engine.voices(None)[0]
    alias = "東京特許許可局" * 28
    front_end = engine.spoken_front_end(
        voice, Pronunciation([lexicon(LexiconEntry(("猫",), alias=alias), language="ja")], voice.language)
    )
    sizes = [len(u.ids) for u in iter_plain("猫。", front_end, 400, 0.5)]
    assert sum(sizes) > 600  # all of it said
    assert max(sizes) <= 400
