"""A streamed job's first audio is a short clause of its first sentence, not the whole sentence, and
the audio streamed and stored is still all of the job's (real worker, real models)."""

from __future__ import annotations

import io
from typing import Final

import httpx
import numpy as np
import pytest
import soundfile

from api.audio_answer import FIRST_PART_HEADER
from tests.conftest import wait_for_job
from tts_core.text.first_part import CLAUSE_PAUSE_S, first_cuts, pieces, word_breaks

JAPANESE = "この書生の掌の裏でしばらくはよい心持に坐っておったが、しばらくすると非常な速力で運転し始めた。"
"""One 47-character sentence: before, its first audio was all of it."""
JAPANESE_STREAMED: Final = "この書生の掌の裏でしばらくはよい心持に坐っておった。"
"""JAPANESE up to its comma, streamed: still past the 16 morae spoken whole, cut in two at the same
accent phrase (the rest, 2.6 s, outlasts the first part's 1.9 s)."""
ENGLISH = (
    "These reflections have dispelled the agitation with which I began my letter, and I feel my heart glow "
    "with an enthusiasm which elevates me to heaven. Nothing contributes so much to tranquillise the mind."
)
CASES = [("ja_JP-kokoro-jf_alpha", JAPANESE_STREAMED, 24000), ("alloy", ENGLISH, 22050)]


def speak(api_url: str, voice: str, text: str) -> tuple[httpx.Headers, bytes]:
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": "wav"}
    with httpx.stream("POST", f"{api_url}/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return response.headers, response.read()


@pytest.mark.parametrize(("voice", "text", "rate"), CASES)
def test_the_first_streamed_part_is_a_clause_and_the_whole_is_all_there(
    api_url: str, client: httpx.Client, voice: str, text: str, rate: int
) -> None:
    headers, streamed = speak(api_url, voice, text)
    job = wait_for_job(client, headers["x-ttsq-job-id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["progress"]["segments_total"] >= 2  # the first sentence alone is cut in two
    heard = np.frombuffer(streamed[44:], dtype="<i2")  # the streamed WAV's samples after its header
    stored, stored_rate = soundfile.read(io.BytesIO(httpx.get(job["result"]["url"]).content), dtype="int16")
    assert stored_rate == rate
    assert np.array_equal(heard, stored)
    assert heard.size / rate == pytest.approx(job["result"]["duration_s"], abs=0.002)
    first_s = int(headers[FIRST_PART_HEADER]) / 1000
    first_sentence_s = heard.size / rate / 2  # well under the first sentence's share, however said
    assert 0.3 < first_s < first_sentence_s, (first_s, heard.size / rate)
    # The cut is a pause as at a comma: quiet samples right after the first part, no click.
    first_end = round(first_s * rate)
    pause = heard[first_end - round(CLAUSE_PAUSE_S * rate) + 10 : first_end - 10]
    assert pause.size > 0
    assert np.abs(pause).max() < 50


def test_japanese_is_cut_at_an_accent_phrase_when_its_first_comma_comes_late() -> None:
    from tts_core.voices.kokoro import front_end
    from tts_core.voices.kokoro_package import data_dir

    folder = data_dir()
    assert folder is not None
    cut = [JAPANESE[a:b] for a, b in pieces(JAPANESE, first_cuts(JAPANESE, front_end(folder)))]
    assert "".join(cut) == JAPANESE
    assert cut[0] == "この書生の掌の裏で"  # four accent phrases, 14 morae; the comma is at 41
    assert len(cut) == 2  # the rest is one piece: not cut again at its comma (one more model call)


def test_english_prefers_a_comma_then_a_phrase_start() -> None:
    long_sentence = "Well, as it happens, the train was late again today, and nobody could tell us why."
    assert first_cuts(long_sentence, object()) == [20]  # once only
    assert [b.end for b in word_breaks("a b")] == [1, 3]
    sentence = "These reflections have dispelled the agitation with which I began my letter, and I feel my heart glow"
    cut = first_cuts(sentence, object())
    assert sentence[: cut[0]] == "These reflections have dispelled the agitation"  # before "with", not "which"
    assert first_cuts("Too short to cut.", object()) == []
    # Up to 12 words are spoken whole: one model call, though there is a comma and a phrase start.
    assert first_cuts("Good morning, here is the news for you.", object()) == []
    assert first_cuts("Thanks for reaching out, a member of our team will reply soon.", object()) == []
    longer = "Good morning, here is the news for you today and for the rest of the week."  # 16 words
    assert longer[: first_cuts(longer, object())[0]] == "Good morning, here is the news"
