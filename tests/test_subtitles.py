"""Subtitles from timing marks, read back as players read them (webvtt-py, srt): every word shown once
and in order, lines that fit a screen, cues in time with the marks and never overlapping."""

from __future__ import annotations

import html
import io
import json
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest
import srt  # type: ignore[import-untyped]  # srt ships no type information
import webvtt

from tts_core.marks.speech_marks import Mark, check_marks, marks_from_json, marks_to_json
from tts_core.marks.subtitles import (
    JA_MAX_LINE_WIDTH,
    MAX_LINE_CHARS,
    PAUSE_MS,
    Cue,
    build_cues,
    full_width,
    to_srt,
    to_webvtt,
)
from tts_core.text.sentences import split_sentences

PARAGRAPHS = (Path(__file__).parents[1] / "bench" / "corpus" / "paragraphs.txt").read_text().split("\n\n")
DICKENS = PARAGRAPHS[1].strip()  # A Tale of Two Cities: one sentence of 613 characters, clause after clause
HOLMES = PARAGRAPHS[2].strip()  # A Scandal in Bohemia: sentences short and long, "--" between words
MELVILLE = PARAGRAPHS[3].strip()  # Moby-Dick: "Call me Ishmael.", semicolons
CLAUSE_ENDS = (",", ";", ":", "--", ".", "!", "?")


@dataclass(frozen=True)
class Shown:
    """A cue as a player reads it back: times in milliseconds and the text lines, unescaped."""

    start_ms: int
    end_ms: int
    lines: list[str]


def narrate(text: str) -> tuple[list[Mark], int]:
    """Plausible marks for ``text`` read aloud, Polly-style (words without their punctuation): about
    15 characters a second, 200 ms after a clause, 400 ms between sentences."""
    marks: list[Mark] = []
    now, cursor = 0, 0
    for sentence in split_sentences(text):
        offset = text.index(sentence, cursor)
        cursor = offset + len(sentence)
        words = []
        for word in re.finditer(r"[\w']+", sentence):
            length_ms = 60 + 55 * len(word.group())
            words.append(Mark("word", now, now + length_ms, offset + word.start(), offset + word.end(), word.group()))
            now += length_ms + (200 if re.match(r"[\"']?([,;:]|--)", sentence[word.end() :]) else 0)
        marks.append(Mark("sentence", words[0].start_ms, words[-1].end_ms, offset, cursor, sentence))
        marks.extend(words)
        now += 400
    return marks, now


def sentences_only(marks: list[Mark]) -> list[Mark]:
    return [m for m in marks if m.type == "sentence"]


def read_webvtt(document: str) -> list[Shown]:
    captions = webvtt.from_buffer(io.StringIO(document)).captions
    return [
        Shown(c.start_time.in_milliseconds(), c.end_time.in_milliseconds(), [html.unescape(x) for x in c.lines])
        for c in captions
    ]


def read_srt(document: str) -> list[Shown]:
    subtitles = list(srt.parse(document))
    assert [s.index for s in subtitles] == list(range(1, len(subtitles) + 1))
    return [Shown(ms(s.start), ms(s.end), s.content.split("\n")) for s in subtitles]


def ms(delta: timedelta) -> int:
    return round(delta.total_seconds() * 1000)


def assert_good_subtitles(shown: list[Shown], marks: list[Mark]) -> None:
    """What a viewer needs: every word once and in order, short lines, cues in order and in time."""
    sentences = sentences_only(marks)
    words_in = [word for s in sentences for word in s.value.split()]
    assert [word for cue in shown for line in cue.lines for word in line.split()] == words_in
    assert all(1 <= len(cue.lines) <= 2 for cue in shown)
    for line in (line for cue in shown for line in cue.lines):
        assert line == line.strip()
        assert "  " not in line
        assert len(line) <= MAX_LINE_CHARS or " " not in line, line
    assert all(cue.start_ms < cue.end_ms for cue in shown)
    assert all(before.end_ms <= after.start_ms for before, after in pairwise(shown))
    assert shown[0].start_ms == sentences[0].start_ms
    assert shown[-1].end_ms == sentences[-1].end_ms


@pytest.mark.parametrize("text", [DICKENS, HOLMES, MELVILLE], ids=["dickens", "holmes", "melville"])
@pytest.mark.parametrize("with_words", [True, False], ids=["word-marks", "sentence-marks"])
def test_paragraph_subtitles_read_back(text: str, with_words: bool) -> None:
    marks, duration_ms = narrate(text)
    check_marks(marks, duration_ms)
    cues = build_cues(marks if with_words else sentences_only(marks))
    shown = read_webvtt(to_webvtt(cues))
    assert_good_subtitles(shown, marks)
    assert read_srt(to_srt(cues)) == shown


@pytest.mark.parametrize("with_words", [True, False], ids=["word-marks", "sentence-marks"])
def test_long_sentence_is_cut_at_clauses(with_words: bool) -> None:
    marks, _ = narrate(DICKENS)
    cues = build_cues(marks if with_words else sentences_only(marks))
    assert len(cues) >= 613 // (2 * MAX_LINE_CHARS)
    assert all(len(cue.lines) == 2 for cue in cues)  # long clauses fill the cues
    clause_cuts = [cue.lines[-1].endswith(CLAUSE_ENDS) for cue in cues[:-1]]
    assert sum(clause_cuts) >= 0.7 * len(clause_cuts), [cue.lines for cue in cues]
    assert cues[0].lines == ("It was the best of times, it was the", "worst of times, it was the age of wisdom,")


def test_cut_times_follow_word_marks() -> None:
    marks, _ = narrate(DICKENS)
    word_starts = {m.start_ms for m in marks if m.type == "word"}
    cues = build_cues(marks)
    assert all(cue.start_ms in word_starts for cue in cues)
    shown_first = [cue.lines[0].split()[0] for cue in cues]
    starting_words = {m.start_ms: m.value for m in marks if m.type == "word"}
    assert [starting_words[cue.start_ms] for cue in cues] == [w.strip(",;:-") for w in shown_first]


@pytest.mark.parametrize("pause_before", ["and", "past"])
def test_a_pause_in_the_word_marks_is_a_cut(pause_before: str) -> None:
    text = (
        "we walked down to the old harbour before dawn and the boats were "
        "already out past the lighthouse with their lamps still burning"
    )
    marks: list[Mark] = []
    now = 0
    for word in re.finditer(r"\S+", text):
        now += PAUSE_MS + 100 if word.group() == pause_before else 0
        length_ms = 60 + 55 * len(word.group())
        marks.append(Mark("word", now, now + length_ms, word.start(), word.end(), word.group()))
        now += length_ms
    sentence = Mark("sentence", 0, now, 0, len(text), text)
    cues = build_cues([sentence, *marks])
    assert len(cues) == 2
    assert cues[1].lines[0].startswith(pause_before)
    assert cues[1].start_ms == next(m.start_ms for m in marks if m.value == pause_before)
    assert not build_cues([sentence])[1].lines[0].startswith(pause_before)  # unpunctuated, it would be cut elsewhere


def test_cut_times_without_word_marks_follow_characters() -> None:
    first, second = "the first half of this sentence runs on and on,", "and the second half matches it, more or less."
    text = f"{first} {second}"
    cues = build_cues([Mark("sentence", 1_000, 11_000, 0, len(text), text)])
    assert [" ".join(cue.lines) for cue in cues] == [first, second]
    share = (len(first) + 1) / len(text)
    assert cues[0].end_ms == cues[1].start_ms == pytest.approx(1_000 + 10_000 * share, abs=1)
    assert (cues[0].start_ms, cues[1].end_ms) == (1_000, 11_000)


def test_one_word_sentences() -> None:
    long_word = "Pneumonoultramicroscopicsilicovolcanoconiosis"  # 45 characters: over a line, never cut
    text = f"Yes. {long_word}! No."
    marks = [
        Mark("sentence", 0, 300, 0, 4, "Yes."),
        Mark("sentence", 700, 3_900, 5, 6 + len(long_word), f"{long_word}!"),
        Mark("sentence", 4_200, 4_500, 7 + len(long_word), len(text), "No."),
    ]
    shown = read_webvtt(to_webvtt(build_cues(marks)))
    assert [(cue.start_ms, cue.end_ms, cue.lines) for cue in shown] == [
        (0, 300, ["Yes."]),
        (700, 3_900, [f"{long_word}!"]),
        (4_200, 4_500, ["No."]),
    ]
    assert_good_subtitles(shown, marks)


def test_markup_characters_are_escaped_in_webvtt_only() -> None:
    text = "Fish & chips <b>cheap</b> --> now, at Smith & Sons' <today> & every day."
    marks = [Mark("sentence", 250, 5_250, 0, len(text), text)]
    cues = build_cues(marks)
    document = to_webvtt(cues)
    body = document.split("\n\n", 1)[1]
    assert "&amp;" in body
    assert "&lt;b&gt;" in body
    assert "<" not in body
    assert ">" not in body.replace(" --> ", "")  # only the timing arrows
    shown = read_webvtt(document)
    assert_good_subtitles(shown, marks)
    assert read_srt(to_srt(cues)) == shown  # SRT has no escaping: the text goes as it is


def test_whitespace_is_normalised_and_blank_sentences_dropped() -> None:
    text = "  Line one\nand\tline   two.\n\n   \u00a0 \n Done. "
    first = "Line one\nand\tline   two."
    marks = [
        Mark("sentence", 0, 2_000, 2, 2 + len(first), first),
        Mark("sentence", 2_000, 2_500, 2 + len(first), text.index("Done."), text[2 + len(first) : text.index("Done.")]),
        Mark("sentence", 2_600, 3_000, text.index("Done."), text.index("Done.") + 5, "Done."),
    ]
    cues = build_cues(marks)
    assert cues == [Cue(0, 2_000, ("Line one and line two.",)), Cue(2_600, 3_000, ("Done.",))]
    assert to_webvtt(cues) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:02.000\nLine one and line two.\n\n00:00:02.600 --> 00:00:03.000\nDone.\n\n"
    )
    assert to_srt(cues) == (
        "1\n00:00:00,000 --> 00:00:02,000\nLine one and line two.\n\n2\n00:00:02,600 --> 00:00:03,000\nDone.\n\n"
    )


def test_hours_in_timestamps() -> None:
    cues = [Cue(3_725_004, 3_726_000, ("Later.",))]
    assert "01:02:05.004 --> 01:02:06.000" in to_webvtt(cues)
    assert "01:02:05,004 --> 01:02:06,000" in to_srt(cues)


def test_no_marks_is_an_empty_file() -> None:
    assert build_cues([]) == []
    assert to_webvtt([]) == "WEBVTT\n\n"
    assert to_srt([]) == ""


def test_sentence_too_short_for_its_cues_is_refused() -> None:
    marks, _ = narrate(DICKENS)
    sentence = replace(sentences_only(marks)[0], start_ms=0, end_ms=3)
    with pytest.raises(ValueError, match="3 ms is too short for"):
        build_cues([sentence])


def test_bad_cues_are_refused() -> None:
    with pytest.raises(ValueError, match="not a span"):
        Cue(500, 500, ("Empty time.",))
    with pytest.raises(ValueError, match="non-empty"):
        Cue(0, 500, ("  ",))
    with pytest.raises(ValueError, match="overlaps"):
        to_webvtt([Cue(0, 500, ("One.",)), Cue(400, 900, ("Two.",))])


def test_marks_json_round_trip() -> None:
    marks, duration_ms = narrate(MELVILLE)
    as_json = marks_to_json(marks)
    assert as_json[0] == {
        "type": "sentence",
        "start_ms": 0,
        "end_ms": marks[0].end_ms,
        "text_start": 0,
        "text_end": 16,
        "value": "Call me Ishmael.",
    }
    assert marks_from_json(json.loads(json.dumps(as_json))) == marks
    check_marks(marks_from_json(as_json), duration_ms)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"type": "syllable"}, "type must be one of sentence, word, phoneme, viseme, ssml"),
        ({"start_ms": "0"}, "start_ms must be an integer"),
        ({"text_end": True}, "text_end must be an integer"),
        ({"value": None}, "value must be a string"),
    ],
)
def test_marks_json_of_the_wrong_shape_is_refused(change: dict[str, object], error: str) -> None:
    item = {**marks_to_json([Mark("word", 0, 100, 0, 4, "Call")])[0], **change}
    with pytest.raises(ValueError, match=error):
        marks_from_json([item])


def test_check_marks_accepts_words_inside_sentences() -> None:
    marks, duration_ms = narrate(HOLMES)
    check_marks(marks, duration_ms)
    check_marks(marks, marks[-1].end_ms)  # ending exactly at the end of the audio is fine


def bad_marks() -> dict[str, tuple[list[Mark], str]]:
    """Marks that are each wrong in one way, and the words the error must use."""
    call = Mark("word", 0, 300, 0, 4, "Call")
    me = Mark("word", 300, 500, 5, 7, "me")
    return {
        "past the end": ([call, replace(me, end_ms=1_200)], "past the audio's end at 1000 ms"),
        "ends before it starts": ([replace(call, end_ms=0)], "not after it starts"),
        "negative start": ([replace(call, start_ms=-5)], "starts before the audio"),
        "overlap": ([call, replace(me, start_ms=250)], "overlaps word mark 'Call'"),
        "not monotonic": ([me, call], "not monotonic"),
        "text backwards": ([call, replace(me, text_start=2, text_end=4, value="ll")], "text offset 2 is inside"),
        "empty text": ([replace(call, text_end=0, value="")], "span no text"),
        "value not the slice": ([replace(call, value="Cal")], "value has 3 characters"),
    }


@pytest.mark.parametrize("case", list(bad_marks()))
def test_check_marks_names_the_problem(case: str) -> None:
    marks, error = bad_marks()[case]
    with pytest.raises(ValueError, match=re.escape(error)):
        check_marks(marks, 1_000)


def test_overlapping_sentences_are_refused_by_build_cues() -> None:
    marks, _ = narrate(HOLMES)
    first, second = sentences_only(marks)[:2]
    with pytest.raises(ValueError, match="overlaps"):
        build_cues([first, replace(second, start_ms=first.end_ms - 1)])


# Japanese: no spaces, lines cut at words and punctuation within a width in full-width characters.

JA_WORDS = [
    *["しかも", "あと", "で", "聞く", "と", "それ", "は", "書生", "という", "人間", "中", "で", "一番", "獰悪"],
    *["な", "種族", "であった", "そうだ", "。", "この", "書生", "という", "の", "は", "時々", "我々", "を"],
    *["捕え", "て", "煮", "て", "食う", "という", "話", "で", "ある", "。"],
]
"""A segmentation like the G2P's (punctuation apart)."""
JA_TEXT = "".join(JA_WORDS)


def japanese_marks(words: list[str], with_words: bool = True) -> list[Mark]:
    """One sentence mark per 。-ended run, word marks for the words (punctuation gives none), 100 ms
    a character and 200 ms after a sentence."""
    text = "".join(words)
    marks: list[Mark] = []
    sentence_words: list[Mark] = []
    now = at = sentence_start = 0
    for word in words:
        if word in "、。！？「」":
            if word == "。":
                value = text[sentence_start : at + 1]
                start = sentence_words[0].start_ms
                marks.append(Mark("sentence", start, now, sentence_start, at + 1, value))
                marks.extend(sentence_words if with_words else [])
                sentence_words, sentence_start = [], at + 1
                now += 200
            at += len(word)
            continue
        sentence_words.append(Mark("word", now, now + 100 * len(word), at, at + len(word), word))
        now += 100 * len(word)
        at += len(word)
    return marks


def test_full_width_counts_half_width_characters_as_half() -> None:
    assert full_width("吾輩は猫") == 4
    assert full_width("GitHub") == 3
    assert full_width("ＡＢ１２") == 4  # noqa: RUF001  (full-width Latin letters and digits)
    assert full_width("ｱｲｳ") == 1.5  # half-width katakana


@pytest.mark.parametrize("with_words", [True, False], ids=["word-marks", "sentence-marks"])
def test_japanese_lines_never_exceed_the_width(with_words: bool) -> None:
    marks = japanese_marks(JA_WORDS, with_words)
    cues = build_cues(marks)
    lines = [line for cue in cues for line in cue.lines]
    assert "".join(lines) == JA_TEXT  # nothing lost, nothing added, no spaces
    assert all(full_width(line) <= JA_MAX_LINE_WIDTH for line in lines), lines
    assert all(line[0] not in "、。」\uff09ー" for line in lines)  # no line starts with closing punctuation
    assert len(cues) >= 3  # each 30-odd-character sentence takes two cues or more
    assert all(1 <= len(cue.lines) <= 2 for cue in cues)
    assert all(before.end_ms <= after.start_ms for before, after in pairwise(cues))
    if with_words:  # lines start at words, and a cue starts when its first word does
        starts = {m.text_start: m.start_ms for m in marks if m.type == "word"}
        cursor = 0
        for cue in cues:
            assert cursor in starts, cue.lines
            if cursor:
                assert cue.start_ms == starts[cursor]
            for line in cue.lines:
                assert cursor in starts, line
                cursor += len(line)


def test_a_japanese_sentence_is_cut_after_its_comma() -> None:
    words = ["吾輩", "は", "ここ", "で", "始めて", "人間", "という", "もの", "を", "見た", "、"]
    words += ["しかも", "あと", "で", "聞く", "と", "怖かった", "。"]
    cues = build_cues(japanese_marks(words))
    assert cues[0].lines[-1].endswith("、")


def test_a_japanese_word_wider_than_a_line_is_cut_between_characters() -> None:
    long_word = "独立行政法人情報処理推進機構理事長"  # one word of 17 full-width characters
    cues = build_cues(japanese_marks([long_word, "です", "。"]))
    lines = [line for cue in cues for line in cue.lines]
    assert "".join(lines) == long_word + "です。"
    assert all(full_width(line) <= JA_MAX_LINE_WIDTH for line in lines)


def test_half_width_text_in_japanese_fills_a_line_twice_as_far() -> None:
    words = ["東京", "で", "abcdefghijklmnop", "を", "買った", "。"]  # 16 Latin letters count 8
    cues = build_cues(japanese_marks(words))
    assert [line for cue in cues for line in cue.lines] == [
        "東京でabcdefghijklmnop",
        "を買った。",
    ]  # 19 characters, 11 wide
