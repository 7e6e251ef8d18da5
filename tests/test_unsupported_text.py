"""Text a voice cannot speak is refused at submit (422 ``unsupported_text``), naming the voice and the
voices that could; mixed text and text without letters are accepted."""

from __future__ import annotations

import io
from dataclasses import replace

import httpx
import pytest
import redis
import soundfile

from tests.conftest import FOLDER_VOICE_ID, IdleQueueApi, wait_for_job
from tests.test_japanese import JAPANESE_VOICE_IDS
from tests.test_jobs_api import job_keys
from tts_core.base.audio import rms_dbfs
from tts_core.base.errors import UnsupportedText
from tts_core.text.scripts import base_language, can_speak, letter_scripts, scripts_of, speakers_of
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog

JAPANESE = "吾輩は猫である。名前はまだ無い。"
ARABIC = "مرحبا بكم في خدمة تحويل النص إلى كلام."
RUSSIAN = "Съешь же ещё этих мягких французских булок."
GREEK = "Καλημέρα σας."
MIXED = "Our guest today is 宮沢賢治, the poet."


@pytest.mark.parametrize(
    ("text", "language", "speakable"),
    [
        ("Hello there.", "en_US", True),
        (JAPANESE, "en_US", False),
        (ARABIC, "en_US", False),
        (RUSSIAN, "en_US", False),
        (MIXED, "en_US", True),
        ("1234567890 42%", "en_US", True),  # no letters: digits are read by every front end
        (JAPANESE, "ja", True),
        ("カタカナだけ", "ja", True),
        ("Only Latin letters here.", "ja", False),
        ("今日はGitHubの話です。", "ja", True),
        (RUSSIAN, "ru", True),
        (ARABIC, "ar", True),
        ("\uff26\uff55\uff4c\uff4c", "en_US", True),  # fullwidth Latin ("Full") is Latin
        (GREEK, "xx", True),  # a language not listed refuses nothing
    ],
)
def test_can_speak(text: str, language: str, speakable: bool) -> None:
    assert can_speak(text, scripts_of(language)) is speakable


def test_scripts_are_named_most_letters_first() -> None:
    assert letter_scripts(JAPANESE) == ["Hiragana", "Han"]  # 8 kana, 6 kanji
    assert set(letter_scripts(JAPANESE)) == {"Han", "Hiragana"}
    assert letter_scripts(RUSSIAN) == ["Cyrillic"]
    assert letter_scripts("12 34") == []
    assert base_language("en-us") == base_language("EN_GB") == "en"
    assert speakers_of(RUSSIAN, [("a", "en_US"), ("b", "ru_RU"), ("c", "uk")]) == ["b", "c"]


@pytest.mark.parametrize(
    ("text", "written_in", "could"),
    [
        (JAPANESE, "Hiragana, Han", f"voices that can: {', '.join(JAPANESE_VOICE_IDS)}"),
        (ARABIC, "Arabic", "no installed voice can"),
        (RUSSIAN, "Cyrillic", "no installed voice can"),
    ],
)
def test_an_english_voice_refuses_text_it_cannot_read_and_no_job_is_made(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis, text: str, written_in: str, could: str
) -> None:
    keys_before = job_keys(redis_client)
    response = idle_queue_api.client.post("/v1/jobs", json={"text": text})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "unsupported_text"
    assert error["message"] == (f"voice {DEFAULT_VOICE_ID} (en_US) cannot speak text written in {written_in}; {could}")
    assert text not in error["message"]  # the text itself is never echoed
    assert job_keys(redis_client) <= keys_before  # no new key (an earlier test's lease may lapse meanwhile)
    assert redis_client.llen(idle_queue_api.queue) == 0


def test_the_refusal_names_the_voices_that_could_speak_it() -> None:
    """A catalog with a Russian voice beside the English one (configs as plain data)."""
    english = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    russian = replace(english, id="ru_RU-test-medium", language="ru_RU")
    catalog = VoiceCatalog({english.id: english, russian.id: russian})  # no Japanese voices here
    with pytest.raises(UnsupportedText) as refused:
        catalog.check_speakable(DEFAULT_VOICE_ID, RUSSIAN)
    assert refused.value.alternatives == ["ru_RU-test-medium"]
    assert str(refused.value).endswith("written in Cyrillic; voices that can: ru_RU-test-medium")
    catalog.check_speakable("ru_RU-test-medium", RUSSIAN)
    catalog.check_speakable(DEFAULT_VOICE_ID, MIXED)
    with pytest.raises(UnsupportedText):
        catalog.check_speakable("ru_RU-test-medium", "Only English here.")


def test_mixed_text_is_accepted_by_the_api_and_spoken(client: httpx.Client) -> None:
    """Accepted, and then spoken: the job succeeds with audio of the sentence (its Latin words at least)."""
    for voice in (DEFAULT_VOICE_ID, FOLDER_VOICE_ID):
        answer = client.post("/v1/jobs", json={"text": MIXED, "voice": voice, "format": "wav"})
        assert answer.status_code == 202, answer.text
        done = wait_for_job(client, answer.json()["id"])
        assert done["status"] == "succeeded", done["error"]
        audio = client.get(f"/v1/jobs/{done['id']}/audio", follow_redirects=True).content
        pcm, rate = soundfile.read(io.BytesIO(audio), dtype="int16")
        assert rate == 22050
        assert len(pcm) / rate == pytest.approx(done["result"]["duration_s"], abs=0.01)
        assert done["result"]["duration_s"] > 1.0  # "Our guest today is ..., the poet."
        assert rms_dbfs(pcm) > -35  # speech, not silence


def test_the_speech_endpoint_refuses_it_too(client: httpx.Client) -> None:
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": RUSSIAN})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unsupported_text"
