"""``POST /v1/audio/speech`` through the official ``openai`` client, against the real stack."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Final

import httpx
import numpy as np
import openai
import pytest
import redis
import soundfile

from api import part_reader
from api.main import create_app
from bench.audio_decoding import decode as decode_audio
from cli.processes import ManagedProcess
from tests.conftest import FOLDER_VOICE_ID, IdleQueueApi, serve, wait_for_job
from tests.test_segment_jobs import PARAGRAPH
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.settings import Settings

SENTENCE: Final = "The speech endpoint answers with audio, as the OpenAI client expects of a server."
"""Long enough (14 words, past the 12 a streamed job speaks whole) for a streamed job to cut its
first clause: two parts, each a segment; about five seconds of speech."""
SAMPLE_RATE = 22050
TWO_SEGMENTS = PARAGRAPH[: PARAGRAPH.index(" We had")]
"""The paragraph's first three sentences: two segments at the default budget, where a test needs
more than one and not their length (half the paragraph's synthesis)."""


@pytest.fixture
def openai_client(api_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        yield client


def decode(data: bytes, response_format: str) -> tuple[np.ndarray, int]:
    if response_format == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768, SAMPLE_RATE
    if response_format in ("opus", "aac"):
        decoded = decode_audio(data)
        assert decoded.channels == 1
        return decoded.samples, decoded.sample_rate
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    return audio, rate


ENCODED_RATES = {"opus": 48000}
"""Ogg Opus decodes at 48 kHz whatever it was encoded at (24 kHz for a 22,050 Hz voice)."""


@pytest.mark.parametrize("response_format", ["mp3", "flac", "wav", "pcm", "opus", "aac"])
def test_openai_client_gets_playable_audio_in_each_offered_format(
    openai_client: openai.OpenAI, response_format: str
) -> None:
    response = openai_client.audio.speech.create(
        model="tts-1",
        voice="alloy",
        input=SENTENCE,
        response_format=response_format,  # type: ignore[arg-type]
    )
    audio, rate = decode(response.content, response_format)
    assert rate == ENCODED_RATES.get(response_format, SAMPLE_RATE)
    duration = audio.shape[0] / rate
    assert 2.0 < duration < 8.0, duration
    assert np.sqrt(np.mean(audio**2)) > 0.01  # speech, not silence


ONE_PART = "A short answer stays whole."
"""Too short to cut for a first clause (:func:`tts_core.text.first_part.first_cuts`): one part."""

MP3_ENCODER_DELAY_MAX: Final = 2 * 1152
"""Samples an MP3 stream may start with before the audio (the encoder's delay): a stored file's
Xing/LAME header tells decoders to skip them, a streamed answer cannot patch that header in."""


def test_the_speech_job_is_a_job_like_any_other(openai_client: openai.OpenAI, client: httpx.Client) -> None:
    """The answer and the stored object come from the same encoder: a one-part answer is the same
    bytes; a streamed answer (cut at its first clause) is the same MP3 frames, so it decodes to the
    very samples of the stored file, behind only the encoder's delay its header could not name."""
    for text, streamed in ((ONE_PART, False), (SENTENCE, True)):
        raw = openai_client.audio.speech.with_raw_response.create(model="tts-1", voice="nova", input=text)
        job = wait_for_job(client, raw.headers["x-ttsq-job-id"])
        assert job["status"] == "succeeded"
        assert job["priority"] == "interactive"
        assert job["format"] == "mp3"
        assert (job["progress"]["segments_total"] > 1) is streamed
        stored = httpx.get(job["result"]["url"]).content
        if not streamed:
            assert stored == raw.content  # the same encoder, the same bytes
            continue
        assert len(stored) == len(raw.content)  # the same frames; only the Xing header differs
        heard, kept = decode_audio(raw.content).samples, decode_audio(stored).samples
        delay = next(
            (at for at in range(MP3_ENCODER_DELAY_MAX + 1) if np.array_equal(heard[at : at + kept.size], kept)), None
        )
        assert delay is not None, "the streamed MP3 does not decode to the stored file's samples"
        assert np.abs(heard[:delay]).max(initial=0) < 0.01  # the delay is silence, not audio


def test_long_input_streams_segments_in_order(
    openai_client: openai.OpenAI, client: httpx.Client, redis_client: redis.Redis
) -> None:
    """A multi-segment text arrives in several chunks, and the streamed WAV holds what the job stored;
    the parts it was streamed from are deleted once sent."""
    text = TWO_SEGMENTS
    chunks: list[bytes] = []
    with openai_client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=text, response_format="wav"
    ) as response:
        job_id = response.headers["x-ttsq-job-id"]
        chunks.extend(response.iter_bytes())
    streamed = b"".join(chunks)
    job = wait_for_job(client, job_id)
    assert job["progress"]["segments_total"] > 1
    pcm_streamed = np.frombuffer(streamed[44:], dtype="<i2")
    stored, rate = soundfile.read(io.BytesIO(httpx.get(job["result"]["url"]).content), dtype="int16")
    assert rate == SAMPLE_RATE
    assert np.array_equal(pcm_streamed, stored)
    assert job["status"] == "succeeded"
    assert not list(redis_client.scan_iter(f"ttsq:job:{job_id}:part:*")), "parts left after they were sent"


def test_keep_false_streams_without_storing(openai_client: openai.OpenAI, client: httpx.Client) -> None:
    raw = openai_client.audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=SENTENCE, response_format="wav", extra_body={"keep": False}
    )
    assert soundfile.read(io.BytesIO(raw.content))[1] == SAMPLE_RATE
    job = wait_for_job(client, raw.headers["x-ttsq-job-id"])
    assert job["status"] == "succeeded"
    assert job["result"] is None
    assert job["progress"]["audio_s"] > 2


@pytest.mark.parametrize("response_format", ["opus", "aac"])
def test_long_input_streams_opus_and_aac_whole(
    openai_client: openai.OpenAI, client: httpx.Client, response_format: str
) -> None:
    """Streamed segment by segment, the Opus or AAC stream holds all of the stored file's audio: the
    encoder's last frames and the container's last page arrive after the last segment. A sentence is
    enough: streamed, it is two segments (its first clause, then the rest), so the stream has a part
    after the first and an end, as a longer text's has (the WAV test above streams budgeted segments)."""
    with openai_client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="alloy",
        input=SENTENCE,
        response_format=response_format,  # type: ignore[arg-type]
    ) as response:
        job_id = response.headers["x-ttsq-job-id"]
        assert response.headers["x-ttsq-sample-rate"] == ("24000" if response_format == "opus" else "22050")
        streamed = b"".join(response.iter_bytes())
    job = wait_for_job(client, job_id)
    assert job["progress"]["segments_total"] > 1
    stored = decode_audio(httpx.get(job["result"]["url"]).content)
    sent = decode_audio(streamed)
    assert sent.samples.size == stored.samples.size
    assert abs(sent.duration_s - job["result"]["duration_s"]) < 0.1
    np.testing.assert_allclose(sent.samples, stored.samples, atol=1e-3)


def test_a_format_openai_does_not_name_is_refused_by_name(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        openai_client.audio.speech.create(
            model="tts-1",
            voice="alloy",
            input=SENTENCE,
            response_format="m4a",  # type: ignore[arg-type]
        )
    assert refused.value.status_code == 422
    assert "response_format" in refused.value.response.json()["error"]["message"]


def test_unknown_voice_is_refused(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        openai_client.audio.speech.create(model="tts-1", voice="nobody-here", input=SENTENCE)
    assert refused.value.response.json()["error"]["code"] == "voice_not_found"


def test_openai_voice_names_follow_the_configured_map(settings: Settings, worker: ManagedProcess) -> None:
    mapped = settings.model_copy(update={"openai_voices": {"nova": FOLDER_VOICE_ID}})
    with serve(create_app(mapped)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="unused") as client:
        nova = client.audio.speech.with_raw_response.create(model="tts-1", voice="nova", input=ONE_PART)
        echo = client.audio.speech.with_raw_response.create(model="tts-1", voice="echo", input=ONE_PART)
        own = client.audio.speech.with_raw_response.create(
            model="tts-1", voice={"id": DEFAULT_VOICE_ID}, input=ONE_PART
        )
        voices = [httpx.get(f"{url}/v1/jobs/{r.headers['x-ttsq-job-id']}").json()["voice"] for r in (nova, echo, own)]
    assert voices == [FOLDER_VOICE_ID, DEFAULT_VOICE_ID, DEFAULT_VOICE_ID]


def test_a_boolean_speed_is_refused(client: httpx.Client) -> None:
    body = {"model": "tts-1", "input": SENTENCE, "voice": "alloy", "speed": True}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 422
    assert "speed: Input should be a valid number" in response.json()["error"]["message"]


def test_no_worker_means_a_504_naming_the_job_not_a_hang(
    idle_queue_api: IdleQueueApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(part_reader, "PART_TIMEOUT_S", 1.0)
    body = {"model": "tts-1", "input": SENTENCE, "voice": "alloy"}
    response = idle_queue_api.client.post("/v1/audio/speech", json=body, timeout=30)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "speech_timeout"
    job_id = error["message"].rsplit("/", 1)[-1]  # the message says where the job can be followed
    assert idle_queue_api.client.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"


def test_a_streamed_answer_can_keep_marks_for_a_read_along(client: httpx.Client) -> None:
    answer = client.post(
        "/v1/audio/speech",
        json={"model": "tts-1", "input": "Read along with me. Word by word.", "voice": "alloy", "marks": ["word"]},
    )
    assert answer.status_code == 200, answer.text
    job = wait_for_job(client, answer.headers["x-ttsq-job-id"])
    words = [m for m in client.get(f"/v1/jobs/{job['id']}/files/marks.json").json() if m["type"] == "word"]
    assert [w["value"] for w in words] == ["Read", "along", "with", "me", "Word", "by", "word"]
    refused = client.post(
        "/v1/audio/speech",
        json={"model": "tts-1", "input": "Gone.", "voice": "alloy", "marks": ["word"], "keep": False},
    )
    assert refused.status_code == 422
    assert "keep" in refused.json()["error"]["message"]
