"""VOICEVOX's AudioQuery from ttsq: accent phrases from OpenJTalk's real analysis, the AquesTalk-like
kana written and read back, and the text a job speaks for a query, checked with the real Kokoro
front end. No services: pyopenjtalk (in the analysis child process) and Kokoro's G2P only."""

from __future__ import annotations

import json
import subprocess
import sys
from difflib import SequenceMatcher
from typing import Final

import pyopenjtalk
import pytest

from api.voicevox.models import AudioQuery
from api.voicevox.queries import accent_phrases, audio_query, spoken_text
from bench.corpus import ja_short
from tts_core.base.errors import InvalidKana
from tts_core.lexicon.lexicon import Lexicon, LexiconEntry
from tts_core.voices import kokoro, kokoro_package
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.voice_info import VoiceInfo

JAPANESE_VOICE: Final = "ja_JP-kokoro-jf_alpha"
OPENJTALK_ACCENT_MARK: Final = "\u2019"
"""pyopenjtalk-plus marks an accent in ``pron`` with a right single quotation mark."""
ROWS: Final = (
    "アカサタナハマヤラワガザダバパャァ",
    "イキシチニヒミリギジヂビピィ",
    "ウクスツヌフムユルグズヅブプュゥ",
    "エケセテネヘメレゲゼデベペェ",
    "オコソトノホモヨロヲゴゾドボポョォ",
)
"""Katakana by the vowel they end in, a i u e o."""


@pytest.fixture(scope="module")
def ja() -> VoiceInfo:
    return VoiceCatalog.discover().get(JAPANESE_VOICE)


@pytest.fixture(scope="module")
def en() -> VoiceInfo:
    return VoiceCatalog.discover().get(DEFAULT_VOICE_ID)


def texts(query: AudioQuery) -> list[list[str]]:
    return [[m.text for m in phrase.moras] for phrase in query.accent_phrases]


def test_a_greeting_and_a_pause(ja: VoiceInfo) -> None:
    query = audio_query("こんにちは、世界", ja)
    assert texts(query) == [["コ", "ン", "ニ", "チ", "ワ"], ["セ", "カ", "イ"]]
    first, second = query.accent_phrases
    assert (first.accent, second.accent) == (5, 1)
    assert first.pause_mora is not None
    assert (first.pause_mora.text, first.pause_mora.vowel) == ("、", "pau")
    assert second.pause_mora is None
    assert [(m.consonant, m.vowel) for m in first.moras] == [
        ("k", "o"),
        (None, "N"),
        ("n", "i"),
        ("ch", "i"),
        ("w", "a"),
    ]
    assert query.kana == "コンニチワ'、セ'カイ"
    # Tokyo accent, nominal: セ'カイ high then low; コンニチワ low then high.
    assert second.moras[0].pitch > second.moras[1].pitch
    assert first.moras[0].pitch < first.moras[1].pitch
    assert all(m.vowel_length > 0 and (m.consonant is None) == (m.consonant_length is None) for m in first.moras)


def test_the_query_has_voicevox_defaults_at_the_voice_rate(ja: VoiceInfo, en: VoiceInfo) -> None:
    query = audio_query("テスト", ja)
    assert (query.speedScale, query.pitchScale, query.intonationScale, query.volumeScale) == (1, 0, 1, 1)
    assert (query.prePhonemeLength, query.postPhonemeLength) == (0.1, 0.1)
    assert (query.pauseLength, query.pauseLengthScale, query.outputStereo) == (None, 1, False)
    assert query.outputSamplingRate == ja.sample_rate == 24000
    assert audio_query("Test.", en).outputSamplingRate == en.sample_rate


@pytest.mark.parametrize(
    "text",
    ["今日は良い天気ですか？", "東京都の人口は千四百万人です。", "明日、会議室で打ち合わせをしましょう。"],
)
def test_moras_and_accents_are_what_openjtalk_says(ja: VoiceInfo, text: str) -> None:
    features = pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False)
    query = audio_query(text, ja)
    assert sum(len(phrase.moras) for phrase in query.accent_phrases) == sum(f["mora_size"] for f in features)
    # The first word opens the first phrase: its accent (when it falls inside the word) is the phrase's.
    first = features[0]
    if 0 < first["acc"] <= first["mora_size"]:
        assert query.accent_phrases[0].accent == first["acc"]
    pron = "".join(f["pron"] for f in features if f["mora_size"]).replace(OPENJTALK_ACCENT_MARK, "").replace("ヲ", "オ")
    assert "".join(m.text for p in query.accent_phrases for m in p.moras) == _long_vowels_spelled(pron)


def _long_vowels_spelled(pron: str) -> str:
    """OpenJTalk's pronunciation with ー written as the vowel it lengthens and ヲ as オ (as VOICEVOX's moras are)."""
    vowels = {kana: vowel for vowel, row in zip("aiueo", ROWS, strict=True) for kana in row}
    out = ""
    for ch in pron:
        out += "アイウエオ"["aiueo".index(vowels[out[-1]])] if ch == "ー" else ch
    return out


def test_a_question_and_devoiced_moras(ja: VoiceInfo) -> None:
    query = audio_query("今日は良い天気ですか？", ja)
    assert query.accent_phrases[-1].is_interrogative
    assert not any(p.is_interrogative for p in query.accent_phrases[:-1])
    assert query.kana == "キョ'オワ/ヨ'イ/テ'ンキデ_スカ？"
    devoiced = [m for p in query.accent_phrases for m in p.moras if m.vowel == "U"]
    assert [m.text for m in devoiced] == ["ス"]
    assert devoiced[0].pitch == 0.0
    assert spoken_text(query, ja) == "キョーワ ヨイ テンキデスカ？"


@pytest.mark.parametrize(
    "text", ["こんにちは、世界", "今日は良い天気ですか？", "ヴァイオリンを弾きます。ファイルを、ティッシュで。"]
)
def test_kana_round_trips(ja: VoiceInfo, text: str) -> None:
    query = audio_query(text, ja)
    assert query.kana is not None
    parsed = accent_phrases(query.kana, ja, is_kana=True)
    assert [(p.accent, p.is_interrogative, p.pause_mora is not None) for p in parsed] == [
        (p.accent, p.is_interrogative, p.pause_mora is not None) for p in query.accent_phrases
    ]
    assert [[(m.text, m.consonant, m.vowel) for m in p.moras] for p in parsed] == [
        [(m.text, m.consonant, m.vowel) for m in p.moras] for p in query.accent_phrases
    ]
    again = audio_query(query.kana, ja, kana=True)
    assert again.kana == query.kana


@pytest.mark.parametrize(
    ("kana", "position"),
    [
        ("", 1),
        ("コンニチワ", 5),  # no accent mark
        ("'コンニチワ", 1),
        ("コ''ン", 3),
        ("コ'/", 3),  # an empty phrase after the delimiter
        ("コabc'", 2),
        ("コ？ン'", 2),
        ("コ'_ン", 3),  # ン has no vowel to devoice
        ("セ'カイ、、", 6),
    ],
)
def test_malformed_kana_is_refused_with_its_position(ja: VoiceInfo, kana: str, position: int) -> None:
    with pytest.raises(InvalidKana) as refused:
        accent_phrases(kana, ja, is_kana=True)
    assert refused.value.position == position
    assert refused.value.code == "invalid_kana"


def test_an_edited_mora_is_what_the_job_speaks(ja: VoiceInfo) -> None:
    query = audio_query("こんにちは、世界", ja)
    assert spoken_text(query, ja) == "コンニチワ、 セカイ。"
    query.accent_phrases[1].moras[0].text = "テ"
    assert spoken_text(query, ja) == "コンニチワ、 テカイ。"
    front = kokoro.front_end(kokoro_package.data_dir())
    before = _ids(front, "コンニチワ、 セカイ。")
    assert _ids(front, spoken_text(query, ja)) != before
    assert len(_ids(front, spoken_text(query, ja))) == len(before)  # one consonant for another


def test_a_lexicon_reading_reaches_the_query(ja: VoiceInfo) -> None:
    lexicon = Lexicon("ja", (LexiconEntry(("東海林",), reading="アズマ", accent=1),))
    assert audio_query("東海林さんです。", ja).kana == "ショオジサンデ'_ス"
    assert audio_query("東海林さんです。", ja, lexicon=lexicon).kana == "ア'ズマサンデ_ス"


def test_english_is_passed_through(en: VoiceInfo) -> None:
    query = audio_query("Hello, world.", en)
    assert query.accent_phrases == []
    assert query.kana == "Hello, world."
    assert spoken_text(query, en) == "Hello, world."
    assert accent_phrases("Hello", en, is_kana=True) == []


def _ids(front: kokoro.KokoroFrontEnd, text: str) -> list[int]:
    return [i for sentence in front.sentences(text) for reading in front.read(sentence) for i in reading.ids]


def test_kokoro_hears_the_spoken_text_as_it_hears_the_text(ja: VoiceInfo) -> None:
    """Kokoro's tokens for a query's spoken katakana against those for the text itself, word breaks
    (space tokens) aside: measured on the Japanese short-message corpus, 28 of 40 were identical and
    the rest differ by a phoneme or two (0.95 similar on average); both must hold here."""
    folder = kokoro_package.data_dir()
    assert folder is not None
    front = kokoro.front_end(folder)
    spaces = {i for symbol, i in kokoro.vocab(folder).items() if symbol == " "}

    def tokens(text: str) -> list[int]:
        return [i for i in _ids(front, text) if i not in spaces]

    text = "今日は良い天気です。"
    assert tokens(spoken_text(audio_query(text, ja), ja)) == tokens(text)
    corpus = ja_short()
    pairs = [(tokens(text), tokens(spoken_text(audio_query(text, ja), ja))) for text in corpus]
    identical = sum(a == b for a, b in pairs)
    similarity = sum(SequenceMatcher(None, a, b).ratio() for a, b in pairs) / len(pairs)
    assert identical >= 0.65 * len(corpus)
    assert similarity >= 0.97


ANALYSE_IN_A_CHILD: Final = """
import json, sys
from api.voicevox.queries import audio_query
from tts_core.voices.catalog import VoiceCatalog
query = audio_query("今日は良い天気です。", VoiceCatalog.discover().get(sys.argv[1]))
print(json.dumps({"kana": query.kana, "loaded": sorted({"pyopenjtalk", "onnxruntime"} & set(sys.modules))}))
"""


def test_the_analysis_leaves_the_calling_process_without_pyopenjtalk() -> None:
    """pyopenjtalk-plus loads ONNX Runtime when imported; the API process must not (the process
    footprint rule), so the analysis runs in a child."""
    run = subprocess.run(
        [sys.executable, "-c", ANALYSE_IN_A_CHILD, JAPANESE_VOICE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"kana": "キョ'オワ/ヨ'イ/テ'ンキデ_ス", "loaded": []}
