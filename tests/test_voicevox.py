"""The VOICEVOX-compatible API through the real VOICEVOX client library (``vvclient``, voicevox-client
on PyPI) against the real stack: a real API in front of a real Celery worker, the facade on its own
port as ``ttsq api --voicevox-port`` serves it. vvclient has no call for ``/speakers``,
``/speaker_info``, ``/engine_manifest``, ``/supported_devices``, ``/multi_synthesis``,
``/cancellable_synthesis``, ``/connect_waves`` nor ``/accent_phrases``: those go through httpx."""

from __future__ import annotations

import asyncio
import base64
import io
import math
import os
import signal
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest
import redis
import soundfile
import vvclient
from pydantic import SecretStr
from vvclient.errors import HTTPException as VoicevoxHTTPError

from api.main import create_app, voicevox_app
from api.voicevox.models import AudioQuery
from api.voicevox.queries import spoken_text
from api.voicevox.speakers import SPEAKER_NAMESPACE, Style, speakers_of
from api.voicevox.synthesis import Rendering, job_request, render
from api.voicevox.waves import wav_bytes
from cli.commands import api_argv
from cli.processes import ManagedProcess, free_ports, wait_until
from tests.conftest import serve, wait_for
from tests.test_jobs_api import job_keys
from tests.voices import BROKEN_VOICE_ID, MULTI_SPEAKER_VOICE_ID
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.kokoro import front_end as kokoro_front_end
from tts_core.voices.kokoro import vocab
from tts_core.voices.kokoro_package import data_dir as kokoro_data_dir
from ttsq.settings import Settings, settings_env
from ttsq.tenants import Limits, TenantStore

JAPANESE = "ja_JP-kokoro-jf_alpha"
JA_TEXT = "今日は良い天気ですね。散歩に行きましょう。"
EN_TEXT = "Hello from the VOICEVOX compatible facade."
LONG_JA = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。" * 3
MAX_CHARS = 400
"""The facade's servers here take at most this many characters, so the limit can be passed."""
MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""Bodies of WAVs for /connect_waves (the limit derived from MAX_CHARS would be 70 KB)."""


@dataclass(frozen=True)
class Facade:
    main_url: str
    """The main API, the facade under /voicevox."""
    url: str
    """The facade at the root of its own port."""


def new_jobs(redis_client: redis.Redis, before: set[bytes]) -> set[str]:
    """Ids of jobs whose keys were not there ``before`` (keys of jobs that were there may come and go
    as those jobs finish)."""
    known = {key.decode().split(":")[2] for key in before}
    return {key.decode().split(":")[2] for key in job_keys(redis_client)} - known


@pytest.fixture(scope="module")
def facade(settings: Settings, worker: ManagedProcess) -> Iterator[Facade]:
    app = create_app(settings.model_copy(update={"max_text_chars": MAX_CHARS, "max_request_bytes": MAX_REQUEST_BYTES}))
    with serve(app) as main_url, serve(voicevox_app(app)) as url:
        yield Facade(main_url, url)


@pytest.fixture
def http(facade: Facade) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=facade.url, timeout=120) as client:
        yield client


def vv(facade: Facade, call: Any) -> Any:
    """Run one coroutine with a fresh vvclient client (aiohttp wants its own loop per test)."""

    async def run() -> Any:
        async with vvclient.Client(facade.url) as client:
            return await call(client)

    return asyncio.run(run())


def style_of(http: httpx.Client, voice_id: str, index: int = 0) -> int:
    speaker = next(s for s in http.get("/speakers").json() if s["name"] == voice_id)
    return int(speaker["styles"][index]["id"])


def read_wav(data: bytes) -> tuple[np.ndarray, int]:
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return audio, int(rate)


def rms_db(audio: np.ndarray) -> float:
    return 20 * math.log10(float(np.sqrt(np.mean(audio**2))))


def synthesize(facade: Facade, text: str, style: int, **changes: Any) -> tuple[np.ndarray, int]:
    async def call(client: vvclient.Client) -> bytes:
        query = await client.create_audio_query(text, style)
        query.data.update(changes)
        wav: bytes = await query.synthesis(style)
        return wav

    return read_wav(vv(facade, call))


# --- Speakers and the engine ------------------------------------------------------------------


def test_every_voice_is_a_speaker_with_stable_ids(http: httpx.Client, settings: Settings) -> None:
    speakers = {s["name"]: s for s in http.get("/speakers").json()}
    catalog = VoiceCatalog.discover(settings.voices_dir)
    assert set(speakers) == set(catalog.ids())
    for name, speaker in speakers.items():
        assert speaker["speaker_uuid"] == str(uuid.uuid5(SPEAKER_NAMESPACE, name))
    twins = speakers[MULTI_SPEAKER_VOICE_ID]["styles"]
    assert [s["name"] for s in twins] == ["brisk", "slow"]
    ids = [style["id"] for s in speakers.values() for style in s["styles"]]
    assert len(set(ids)) == len(ids)
    assert all(0 <= i < 2**31 for i in ids)
    # Another voice more or less changes no id: the ids of a catalog of two voices are the same.
    few = VoiceCatalog({v: catalog.get(v) for v in (JAPANESE, DEFAULT_VOICE_ID)})
    assert {s.voice.id: s.styles[0].id for s in speakers_of(few)} == {
        v: speakers[v]["styles"][0]["id"] for v in (JAPANESE, DEFAULT_VOICE_ID)
    }


def test_speaker_info_and_an_unknown_speaker_uuid(http: httpx.Client) -> None:
    speaker = http.get("/speakers").json()[0]
    info = http.get("/speaker_info", params={"speaker_uuid": speaker["speaker_uuid"]})
    assert info.status_code == 200
    assert [s["id"] for s in info.json()["style_infos"]] == [s["id"] for s in speaker["styles"]]
    missing = http.get("/speaker_info", params={"speaker_uuid": str(uuid.uuid4())})
    assert missing.status_code == 404
    assert "no speaker" in missing.json()["detail"]


def test_version_cores_manifest_and_devices(facade: Facade, http: httpx.Client) -> None:
    assert vv(facade, lambda c: c.fetch_engine_version()) == "0.1.0"
    assert vv(facade, lambda c: c.fetch_core_versions()) == ["0.1.0"]
    features = http.get("/engine_manifest").json()["supported_features"]
    assert features["adjust_speed_scale"]
    assert not features["adjust_pitch_scale"]
    assert set(http.get("/supported_devices").json()) == {"cpu", "cuda", "dml"}


def test_the_facade_is_mounted_under_voicevox_on_the_main_api(facade: Facade) -> None:
    response = httpx.get(f"{facade.main_url}/voicevox/speakers", timeout=30)
    assert response.status_code == 200
    assert any(s["name"] == JAPANESE for s in response.json())


def test_initialize_speaker_loads_the_voice_with_a_job(facade: Facade, http: httpx.Client) -> None:
    style = style_of(http, MULTI_SPEAKER_VOICE_ID, 1)
    assert vv(facade, lambda c: c.is_inited_speaker(style)) is False
    vv(facade, lambda c: c.init_speaker(style))
    assert vv(facade, lambda c: c.is_inited_speaker(style)) is True


# --- audio_query and synthesis ----------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_ja(facade: Facade) -> tuple[dict[str, Any], np.ndarray, int]:
    """JA_TEXT through vvclient with the default query: the query and its audio, made once for the
    round trip and for the tests that change settings against it (Kokoro gives the same audio for
    the same text, so lengths and levels compare)."""
    with httpx.Client(base_url=facade.url, timeout=120) as http:
        style = style_of(http, JAPANESE)

    async def call(client: vvclient.Client) -> tuple[dict[str, Any], bytes]:
        query = await client.create_audio_query(JA_TEXT, style)
        return query.data, await query.synthesis(style)

    query, wav = vv(facade, call)
    audio, rate = read_wav(wav)
    return query, audio, rate


def test_japanese_round_trip(plain_ja: tuple[dict[str, Any], np.ndarray, int]) -> None:
    query, audio, rate = plain_ja
    moras = [m for p in query["accent_phrases"] for m in p["moras"]]
    assert len(moras) > 15
    assert all(m["vowel"] for m in moras)
    assert rate == 24000 == query["outputSamplingRate"]
    assert 1.5 < audio.shape[0] / rate < 8
    assert rms_db(audio) > -40  # speech, not silence


def test_english_round_trip(facade: Facade, http: httpx.Client) -> None:
    style = style_of(http, DEFAULT_VOICE_ID)

    async def call(client: vvclient.Client) -> tuple[dict[str, Any], bytes]:
        query = await client.create_audio_query(EN_TEXT, style)
        return query.data, await query.synthesis(style)

    query, wav = vv(facade, call)
    assert query["kana"] == EN_TEXT
    assert query["accent_phrases"] == []
    audio, rate = read_wav(wav)
    assert rate == 22050
    assert 1.5 < audio.shape[0] / rate < 8
    assert rms_db(audio) > -40


def energy_db(audio: np.ndarray, rate: int) -> float:
    """Energy per second of the first channel: the same for a signal at any sampling rate."""
    return 10 * math.log10(float(np.sum(audio[:, 0].astype(np.float64) ** 2)) / rate)


def test_speed_scale_shortens_the_audio(
    facade: Facade, http: httpx.Client, plain_ja: tuple[dict[str, Any], np.ndarray, int]
) -> None:
    _, base, rate = plain_ja
    edge = round(0.1 * rate)  # the default pre- and post-phoneme silence, digital zeros
    normal = base[edge:-edge]
    fast, _ = synthesize(
        facade, JA_TEXT, style_of(http, JAPANESE), speedScale=1.5, prePhonemeLength=0.0, postPhonemeLength=0.0
    )
    assert 1.4 <= normal.shape[0] / fast.shape[0] <= 1.6


def test_a_query_s_volume_rate_channels_edges_and_unapplied_settings_reach_the_wav(
    http: httpx.Client, plain_ja: tuple[dict[str, Any], np.ndarray, int]
) -> None:
    """One query with every setting changed that the job or the facade applies, speed aside (above),
    and two it does not apply: each shows in the answer (their variants: the unit tests below)."""
    query, base, rate = plain_ja
    changed = query | {
        "volumeScale": 0.5,
        "outputSamplingRate": 48000,
        "outputStereo": True,
        "prePhonemeLength": 1.0,
        "postPhonemeLength": 0.5,
        "pitchScale": 0.1,
        "intonationScale": 1.5,
    }
    answer = http.post("/synthesis", params={"speaker": style_of(http, JAPANESE)}, json=changed)
    assert answer.status_code == 200, answer.text[:500]
    assert answer.headers["x-ttsq-not-applied"] == "pitchScale, intonationScale"
    audio, out_rate = read_wav(answer.content)
    assert out_rate == 48000
    assert audio.shape[1] == 2
    assert np.array_equal(audio[:, 0], audio[:, 1])
    assert audio.shape[0] / out_rate == pytest.approx(base.shape[0] / rate + 1.3, abs=0.01)  # defaults: 0.1 each
    lead = audio[: round(0.95 * out_rate)]  # a second of silence before the speech; resampled, an LSB
    assert np.abs(lead).max() <= 1 / 32768, np.abs(lead).max()  # of ringing (digital zeros: the unit test)
    assert energy_db(base, rate) - energy_db(audio, out_rate) == pytest.approx(6.02, abs=0.5)


def a_query(**changes: Any) -> AudioQuery:
    """A default query of one accent phrase ("ネコ"), as plain data."""
    moras = [
        {"text": "ネ", "consonant": "n", "consonant_length": 0.05, "vowel": "e", "vowel_length": 0.1, "pitch": 5.0},
        {"text": "コ", "consonant": "k", "consonant_length": 0.05, "vowel": "o", "vowel_length": 0.1, "pitch": 5.0},
    ]
    fields: dict[str, Any] = {
        "accent_phrases": [{"moras": moras, "accent": 1}],
        "speedScale": 1.0,
        "pitchScale": 0.0,
        "intonationScale": 1.0,
        "volumeScale": 1.0,
        "prePhonemeLength": 0.1,
        "postPhonemeLength": 0.1,
        "outputSamplingRate": 24000,
        "outputStereo": False,
    }
    return AudioQuery.model_validate(fields | changes)


def japanese_style() -> Style:
    return Style(1, "normal", VoiceCatalog.discover().get(JAPANESE), None)


def test_a_query_s_settings_become_the_job_s_and_the_rendering_s() -> None:
    """speedScale and volumeScale go to the job (volume in dB; 0 and 1 as none), the rest to the
    rendering; only pitchScale and intonationScale given other than their defaults are named."""
    style = japanese_style()
    plain, rendering = job_request(a_query(), style, 0.4, ("body",))
    assert (plain.text, plain.voice, plain.speed, plain.volume_db) == ("ネコ。", JAPANESE, 1.0, None)
    assert rendering == Rendering(0.1, 0.1, 24000, False, False, ())
    half, half_rendering = job_request(a_query(volumeScale=0.5, speedScale=1.5), style, 0.4, ("body",))
    assert half.volume_db == pytest.approx(-6.02, abs=0.01)
    assert half.speed == 1.5
    assert not half_rendering.silent
    silent, silent_rendering = job_request(a_query(volumeScale=0), style, 0.4, ("body",))
    assert silent.volume_db is None
    assert silent_rendering.silent
    _, pitched = job_request(a_query(pitchScale=0.1, intonationScale=1.5), style, 0.4, ("body",))
    assert pitched.not_applied == ("pitchScale", "intonationScale")
    _, intoned = job_request(a_query(intonationScale=0.5), style, 0.4, ("body",))
    assert intoned.not_applied == ("intonationScale",)


def test_the_rendering_adds_edges_resamples_doubles_channels_and_silences() -> None:
    speech = (np.sin(np.arange(24000) / 5) * 8000).astype(np.int16)
    plain, rate = read_wav(render(speech, 24000, Rendering()))
    assert rate == 24000
    assert np.array_equal(np.round(plain[:, 0] * 32768).astype(np.int16), speech)
    padded, _ = read_wav(render(speech, 24000, Rendering(pre_s=1.0, post_s=0.5)))
    assert padded.shape[0] == 24000 + 36000
    assert not padded[:24000].any()
    assert not padded[-12000:].any()
    high, high_rate = read_wav(render(speech, 24000, Rendering(rate=48000, stereo=True)))
    assert high_rate == 48000
    assert high.shape[1] == 2
    assert abs(high.shape[0] - 48000) <= 2
    assert np.array_equal(high[:, 0], high[:, 1])
    assert rms_db(high) == pytest.approx(rms_db(plain), abs=0.1)
    silent, _ = read_wav(render(speech, 24000, Rendering(silent=True)))
    assert silent.shape == plain.shape
    assert not silent.any()


def test_edited_mora_text_is_spoken(facade: Facade, http: httpx.Client) -> None:
    """The job speaks the moras' katakana: more moras, longer audio."""
    style = style_of(http, JAPANESE)
    query = http.post("/audio_query", params={"text": "ねこ", "speaker": style}).json()
    short = read_wav(http.post("/synthesis", params={"speaker": style}, json=query).content)[0]
    phrase = query["accent_phrases"][0]
    phrase["moras"] = phrase["moras"] * 4
    long = read_wav(http.post("/synthesis", params={"speaker": style}, json=query).content)[0]
    assert long.shape[0] > 1.8 * short.shape[0]


def test_multi_synthesis_answers_a_zip_of_wavs(http: httpx.Client) -> None:
    style = style_of(http, JAPANESE)
    queries = [http.post("/audio_query", params={"text": t, "speaker": style}).json() for t in ("はい。", "いいえ。")]
    response = http.post("/multi_synthesis", params={"speaker": style}, json=queries)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.namelist() == ["001.wav", "002.wav"]
    for name in archive.namelist():
        audio, rate = read_wav(archive.read(name))
        assert rate == 24000
        assert audio.shape[0] > 0.3 * rate


def test_a_job_failing_in_multi_synthesis_is_answered_in_voicevox_shape(http: httpx.Client) -> None:
    """The broken voice fails on "θ" (think) inside its model: the job fails after it was accepted."""
    style = style_of(http, BROKEN_VOICE_ID)
    queries = [
        http.post("/audio_query", params={"text": t, "speaker": style}).json() for t in ("Hello.", "I think so.")
    ]
    response = http.post("/multi_synthesis", params={"speaker": style}, json=queries)
    assert response.status_code == 500
    assert isinstance(response.json()["detail"], str)
    assert response.json()["detail"] != "internal error; the server's log has the details"  # the job's own error


def test_connect_waves_joins_and_refuses_mismatches(http: httpx.Client) -> None:
    """Waves as /synthesis writes them (``wav_bytes``), made here: joining needs no job."""
    pcm = (np.sin(np.arange(12000) / 7) * 6000).astype(np.int16)
    wav, wav48 = wav_bytes(pcm, 24000, False), wav_bytes(pcm, 48000, False)
    one = base64.b64encode(wav).decode()
    joined = http.post("/connect_waves", json=[one, one])
    assert joined.status_code == 200
    joined_audio, joined_rate = read_wav(joined.content)
    assert joined_rate == 24000
    assert np.array_equal(np.round(joined_audio[:, 0] * 32768).astype(np.int16), np.concatenate([pcm, pcm]))
    mismatched = http.post("/connect_waves", json=[one, base64.b64encode(wav48).decode()])
    assert mismatched.status_code == 422
    assert mismatched.json()["detail"][0]["loc"] == ["body", 1]
    garbage = http.post("/connect_waves", json=[one, base64.b64encode(b"not a wave at all").decode()])
    assert garbage.status_code == 422
    assert garbage.json()["detail"][0]["type"] == "value_error.wave_invalid"


def gsm_wave(seconds: float) -> str:
    """A base64 GSM 6.10 WAV of noise (8 kHz): about a tenth of its decoded size."""
    out = io.BytesIO()
    noise = np.random.default_rng(7).uniform(-0.5, 0.5, round(seconds * 8000))
    soundfile.write(out, noise, 8000, format="WAV", subtype="GSM610")
    return base64.b64encode(out.getvalue()).decode()


def test_connect_waves_refuses_waves_that_decode_past_the_body_cap(http: httpx.Client) -> None:
    """A compressed wave may decode to no more than the body cap, as an uncompressed one could be;
    so may the waves of one request together."""
    long_one = gsm_wave(400)  # 6.4 MB decoded from 650 KB of GSM
    assert len(long_one) < MAX_REQUEST_BYTES < 400 * 8000 * 2
    two = gsm_wave(200)  # each 3.2 MB decoded: together over the cap
    for waves, index in [([long_one], 0), ([two, two], 1)]:
        refused = http.post("/connect_waves", json=waves)
        assert refused.status_code == 422, refused.headers
        (detail,) = refused.json()["detail"]
        assert (detail["loc"], detail["type"]) == (["body", index], "value_error.wave_too_long")
        assert f"at most {MAX_REQUEST_BYTES} bytes (max_request_bytes)" in detail["msg"]
    joined = http.post("/connect_waves", json=[gsm_wave(60)])  # 960 KB decoded: under the cap
    assert joined.status_code == 200
    assert read_wav(joined.content)[0].shape[0] == 60 * 8000


def test_a_client_that_disconnects_cancels_its_job(
    facade: Facade, http: httpx.Client, redis_client: redis.Redis
) -> None:
    style = style_of(http, JAPANESE)
    query = http.post("/audio_query", params={"text": LONG_JA, "speaker": style}).json()
    before = job_keys(redis_client)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{facade.url}/cancellable_synthesis",
            params={"speaker": style},
            json=query,
            timeout=httpx.Timeout(30, read=2.5),  # gone long before nine sentences are spoken
        )
    made = wait_for(
        lambda: {k.decode().split(":")[2] for k in job_keys(redis_client) - before},
        lambda ids: len(ids) >= 1,
        10,
        "the request's job to be stored",
    )
    (job_id,) = made
    job = wait_for(
        lambda: httpx.get(f"{facade.main_url}/v1/jobs/{job_id}", timeout=10).json(),
        lambda j: j["status"] in ("canceled", "succeeded", "failed"),
        30,
        "the job to end",
    )
    assert job["status"] == "canceled"


# --- Bad input ---------------------------------------------------------------------------------


def bad_queries(http: httpx.Client) -> list[tuple[str, dict[str, Any], list[Any]]]:
    style = style_of(http, JAPANESE)
    query = http.post("/audio_query", params={"text": "はい。", "speaker": style}).json()
    missing = {k: v for k, v in query.items() if k != "speedScale"}
    return [
        ("missing field", missing, ["body", "speedScale"]),
        ("negative length", query | {"prePhonemeLength": -0.1}, ["body", "prePhonemeLength"]),
        ("negative mora length", _with_mora(query, vowel_length=-1.0), ["body", "accent_phrases", 0, "moras", 0]),
        ("absurd rate", query | {"outputSamplingRate": 1_000_000}, ["body", "outputSamplingRate"]),
        ("volume out of range", query | {"volumeScale": 100.0}, ["body", "volumeScale"]),
        ("speed out of range", query | {"speedScale": 0.0}, ["body", "speedScale"]),
        ("nothing to speak", query | {"accent_phrases": []}, ["body", "accent_phrases"]),
    ]


def _with_mora(query: dict[str, Any], **changes: Any) -> dict[str, Any]:
    copy: dict[str, Any] = {**query, "accent_phrases": [dict(p) for p in query["accent_phrases"]]}
    copy["accent_phrases"][0]["moras"] = [{**copy["accent_phrases"][0]["moras"][0], **changes}]
    return copy


def test_bad_queries_are_refused_in_voicevox_shape_with_no_job(http: httpx.Client, redis_client: redis.Redis) -> None:
    style = style_of(http, JAPANESE)
    good = http.post("/audio_query", params={"text": "はい。", "speaker": style}).json()
    for name, query, loc in bad_queries(http):
        before = job_keys(redis_client)
        for path in ("/synthesis", "/cancellable_synthesis"):
            response = http.post(path, params={"speaker": style}, json=query)
            assert response.status_code == 422, (name, response.text)
            assert response.json()["detail"][0]["loc"][: len(loc)] == loc, name
        several = http.post("/multi_synthesis", params={"speaker": style}, json=[good, query])
        assert several.status_code == 422
        assert several.json()["detail"][0]["loc"][:2] == ["body", 1], name
        assert not new_jobs(redis_client, before), name


def test_nan_is_refused(http: httpx.Client, redis_client: redis.Redis) -> None:
    style = style_of(http, JAPANESE)
    query = http.post("/audio_query", params={"text": "はい。", "speaker": style}).json()
    before = job_keys(redis_client)
    body = httpx.Request("POST", "/", json=query | {"speedScale": 12345.5}).content.replace(b"12345.5", b"NaN")
    response = http.post(
        "/synthesis", params={"speaker": style}, content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "speedScale"]
    assert not new_jobs(redis_client, before)


def test_bad_speakers_and_texts_through_the_client(
    facade: Facade, http: httpx.Client, redis_client: redis.Redis
) -> None:
    ja = style_of(http, JAPANESE)
    unknown = max(s["id"] for sp in http.get("/speakers").json() for s in sp["styles"]) + 1
    before = job_keys(redis_client)
    cases = [
        (EN_TEXT, unknown, ["query", "speaker"], "style_not_found"),
        ("Only English words here.", ja, ["query", "text"], "unsupported_text"),
        ("あ" * (MAX_CHARS + 1), ja, ["query", "text"], "text_too_long"),
    ]
    for text, style, loc, kind in cases:
        with pytest.raises(VoicevoxHTTPError) as raised:
            vv(facade, lambda c, t=text, s=style: c.create_audio_query(t, s))
        assert raised.value.status_code == 422
        error = httpx.Response(422, content=raised.value.message).json()["detail"][0]
        assert (error["loc"], error["type"]) == (loc, kind)
    query = http.post("/audio_query", params={"text": "はい。", "speaker": ja}).json()
    refused = http.post("/synthesis", params={"speaker": unknown}, json=query)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["query", "speaker"]
    assert not new_jobs(redis_client, before)


# --- Authentication ----------------------------------------------------------------------------


def test_keys_and_the_facade_key_for_clients_without_headers(settings: Settings, redis_client: redis.Redis) -> None:
    key, _ = TenantStore(redis_client).create("voicevox-test", Limits())
    strict = settings.model_copy(update={"auth_required": True})
    with serve(voicevox_app_of(strict)) as url:
        assert httpx.get(f"{url}/speakers").status_code == 401
        assert httpx.get(f"{url}/speakers", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    with serve(voicevox_app_of(strict.model_copy(update={"voicevox_api_key": SecretStr(key)}))) as url:
        assert httpx.get(f"{url}/speakers").status_code == 200
        wrong = httpx.get(f"{url}/speakers", headers={"Authorization": "Bearer ttsq_wrong"})
        assert wrong.status_code == 401
        assert "unknown" in wrong.json()["detail"]


def voicevox_app_of(settings: Settings) -> Any:
    """A main app served in the background only for its state, answering through its facade."""
    return _Started(create_app(settings))


class _Started:
    """ASGI app that starts the main app's lifespan (its state) and answers with its facade."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        await voicevox_app(self.app)(scope, receive, send)


# --- ttsq api --voicevox-port --------------------------------------------------------------------


def test_ttsq_api_serves_the_facade_on_its_own_port_too(
    settings: Settings, worker: ManagedProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """One process, two servers: /speakers at the root of the second port, and under /voicevox on the
    first; SIGTERM stops both."""
    port, voicevox_port = free_ports(2)
    env = {**os.environ, **settings_env(settings)}
    log_path = tmp_path_factory.mktemp("voicevox-api") / "api.log"
    process = ManagedProcess("voicevox-api", api_argv("127.0.0.1", port, voicevox_port), log_path, env).start()
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{voicevox_port}/version").status_code == 200, 60, "facade", process
        )
        root = httpx.get(f"http://127.0.0.1:{voicevox_port}/speakers", timeout=10).json()
        mounted = httpx.get(f"http://127.0.0.1:{port}/voicevox/speakers", timeout=10).json()
        assert root == mounted
        assert any(s["name"] == JAPANESE for s in root)
        process.kill(signal.SIGTERM)
        wait_until(lambda: process.returncode is not None, 15, "the API to stop")
        # uvicorn raises the signal again once it has stopped (as a plain ``ttsq api`` does)
        assert process.returncode in (0, -signal.SIGTERM)
        assert log_path.read_text().count("Finished server process") == 2  # both servers shut down
    finally:
        process.stop()


def sounds(readings: list[list[int]]) -> list[int]:
    """The Kokoro tokens of the readings without pads and word spaces (the query's katakana is
    spaced by accent phrase)."""
    folder = kokoro_data_dir()
    assert folder is not None
    space = vocab(folder)[" "]
    return [t for ids in readings for t in ids if t not in (0, space)]


def contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i : i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def test_a_user_dictionary_word_changes_the_query_the_tokens_and_the_audio(facade: Facade, http: httpx.Client) -> None:
    """Added through the VOICEVOX API, a word is read so by the query a VOICEVOX client then
    synthesises: in its moras, in the Kokoro tokens the model receives, and in the audio's length."""
    style = style_of(http, JAPANESE)
    voice = VoiceCatalog.discover().get(JAPANESE)
    text = "小鳥遊さん。"

    async def call(client: vvclient.Client) -> tuple[dict[str, Any], bytes]:
        query = await client.create_audio_query(text, style)
        return query.data, await query.synthesis(style)

    before, before_wav = vv(facade, call)
    added = http.post(
        "/user_dict_word", params={"surface": "小鳥遊", "pronunciation": "コトリアソビ", "accent_type": 3}
    )
    assert added.status_code == 200, added.text
    try:
        after, after_wav = vv(facade, call)
    finally:
        assert http.delete(f"/user_dict_word/{added.json()}").status_code == 204
    assert "コトリアソビ" in "".join(m["text"] for p in after["accent_phrases"] for m in p["moras"])
    assert "コトリアソビ" not in "".join(m["text"] for p in before["accent_phrases"] for m in p["moras"])
    reader = kokoro_front_end(kokoro_data_dir())
    word = sounds(reader.phoneme_ids("コトリアソビ"))
    assert contains(sounds(reader.phoneme_ids(spoken_text(AudioQuery.model_validate(after), voice))), word)
    assert not contains(sounds(reader.phoneme_ids(spoken_text(AudioQuery.model_validate(before), voice))), word)
    assert read_wav(after_wav)[0].shape[0] > read_wav(before_wav)[0].shape[0]  # コトリアソビ is longer than タカナシ
