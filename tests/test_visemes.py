"""The IPA-to-viseme table, phonemes read from per-id durations, phoneme and viseme marks built from
timings, their checks, and the JSON they are stored and served as: plain data, no model."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from tts_core.base.config import BOS, EOS, PAD
from tts_core.base.plan import MarkPoint, PlannedUtterance
from tts_core.base.timing import SegmentTiming, UtteranceTiming, WordIds, phones_to_json, spoken_words
from tts_core.marks.mark_builder import SIL_MIN_MS, MarkBuilder
from tts_core.marks.phoneme_timing import spoken_phonemes
from tts_core.marks.speech_marks import Mark, check_marks, marks_from_json, marks_to_json
from tts_core.marks.visemes import IPA_VISEMES, SIL, VISEMES, viseme_of
from tts_core.text.speech_markup import MarkElement, Speech, parse_ssml

API_DOC = Path(__file__).resolve().parents[1] / "docs" / "API.md"
SYMBOLS = [BOS, PAD, EOS, " ", ",", ".", "ˈ", "ˌ", "ː", *"mɛɹihædɐlɪɾəbʌptʃaɪdʒoʊɑ"]
ID_MAP = {symbol: [n] for n, symbol in enumerate(dict.fromkeys(SYMBOLS))}
WORD_IDS = WordIds.of(ID_MAP)
HOP = 256


def ids_of(symbols: list[str]) -> list[int]:
    """As Piper's front end makes them: BOS, each symbol followed by a pad, EOS."""
    ids = [ID_MAP[BOS][0], ID_MAP[PAD][0]]
    for symbol in symbols:
        ids += [ID_MAP[symbol][0], ID_MAP[PAD][0]]
    return [*ids, ID_MAP[EOS][0]]


@pytest.mark.parametrize(
    ("phoneme", "viseme"),
    [
        # Polly's en-US table, row by row (https://docs.aws.amazon.com/polly/latest/dg/ph-table-english-us.html)
        *[(p, "p") for p in "bmp"],
        *[(p, "t") for p in "dnt"],
        *[(p, "S") for p in ("d͡ʒ", "dʒ", "ʃ", "t͡ʃ", "tʃ", "ʒ")],
        *[(p, "T") for p in "ðθ"],
        *[(p, "f") for p in "fv"],
        *[(p, "k") for p in "ɡhkŋ"],
        ("j", "i"),
        ("ɹ", "r"),
        *[(p, "s") for p in "sz"],
        ("w", "u"),
        *[(p, "@") for p in "əɚ"],
        *[(p, "a") for p in ("æ", "aɪ", "aʊ", "ɑ")],
        ("eɪ", "e"),
        *[(p, "E") for p in "ɝɛʌ"],
        *[(p, "i") for p in "iɪ"],
        ("oʊ", "o"),
        *[(p, "O") for p in ("ɔ", "ɔɪ")],
        *[(p, "u") for p in "uʊ"],
        # Polly's speech marks read l as t ("little" → t i t t), and its Spanish table the flap ɾ.
        ("l", "t"),
        ("ɾ", "t"),
        # Stress, length and diacritics do not change the mouth; a precomposed letter is its base's.
        ("ˈɑː", "a"),
        ("ˌeɪ", "e"),
        ("ã", "a"),
        ("ɯ", "u"),
        ("ɕ", "S"),
        ("ʘ", "@"),  # a click no table names: the neutral mouth
    ],
)
def test_ipa_maps_to_pollys_visemes(phoneme: str, viseme: str) -> None:
    assert viseme_of(phoneme) == viseme


def test_the_table_uses_pollys_visemes_only_and_names_each_phoneme_once() -> None:
    assert set(IPA_VISEMES) | {SIL} == set(VISEMES)
    named = [p for phonemes in IPA_VISEMES.values() for p in phonemes]
    assert len(named) == len(set(named))


def test_the_api_doc_prints_the_table() -> None:
    """docs/API.md's viseme table row by row, as the module has it."""
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.+) \|$", API_DOC.read_text(), flags=re.MULTILINE))
    documented = {v: tuple(p.strip("` ") for p in rows[v].split(", ")) for v in rows if v in IPA_VISEMES}
    assert documented == IPA_VISEMES


def test_phonemes_take_their_modifiers_and_join_affricates_and_diphthongs() -> None:
    ids = ids_of([*"mˈɛɹi", " ", *"tʃˈaɪ", " ", *"bˈɑːdʒ", ","])
    samples = np.full(len(ids), HOP, dtype=np.int64)
    phones = spoken_phonemes(ids, samples, WORD_IDS)
    assert [p for _, _, p in phones] == ["m", "ˈɛ", "ɹ", "i", "tʃ", "ˈaɪ", "b", "ˈɑː", "dʒ"]
    words = spoken_words(ids, samples, WORD_IDS)
    for start, end, _ in words:  # a word's phonemes fill its span exactly, one after another
        inside = [(s, e) for s, e, _ in phones if start <= s < end]
        assert inside[0][0] == start
        assert inside[-1][1] == end
        assert all(e == s for (_, e), (s, _) in pairwise(inside))


def test_a_phoneme_the_model_gave_no_samples_is_left_out() -> None:
    ids = ids_of([*"hæd"])
    samples = np.full(len(ids), HOP, dtype=np.int64)
    samples[ids.index(ID_MAP["æ"][0])] = 0
    assert [p for _, _, p in spoken_phonemes(ids, samples, WORD_IDS)] == ["h", "d"]
    assert spoken_phonemes(ids, samples, WordIds.of({})) == []  # ids that are not symbols: none


def test_timings_read_back_and_old_ones_still_read() -> None:
    phones = [(1000, 1256, "m"), (1256, 1768, "ˈɛ"), (2300, 2556, "i")]
    timing = SegmentTiming(9000, [UtteranceTiming(900, 3000, [(1000, 2556, 3)], phones)])
    assert SegmentTiming.from_json(json.loads(json.dumps(timing.to_json()))) == timing
    old = [9000, [[900, 3000, [[1000, 2556, 3]]], [3000, 4000, None]]]  # stored before phonemes existed
    assert SegmentTiming.from_json(old).utterances[0] == UtteranceTiming(900, 3000, [(1000, 2556, 3)], None)
    assert UtteranceTiming(900, 3000, None).to_json() == [900, 3000, None]
    assert timing.utterances[0].shifted(100).phonemes == [(s + 100, e + 100, p) for s, e, p in phones]


def stored(data: object) -> bytes:
    """As ``ttsq.segment_store`` stores a segment's timing."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def test_stored_phonemes_stay_small() -> None:
    """A 1,000,000-character book is about 800,000 phonemes: some 12 bytes each, half the plain form."""
    phones = [(256 * n, 256 * (n + 1), "ˈɛ" if n % 3 else "t") for n in range(10_000, 11_000)]
    compact = len(stored(phones_to_json(phones, 10_000 * 256)))
    plain = len(stored(phones))
    assert compact < 13 * len(phones)
    assert compact < plain / 2


def plain_utterance(text: str, symbols: list[str]) -> tuple[PlannedUtterance, UtteranceTiming, int]:
    """An utterance of all of ``text`` with every id one hop long, and its timing from sample 0."""
    ids = ids_of(symbols)
    samples = np.full(len(ids), HOP, dtype=np.int64)
    words = spoken_words(ids, samples, WORD_IDS)
    timing = UtteranceTiming(0, int(samples.sum()), words, spoken_phonemes(ids, samples, WORD_IDS))
    return PlannedUtterance(ids, span=(0, len(text)), sentence_start=True), timing, int(samples.sum())


def test_phoneme_and_viseme_marks_lie_in_their_words_with_sil_at_a_pause() -> None:
    text = "Mary had, a bee."
    pause = [","] * 8  # eight punctuation ids: a pause of 16 hops, about 190 ms
    symbols = [*"mˈɛɹi", " ", *"hˈæd", *pause, " ", "ɐ", " ", *"bˈi", "."]
    utterance, timing, total = plain_utterance(text, symbols)
    builder = MarkBuilder(text, 22050)
    marks = builder.add(utterance, timing) + builder.finish()
    check_marks(marks, round(total * 1000 / 22050))
    words = {(w.text_start, w.text_end): w for w in marks if w.type == "word"}
    phonemes = [m for m in marks if m.type == "phoneme"]
    visemes = [m for m in marks if m.type == "viseme"]
    for sound in phonemes + [v for v in visemes if v.value != SIL]:
        word = words[sound.text_start, sound.text_end]
        assert word.start_ms <= sound.start_ms < sound.end_ms <= word.end_ms
    assert [v.value for v in visemes] == ["p", "E", "r", "i", "k", "a", "t", SIL, "@", "p", "i"]
    silence = next(v for v in visemes if v.value == SIL)
    assert text[silence.text_start : silence.text_end] == ", "
    assert silence.end_ms - silence.start_ms >= SIL_MIN_MS
    assert [m.type for m in marks[:3]] == ["sentence", "word", "phoneme"]  # Polly's order: by time


def test_ssml_marks_are_points_where_the_next_speech_starts() -> None:
    utterance, timing, total = plain_utterance("x", [*"bˈi"])
    first = replace(utterance, span=None, sentence_start=False, source=(7, 20), marks=(MarkPoint("go", 0, 7),))
    last = replace(first, marks=(MarkPoint("end", 20, 38, after=True),))
    later = UtteranceTiming(total, 2 * total, [(s + total, e + total, n) for s, e, n in timing.words or ()])
    builder = MarkBuilder("", 22050)
    marks = builder.add(first, timing) + builder.add(last, later) + builder.finish()
    points = [m for m in marks if m.type == "ssml"]
    assert [(p.value, p.text_start, p.text_end) for p in points] == [("go", 0, 7), ("end", 20, 38)]
    first_sound = next(m for m in marks if m.type == "phoneme")
    assert points[0].start_ms == points[0].end_ms == first_sound.start_ms
    assert points[1].start_ms == round(2 * total * 1000 / 22050)
    assert {(m.text_start, m.text_end) for m in marks if m.type == "phoneme"} == {(7, 20)}


def test_marks_of_every_type_read_back_from_json() -> None:
    marks = [
        Mark("sentence", 0, 500, 0, 4, "Mary"),
        Mark("ssml", 0, 0, 10, 31, "start"),
        Mark("word", 10, 480, 0, 4, "Mary"),
        Mark("phoneme", 10, 60, 0, 4, "m"),
        Mark("viseme", 10, 60, 0, 4, "p"),
        Mark("phoneme", 60, 120, 0, 4, "ˈɛ"),
        Mark("viseme", 60, 120, 0, 4, "E"),
        Mark("viseme", 120, 300, 4, 6, SIL),
        Mark("viseme", 300, 480, 6, 6, SIL),
    ]
    assert marks_from_json(json.loads(json.dumps(marks_to_json(marks)))) == marks
    check_marks(marks, 500)


def bad_sound_marks() -> dict[str, tuple[list[Mark], str]]:
    m = Mark("phoneme", 10, 60, 0, 4, "m")
    p = Mark("viseme", 10, 60, 0, 4, "p")
    point = Mark("ssml", 100, 100, 10, 31, "here")
    return {
        "unknown viseme": ([replace(p, value="x")], "value must be one of p t S"),
        "empty phoneme": ([replace(m, value="")], "value is empty"),
        "a phoneme with no word": ([replace(m, text_end=0)], "span no text"),
        "sil only may be empty": ([replace(p, text_end=0)], "span no text"),
        "an ssml mark with a length": ([replace(point, end_ms=101)], "is a point in time"),
        "phonemes overlapping": ([m, replace(m, start_ms=50, end_ms=90)], "overlaps"),
        "phonemes going back in the text": (
            [replace(m, text_start=5, text_end=9), replace(m, start_ms=60, end_ms=90)],
            "text offset 0",
        ),
        "ssml marks going back": (
            [point, replace(point, start_ms=50, end_ms=50, text_start=40, text_end=50)],
            "not monotonic",
        ),
    }


@pytest.mark.parametrize("case", list(bad_sound_marks()))
def test_check_marks_names_what_is_wrong_with_each_type(case: str) -> None:
    marks, error = bad_sound_marks()[case]
    with pytest.raises(ValueError, match=re.escape(error)):
        check_marks(marks, 1_000)


def test_an_ssml_mark_is_parsed_with_its_span_and_ends_the_text_before_it() -> None:
    source = '<speak>Hello <mark name="a &gt; b"/>world.<s>Bye<mark name="end"></mark></s></speak>'
    pieces = parse_ssml(source).pieces
    marks = [p for p in pieces if isinstance(p, MarkElement)]
    assert [(m.name, source[m.start : m.end]) for m in marks] == [
        ("a > b", '<mark name="a &gt; b"/>'),
        ("end", '<mark name="end"></mark>'),
    ]
    spoken = [p for p in pieces if isinstance(p, Speech)]
    assert [(p.text, source[p.source[0] : p.source[1]]) for p in spoken if p.source] == [
        ("Hello", "Hello"),
        ("world.", "world."),
        ("Bye", "Bye"),
    ]


def test_a_plan_keeps_its_marks_and_sources_and_old_plans_read() -> None:
    utterance = PlannedUtterance([1, 2], source=(3, 9), marks=(MarkPoint("a", 1, 2), MarkPoint("b", 9, 20, True)))
    assert PlannedUtterance.from_json(json.loads(json.dumps(utterance.to_json()))) == utterance
    assert PlannedUtterance.from_json([[1, 2], 1.0, None, 0.0, None, False, 0.5]).gain == 0.5
    assert PlannedUtterance([1]).to_json() == [[1], 1.0, None, 0.0]
