"""SSML jobs through the real API and worker: breaks land exactly in the audio, rates and paragraph
pauses change it, invalid SSML is refused with its place and no job, characters count spoken text."""

from __future__ import annotations

import io

import httpx
import numpy as np
import numpy.typing as npt
import redis
import soundfile as sf

from api.submission import MIN_SSML_TAGS, SSML_CHARS_PER_TAG
from tests.conftest import IdleQueueApi, wait_for_job
from tests.test_jobs_api import job_keys
from ttsq.settings import Settings

STILL = {"noise_scale": 0, "noise_w": 0}
"""No sampling noise: the same utterances give the same samples, so durations compare exactly."""


def ssml_pcm(client: httpx.Client, source: str, **options: object) -> tuple[npt.NDArray[np.int16], dict[str, object]]:
    response = client.post("/v1/jobs", json={"text": source, "text_type": "ssml", **STILL, **options})
    assert response.status_code == 202, response.text
    done = wait_for_job(client, response.json()["id"])
    assert done["status"] == "succeeded", done["error"]
    audio = client.get(f"/v1/jobs/{done['id']}/audio", follow_redirects=True).content
    pcm, _ = sf.read(io.BytesIO(audio), dtype="int16")
    return pcm, done


def longest_digital_silence(pcm: npt.NDArray[np.int16]) -> int:
    """Samples in the longest run of exact zeros (inserted pauses are digital silence)."""
    zero = np.concatenate(([0], (pcm == 0).astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(zero))
    return int((edges[1::2] - edges[::2]).max()) if edges.size else 0


def test_a_two_second_break_is_two_seconds_of_silence(client: httpx.Client, settings: Settings) -> None:
    with_break, job = ssml_pcm(client, '<speak>Hello there.<break time="2s"/>Goodbye now.</speak>')
    sentences, _ = ssml_pcm(client, "<speak><s>Hello there.</s><s>Goodbye now.</s></speak>")
    rate = 22050
    assert job["characters"] == len("Hello there. Goodbye now.")  # the spoken text, not the markup
    assert longest_digital_silence(with_break) >= 2 * rate
    # the same two utterances; only the pause between them differs: 2 s instead of the sentence pause
    extra = len(with_break) - len(sentences)
    assert extra == round(2.0 * rate) - round(settings.sentence_pause_s * rate)


def test_breaks_at_the_edges_and_in_a_row_add_up(client: httpx.Client) -> None:
    plain, _ = ssml_pcm(client, "<speak>Just this.</speak>")
    framed, _ = ssml_pcm(
        client, '<speak><break time="500ms"/>Just this.<break time="1s"/><break time="250ms"/></speak>'
    )
    assert len(framed) - len(plain) == round(0.5 * 22050) + round(1.25 * 22050)
    assert not framed[: round(0.5 * 22050)].any()
    assert not framed[-round(1.25 * 22050) :].any()


def test_paragraphs_get_the_paragraph_pause(client: httpx.Client, settings: Settings) -> None:
    paragraphs, _ = ssml_pcm(client, "<speak><p>First part.</p><p>Second part.</p></speak>")
    sentences, _ = ssml_pcm(client, "<speak><s>First part.</s><s>Second part.</s></speak>")
    expected = round(settings.paragraph_pause_s * 22050) - round(settings.sentence_pause_s * 22050)
    assert len(paragraphs) - len(sentences) == expected


def test_a_slow_rate_speaks_longer(client: httpx.Client) -> None:
    normal, _ = ssml_pcm(client, "<speak>This sentence is spoken at two speeds.</speak>")
    slow, _ = ssml_pcm(client, '<speak><prosody rate="x-slow">This sentence is spoken at two speeds.</prosody></speak>')
    assert 1.6 < len(slow) / len(normal) < 2.4


def test_a_phoneme_is_spoken_as_given(client: httpx.Client) -> None:
    spelled, _ = ssml_pcm(client, '<speak><phoneme alphabet="ipa" ph="həlˈoʊ">hello</phoneme></speak>')
    assert 0.2 < len(spelled) / 22050 < 1.5


def test_a_long_ssml_job_is_split_and_keeps_its_break(client: httpx.Client) -> None:
    """Five sentences (115 phoneme ids each, 400 a segment; a pause weighs 40 a second): three fit in no
    segment, nor do the two around the 3 s break with the one after them, so there are three."""
    sentence = "The narrator reads another sentence of the chapter aloud."
    source = f'<speak><p>{" ".join([sentence] * 3)}</p><break time="3s"/><p>{" ".join([sentence] * 2)}</p></speak>'
    pcm, job = ssml_pcm(client, source, priority="bulk")
    progress = job["progress"]
    assert isinstance(progress, dict)
    assert progress["segments_total"] > 2
    assert longest_digital_silence(pcm) >= 3 * 22050


def test_japanese_ssml(client: httpx.Client) -> None:
    source = '<speak xml:lang="ja">今日は<break time="1s"/>良い天気ですね。</speak>'
    pcm, job = ssml_pcm(client, source, voice="ja_JP-kokoro-jf_alpha")
    assert job["result"]["sample_rate"] == 24000  # type: ignore[index]
    assert longest_digital_silence(pcm) >= 24000


def test_invalid_ssml_is_refused_with_its_place_and_no_job(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    keys_before = job_keys(redis_client)
    for source, where in (
        ("<speak>\n  <p>open\n</speak>", "line 3, column 3"),
        ('<speak><break time="forever"/></speak>', "line 1, column 8"),
        ('<!DOCTYPE s [<!ENTITY a "aaaa">]><speak>&a;</speak>', "line 1, column 1"),
    ):
        response = idle_queue_api.client.post("/v1/jobs", json={"text": source, "text_type": "ssml"})
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "invalid_ssml"
        assert where in error["message"]
    assert job_keys(redis_client) <= keys_before  # no new key (an earlier test's lease may lapse meanwhile)
    assert redis_client.llen(idle_queue_api.queue) == 0


def test_ssml_past_its_tag_budget_is_refused_before_parsing(idle_queue_api: IdleQueueApi, settings: Settings) -> None:
    """One tag per ``SSML_CHARS_PER_TAG`` characters of the limit bounds what parsing costs the API:
    a document with exactly that many is accepted, one more tag is refused where it stands."""
    limit = max(settings.max_text_chars // SSML_CHARS_PER_TAG, MIN_SSML_TAGS)
    opening = "<speak>Hello there."
    silent = '<break strength="none"/>'  # a tag that adds no silence (the silence limits are tested apart)
    at_limit = opening + silent * (limit - 2) + "</speak>"
    accepted = idle_queue_api.client.post("/v1/jobs", json={"text": at_limit, "text_type": "ssml"}, timeout=60)
    assert accepted.status_code == 202, accepted.text
    job = idle_queue_api.client.get(f"/v1/jobs/{accepted.json()['id']}").json()
    assert (job["status"], job["text_type"], job["characters"]) == ("queued", "ssml", len("Hello there."))
    over = opening + silent * (limit - 1) + "</speak>"
    refused = idle_queue_api.client.post("/v1/jobs", json={"text": over, "text_type": "ssml"}, timeout=60)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_ssml"
    column = len(opening) + len(silent) * (limit - 1) + 1  # the closing tag is one too many
    assert f"line 1, column {column}: more than {limit} tags" in error["message"]


def test_ssml_that_the_voice_cannot_read_is_refused(idle_queue_api: IdleQueueApi) -> None:
    response = idle_queue_api.client.post(
        "/v1/jobs", json={"text": "<speak>吾輩は猫である。</speak>", "text_type": "ssml"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unsupported_text"


def test_markup_without_text_type_is_read_as_text(idle_queue_api: IdleQueueApi) -> None:
    response = idle_queue_api.client.post("/v1/jobs", json={"text": "<speak>Hi</speak>"})
    assert response.status_code == 202
    assert response.json()["text_type"] == "text"
    assert response.json()["characters"] == len("<speak>Hi</speak>")
