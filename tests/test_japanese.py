"""Japanese through the Kokoro engine: the voices from PyPI in the catalog and the API, playable 24 kHz
audio through the real worker, refusals both ways, and the engine's own rules (one utterance a call)."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.conftest import wait_for_job
from tts_core.audio import rms_dbfs
from tts_core.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.config import SynthesisConfig
from tts_core.kokoro import KOKORO_MAX_IDS, KokoroVoice
from tts_core.kokoro_package import data_dir, model_bytes

JAPANESE_VOICE_IDS = [
    f"ja_JP-kokoro-{name}" for name in ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
]
NEKO = "吾輩は猫である。名前はまだ無い。"
LONG_NEKO = (
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
    "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
    "吾輩はここで始めて人間というものを見た。しかもあとで聞くとそれは書生という人間中で一番獰悪な種族であったそうだ。"
    "この書生というのは時々我々を捕えて煮て食うという話である。"
)


@pytest.fixture(scope="module")
def kumo() -> KokoroVoice:
    return KokoroVoice.load("jm_kumo")


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


def test_the_graph_takes_one_utterance_a_call(kumo: KokoroVoice) -> None:
    """Kokoro's exported graph has a fixed batch dimension of 1: the engine runs batch items one by
    one, each exactly as it would alone (the model is deterministic)."""
    assert kumo.providers[0] in {"CPUExecutionProvider", "CUDAExecutionProvider"}
    ids = kumo.utterances("今日は良い天気ですね。")[0].phoneme_ids
    alone = kumo.synthesize_ids([ids], SynthesisConfig())[0]
    both = kumo.synthesize_ids([ids, ids], SynthesisConfig())
    assert all(np.array_equal(alone, audio) for audio in both)
    faster = kumo.synthesize_ids([ids], SynthesisConfig(speed=2.0))[0]
    assert 0.4 < len(faster) / len(alone) < 0.7


def test_japanese_sentences_split_without_spaces_and_fit_the_model(kumo: KokoroVoice) -> None:
    utterances = kumo.utterances(LONG_NEKO)
    assert len(utterances) == 7  # 。 ends a sentence even with no space after it
    assert all(u.phoneme_ids[0] == u.phoneme_ids[-1] == 0 for u in utterances)  # framed by pads
    assert max(len(u.phoneme_ids) for u in utterances) <= KOKORO_MAX_IDS
    cut = kumo.utterances(LONG_NEKO, 40)  # a small budget cuts long sentences, never exceeds it
    assert len(cut) > len(utterances)
    assert max(len(u.phoneme_ids) for u in cut) <= 40


def test_a_japanese_job_gives_playable_24khz_audio(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json={"text": NEKO, "voice": "ja_JP-kokoro-jf_alpha"}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["result"]["sample_rate"] == 24000
    audio = client.get(f"/v1/jobs/{job['id']}/audio", follow_redirects=True).content
    pcm, rate = sf.read(io.BytesIO(audio), dtype="int16")
    assert rate == 24000
    assert 2.0 < len(pcm) / rate < 8.0  # two short sentences
    assert rms_dbfs(pcm) > -35  # speech, not silence


def test_a_long_japanese_job_is_split_into_segments_and_assembled(client: httpx.Client) -> None:
    job = client.post(
        "/v1/jobs", json={"text": LONG_NEKO, "voice": "ja_JP-kokoro-jm_kumo", "priority": "bulk", "format": "flac"}
    ).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["segments_total"] > 1
    audio = client.get(f"/v1/jobs/{job['id']}/audio", follow_redirects=True).content
    pcm, rate = sf.read(io.BytesIO(audio), dtype="int16")
    assert rate == 24000
    assert abs(len(pcm) / rate - done["result"]["duration_s"]) < 0.01
    assert len(pcm) / rate > 10


def test_a_japanese_voice_refuses_latin_only_text_naming_english_voices(client: httpx.Client) -> None:
    response = client.post("/v1/jobs", json={"text": "Only English words here.", "voice": "ja_JP-kokoro-jf_alpha"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "unsupported_text"
    assert error["message"].startswith("voice ja_JP-kokoro-jf_alpha (ja_JP) cannot speak text written in Latin")
    assert error["message"].endswith(
        "voices that can: en_US-broken-medium, en_US-folder-medium, en_US-joe-medium, en_US-twins-medium"
    )


def test_mixed_japanese_with_a_latin_word_is_accepted(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json={"text": "今日はGitHubの話です。", "voice": "ja_JP-kokoro-jf_nezumi"}).json()
    assert wait_for_job(client, job["id"])["status"] == "succeeded"
