"""The API, worker, Redis and S3 together: what a user submits, sees and downloads."""

from __future__ import annotations

import re
import uuid
from typing import Any, Final

import boto3
import httpx
import numpy as np
import pytest
import redis
from botocore.exceptions import ClientError
from mypy_boto3_s3 import S3Client

from bench.audio_decoding import decode as decode_audio
from tests.conftest import FOLDER_VOICE_ID, TEST_BUCKET, IdleQueueApi, wait_for_job
from tests.test_japanese import JAPANESE_VOICE_IDS
from tests.test_segment_jobs import NEARLY_FULL
from tests.voices import BROKEN_VOICE_ID, MULTI_SPEAKER_VOICE_ID
from tts_core.voices.catalog import DEFAULT_VOICE_ID
from ttsq.settings import Settings

HELLO: Final = "Hello from every format."
"""Four words: each format and rate needs a job of its own, not a long one (about two seconds of
speech, long enough for the duration and loudness checks and for a bit rate to show in a file's size)."""


def job_keys(redis_client: redis.Redis) -> set[bytes]:
    return set(redis_client.scan_iter("ttsq:job:*"))


@pytest.mark.parametrize(
    ("audio_format", "content_type"),
    [
        ("wav", "audio/wav"),
        ("flac", "audio/flac"),
        ("ogg", "audio/ogg"),
        ("mp3", "audio/mpeg"),
        ("opus", "audio/ogg"),
        ("aac", "audio/aac"),
        ("m4a", "audio/mp4"),
    ],
)
def test_job_succeeds_in_every_format(
    client: httpx.Client, s3_client: S3Client, audio_format: str, content_type: str
) -> None:
    response = client.post("/v1/jobs", json={"text": HELLO, "format": audio_format, "metadata": {"ref": 7}})
    assert response.status_code == 202
    job = response.json()
    assert job["status"] == "queued"
    assert uuid.UUID(job["id"]).version == 4
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert (job["voice"], job["format"], job["characters"]) == (DEFAULT_VOICE_ID, audio_format, len(HELLO))

    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["metadata"] == {"ref": 7}
    assert done["started_at"] >= done["created_at"]
    assert done["finished_at"] >= done["started_at"]
    result = done["result"]
    assert re.fullmatch(rf"anonymous/jobs/{job['id']}/[0-9a-f]{{16}}/audio\.{audio_format}", result["key"])
    assert result["content_type"] == content_type
    assert result["sample_rate"] == (24000 if audio_format == "opus" else 22050)  # Opus has no 22,050 Hz

    head = s3_client.head_object(Bucket=TEST_BUCKET, Key=result["key"])
    assert head["ContentType"] == content_type
    assert head["ContentLength"] == result["bytes"]

    download = httpx.get(result["url"])
    assert download.status_code == 200
    decoded = decode_audio(download.content)  # FFmpeg's decoders: independent of every encoder used
    assert decoded.channels == 1
    assert decoded.sample_rate == (48000 if audio_format == "opus" else 22050)  # Opus decodes at 48 kHz
    duration = decoded.duration_s
    assert 0.03 * len(HELLO) < duration < 0.15 * len(HELLO)
    # ADTS cannot say how much of its first and last frame is padding. MP4 says both (its header's
    # duration is exact), though FFmpeg's decoder through PyAV plays the last frame whole (up to 46 ms).
    tolerance = {"aac": 0.1, "m4a": 0.05}.get(audio_format, 0.03)
    assert abs(duration - result["duration_s"]) < tolerance
    if audio_format == "m4a":
        assert decoded.container_duration_s == pytest.approx(result["duration_s"], abs=0.005)
    assert float(np.sqrt(np.mean(decoded.samples**2))) > 0.02, "audio is (nearly) silent"


@pytest.mark.parametrize(
    ("audio_format", "sample_rate", "demuxer", "codec", "decoded_rate"),
    [
        ("flac", 16000, None, "flac", 16000),
        ("wav", 48000, None, "pcm_s16le", 48000),
        ("m4a", 44100, None, "aac", 44100),
        ("opus", 8000, None, "opus", 48000),  # Opus decodes at 48 kHz whatever it was encoded at
        ("mulaw", None, "mulaw", "pcm_mulaw", 8000),  # G.711: 8 kHz by default
        ("wav_alaw", 8000, None, "pcm_alaw", 8000),
    ],
)
def test_a_job_at_another_sample_rate(
    client: httpx.Client,
    audio_format: str,
    sample_rate: int | None,
    demuxer: str | None,
    codec: str,
    decoded_rate: int,
) -> None:
    body: dict[str, Any] = {"text": HELLO, "format": audio_format}
    if sample_rate is not None:
        body["sample_rate"] = sample_rate
    job = client.post("/v1/jobs", json=body).json()
    assert job["options"]["sample_rate"] == sample_rate
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["result"]["sample_rate"] == (sample_rate or 8000)
    decoded = decode_audio(httpx.get(done["result"]["url"]).content, demuxer=demuxer, sample_rate=8000)
    assert (decoded.codec, decoded.sample_rate, decoded.channels) == (codec, decoded_rate, 1)
    assert abs(decoded.duration_s - done["result"]["duration_s"]) < 0.03
    assert float(np.sqrt(np.mean(decoded.samples**2))) > 0.02, "audio is (nearly) silent"


def test_a_long_job_is_resampled_once_across_its_segments(client: httpx.Client) -> None:
    """Assembled part by part through one resampler (tests/test_formats.py: the same samples as the
    whole resampled at once): the file is at the rate asked for and as long as the speech."""
    two_segments = f"Here we go. {NEARLY_FULL}"  # the long sentence fits no other in its segment
    job = client.post("/v1/jobs", json={"text": two_segments, "format": "wav", "sample_rate": 16000}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["segments_total"] > 1
    decoded = decode_audio(httpx.get(done["result"]["url"]).content)
    assert decoded.sample_rate == done["result"]["sample_rate"] == 16000
    assert abs(decoded.duration_s - done["result"]["duration_s"]) < 0.01
    assert done["result"]["duration_s"] == pytest.approx(done["progress"]["audio_s"], abs=0.01)


def test_bitrate_sets_the_size_of_an_opus_file(client: httpx.Client) -> None:
    sizes = {}
    for bitrate in (12_000, 96_000):
        job = client.post("/v1/jobs", json={"text": HELLO, "format": "opus", "bitrate": bitrate}).json()
        assert job["options"]["bitrate"] == bitrate
        done = wait_for_job(client, job["id"])
        assert done["status"] == "succeeded", done["error"]
        decoded = decode_audio(httpx.get(done["result"]["url"]).content)
        assert abs(decoded.duration_s - done["result"]["duration_s"]) < 0.03
        sizes[bitrate] = done["result"]["bytes"]
        kbits = sizes[bitrate] * 8 / done["result"]["duration_s"] / 1000
        assert kbits == pytest.approx(bitrate / 1000, rel=0.5)  # Opus is variable-rate around its target
    assert sizes[96_000] > 3 * sizes[12_000]


def test_audio_endpoint_redirects_to_the_presigned_object(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json={"text": "Short and sweet."}).json()
    done = wait_for_job(client, job["id"])
    redirect = client.get(f"/v1/jobs/{job['id']}/audio")
    assert redirect.status_code == 302
    assert redirect.headers["location"].startswith(done["result"]["url"].split("?")[0])
    audio = httpx.get(redirect.headers["location"])
    assert audio.content[:4] == b"RIFF"


def test_presigned_urls_are_required_to_read_objects(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json={"text": "Private audio."}).json()
    result = wait_for_job(client, job["id"])["result"]
    url = result["url"]
    assert httpx.get(url.split("?")[0]).status_code == 403
    forged = boto3.client(
        "s3", endpoint_url=url.split("/ttsq-test/")[0], aws_access_key_id="ttsq-dev", aws_secret_access_key="wrong",
        region_name="us-east-1",
    )  # fmt: skip
    with pytest.raises(ClientError, match="403"):
        forged.head_object(Bucket=TEST_BUCKET, Key=result["key"])


def test_speed_option_shortens_the_audio(client: httpx.Client) -> None:
    text = "The same sentence, spoken at two different speeds."
    normal, fast = (
        wait_for_job(client, client.post("/v1/jobs", json={"text": text, "speed": speed}).json()["id"])
        for speed in (1.0, 2.0)
    )
    assert fast["options"]["speed"] == 2.0
    assert fast["result"]["duration_s"] < 0.75 * normal["result"]["duration_s"]


def test_audio_of_an_unfinished_job_is_a_conflict(idle_queue_api: IdleQueueApi) -> None:
    job = idle_queue_api.client.post("/v1/jobs", json={"text": "Nobody takes this job."}).json()
    response = idle_queue_api.client.get(f"/v1/jobs/{job['id']}/audio")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "job_not_succeeded",
        "message": "job is queued; audio exists once it has succeeded",
    }


def test_voices_lists_bundled_and_folder_voices(client: httpx.Client) -> None:
    voices = client.get("/v1/voices").json()["voices"]
    joe = {
        "engine": "piper",
        "language": "en_US",
        "sample_rate": 22050,
        "quality": "medium",
        "num_speakers": 1,
        "speakers": [],
    }
    kokoro = {"engine": "kokoro", "language": "ja_JP", "sample_rate": 24000, "quality": "int8", "num_speakers": 1}
    assert voices == [
        {"id": BROKEN_VOICE_ID, **joe, "default": False},
        {"id": FOLDER_VOICE_ID, **joe, "default": False},
        {"id": DEFAULT_VOICE_ID, **joe, "default": True},
        {"id": MULTI_SPEAKER_VOICE_ID, **joe, "num_speakers": 2, "speakers": ["brisk", "slow"], "default": False},
        *({"id": voice_id, **kokoro, "speakers": [], "default": False} for voice_id in JAPANESE_VOICE_IDS),
    ]


def test_job_with_a_voice_from_the_voices_folder(client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json={"text": "A voice from the folder.", "voice": FOLDER_VOICE_ID}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    assert done["voice"] == FOLDER_VOICE_ID
    assert done["result"]["duration_s"] > 0.5


@pytest.mark.parametrize("job_id", [str(uuid.UUID(int=0x5EED)), "not-a-uuid"])
def test_unknown_job_is_404(client: httpx.Client, job_id: str) -> None:
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/audio"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"] == {"code": "job_not_found", "message": f"no job with id {job_id!r}"}


MAX_CHARS: int = Settings.model_fields["max_text_chars"].default
"""The suite's API runs with the default text limit."""

BAD_REQUESTS: list[tuple[str, dict[str, Any], int, str]] = [
    ("empty text", {"json": {"text": ""}}, 422, "text is empty"),
    ("whitespace text", {"json": {"text": "  \n\t "}}, 422, "text is empty"),
    ("punctuation only", {"json": {"text": "... !?"}}, 422, "nothing to speak"),
    ("missing text", {"json": {"voice": DEFAULT_VOICE_ID}}, 422, "text: Field required"),
    (
        "text too long",
        {"json": {"text": "a" * (MAX_CHARS + 1)}},
        413,
        f"text has {MAX_CHARS + 1} characters; the limit is {MAX_CHARS}",
    ),
    (
        "unknown voice",
        {"json": {"text": "hi", "voice": "nope"}},
        422,
        f"available voices: {BROKEN_VOICE_ID}, {FOLDER_VOICE_ID}, {DEFAULT_VOICE_ID}",
    ),
    ("unknown format", {"json": {"text": "hi", "format": "aiff"}}, 422, "format: Input should be 'wav', 'flac'"),
    ("speed too high", {"json": {"text": "hi", "speed": 10}}, 422, "speed: Input should be less than or equal to 4"),
    ("speed zero", {"json": {"text": "hi", "speed": 0}}, 422, "speed: Input should be greater than or equal to 0.25"),
    ("noise too high", {"json": {"text": "hi", "noise_scale": 3}}, 422, "noise_scale: Input should be less than"),
    ("speed a boolean", {"json": {"text": "hi", "speed": True}}, 422, "speed: Input should be a valid number"),
    ("noise a boolean", {"json": {"text": "hi", "noise_w": False}}, 422, "noise_w: Input should be a valid number"),
    ("speed a string", {"json": {"text": "hi", "speed": "1.5"}}, 422, "speed: Input should be a valid number"),
    ("priority unknown", {"json": {"text": "hi", "priority": "urgent"}}, 422, "priority: Input should be"),
    (
        "bitrate over opus's",
        {"json": {"text": "hi", "format": "opus", "bitrate": 512000}},
        422,
        "bitrate for opus is 6000 to 256000 bit/s, not 512000",
    ),
    (
        "bitrate under aac's",
        {"json": {"text": "hi", "format": "m4a", "bitrate": 8000}},
        422,
        "bitrate for m4a is 16000 to 320000 bit/s",
    ),
    (
        "bitrate for wav",
        {"json": {"text": "hi", "bitrate": 64000}},
        422,
        "bitrate applies to opus, aac, m4a, not wav",
    ),
    (
        "opus at 22050 Hz",
        {"json": {"text": "hi", "format": "opus", "sample_rate": 22050}},
        422,
        "sample_rate 22050 is not offered for opus; choose one of: 8000, 16000, 24000, 48000",
    ),
    (
        "mulaw at 16000 Hz",
        {"json": {"text": "hi", "format": "mulaw", "sample_rate": 16000}},
        422,
        "sample_rate 16000 is not offered for mulaw; choose one of: 8000",
    ),
    ("sample_rate unknown", {"json": {"text": "hi", "sample_rate": 11025}}, 422, "sample_rate: Input should be 8000"),
    ("sample_rate a boolean", {"json": {"text": "hi", "sample_rate": True}}, 422, "sample_rate: Input should be"),
    ("sample_rate a string", {"json": {"text": "hi", "sample_rate": "8000"}}, 422, "sample_rate: Input should be"),
    ("bitrate a boolean", {"json": {"text": "hi", "format": "aac", "bitrate": True}}, 422, "bitrate: Input should be"),
    ("bitrate a float", {"json": {"text": "hi", "format": "aac", "bitrate": 64000.5}}, 422, "bitrate: Input should be"),
    ("webhook not http", {"json": {"text": "hi", "webhook_url": "file:///etc/passwd"}}, 422, "must use http or https"),
    ("unknown field", {"json": {"text": "hi", "sped": 1}}, 422, "sped: Extra inputs are not permitted"),
    ("metadata not object", {"json": {"text": "hi", "metadata": [1]}}, 422, "metadata: Input should be a valid dict"),
    (
        "malformed JSON",
        {"content": b'{"text": "hi"', "headers": {"content-type": "application/json"}},
        400,
        "request body is not valid JSON",
    ),
    (
        "wrong content type",
        {"content": b"text=hi", "headers": {"content-type": "application/x-www-form-urlencoded"}},
        415,
        "Content-Type must be application/json",
    ),
]


@pytest.mark.parametrize(
    ("request_kwargs", "status", "message"), [b[1:] for b in BAD_REQUESTS], ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_input_is_refused_and_creates_no_job(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis, request_kwargs: dict[str, Any], status: int, message: str
) -> None:
    """On a queue no worker reads, so a message sent by mistake would stay there to be counted."""
    keys_before = job_keys(redis_client)
    response = idle_queue_api.client.post("/v1/jobs", **request_kwargs)
    assert response.status_code == status
    assert message in response.json()["error"]["message"]
    assert job_keys(redis_client) <= keys_before  # no new key (an earlier test's lease may lapse meanwhile)
    assert redis_client.llen(idle_queue_api.queue) == 0


def test_the_no_job_checks_can_fail(idle_queue_api: IdleQueueApi, redis_client: redis.Redis) -> None:
    """The counts the bad-input test compares do move when a request is accepted."""
    keys_before = job_keys(redis_client)
    job = idle_queue_api.client.post("/v1/jobs", json={"text": "Accepted."}).json()
    assert job_keys(redis_client) - keys_before == {
        f"ttsq:job:{job['id']}".encode(),
        f"ttsq:job:{job['id']}:text".encode(),
    }
    assert redis_client.llen(idle_queue_api.queue) == 1


def test_openapi_documents_the_job_routes(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/audio", "/v1/voices", "/healthz", "/readyz"} <= set(
        paths
    )
    assert client.get("/docs").status_code == 200
