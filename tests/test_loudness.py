"""Loudness targets through the real worker, checked with independent meters: pyloudnorm for
integrated loudness (ITU-R BS.1770-4), SciPy's polyphase resampler for true peaks, plain numpy for
ACX's RMS, peak and noise floor; and the meter and limiter themselves against the same on plain data."""

from __future__ import annotations

import io
from typing import Any, Final

import httpx
import numpy as np
import pyloudnorm
import pytest
import soundfile
from scipy.signal import butter, resample_poly, sosfilt

from tests.conftest import wait_for_job
from tests.test_batches import submit, wait_for_batch
from tests.test_segment_jobs import PARAGRAPH
from tests.test_speech_endpoint import TWO_SEGMENTS
from tts_core.mastering.level_meter import LevelSummary, measure, summary_of
from tts_core.mastering.leveling import leveling_for
from tts_core.mastering.limiter import PeakLimiter, box_mean, sliding_min
from tts_core.mastering.loudness import PRESETS, LoudnessTarget, loudness_target

SHORT = "A short answer, spoken once and leveled whole. Is it loud enough? It should be exactly right."
RATE = 22050
LAST_SENTENCE: Final = PARAGRAPH[PARAGRAPH.index("In short") :]
"""The paragraph's last sentence, about eleven seconds of speech (integrated loudness gates 400 ms
blocks: a few seconds measure as surely as more). Streamed with the default voice's calibrated gain
it lands within half a LU of where the whole paragraph does (-16.7 and -16.3 LUFS for -16), where the
first two sentences land a LU under the paragraph: the same margin to the test's bound, for under a
third of the synthesis."""


def true_peak_db(audio: np.ndarray) -> float:
    """True peak as BS.1770 Annex 2 defines it, by 8x oversampling (an independent resampler)."""
    return float(20 * np.log10(np.abs(resample_poly(audio, 8, 1)).max()))


def integrated(audio: np.ndarray, rate: int) -> float:
    return float(pyloudnorm.Meter(rate).integrated_loudness(audio))


def rms_db(audio: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(audio**2)))


def noise_floor_db(audio: np.ndarray, rate: int) -> float:
    """ACX's noise floor: the RMS of the quietest half second."""
    window = rate // 2
    sums = np.concatenate(([0.0], np.cumsum(audio**2)))
    power = (sums[window:] - sums[:-window]) / window  # each half second's mean square, in O(n)
    return float(10 * np.log10(max(power.min(), 1e-20)))


def speech_like(seconds: float, seed: int, level: float = 0.3) -> np.ndarray:
    """Bursts of noise and tones with gaps, as 16-bit PCM: levels vary and peaks stand out; below 9 kHz,
    as a voice's energy is (content at the very top of the band reads higher at 8x than any filter
    short enough for a limiter finds, by up to half a dB for white noise)."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * RATE)) / RATE
    envelope = (np.sin(2 * np.pi * 1.7 * t) > -0.2) * (0.4 + 0.6 * np.abs(np.sin(2 * np.pi * 0.31 * t)))
    signal = 0.6 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 3.1 * t) + 0.3 * rng.standard_normal(t.size)
    peaks = np.zeros_like(t)
    peaks[rng.integers(0, t.size, 40)] = 8.0
    audio: np.ndarray = sosfilt(butter(10, 9000, fs=RATE, output="sos"), envelope * (signal + peaks))
    audio *= level / np.abs(audio).max()
    pcm: np.ndarray = np.rint(audio * 32767).astype(np.int16)
    return pcm


def test_the_meter_agrees_with_pyloudnorm_and_its_pieces_add_up() -> None:
    pause = np.zeros(round(0.25 * RATE), dtype=np.int16)
    for seed, level in ((1, 0.3), (2, 0.05), (3, 0.99)):
        # as a job's segments are: speech, then the pause after its last sentence (the last one without)
        segments = [np.concatenate((speech_like(3.0 + n, seed * 10 + n, level), pause)) for n in range(3)]
        segments.append(speech_like(2.0, seed, level))
        pcm = np.concatenate(segments)
        whole = measure(pcm, RATE)
        assert whole.integrated_lufs() == pytest.approx(integrated(pcm / 32768.0, RATE), abs=0.25)
        assert whole.rms_dbfs() == pytest.approx(rms_db(pcm / 32768.0), abs=0.01)
        pieces = summary_of(measure(segment, RATE) for segment in segments)
        assert pieces.integrated_lufs() == pytest.approx(whole.integrated_lufs(), abs=0.1)
        assert pieces.rms_dbfs() == pytest.approx(whole.rms_dbfs(), abs=0.001)
        assert pieces.true_peak_db == pytest.approx(true_peak_db(pcm / 32768.0), abs=0.2)
        assert LevelSummary.from_json(pieces.to_json()) == pieces
    silent = measure(np.zeros(RATE, dtype=np.int16), RATE)
    assert silent.integrated_lufs() == float("-inf")
    assert silent.rms_dbfs() == float("-inf")
    assert PRESETS["podcast"].gain_db(silent) == 0.0  # nothing to raise: a silent job stays silent


def test_the_limiter_holds_true_peaks_and_streams_as_it_does_whole() -> None:
    pcm = speech_like(6.0, 7, 0.99)
    for gain, ceiling in ((0.0, -1.0), (9.0, -1.0), (15.0, -3.0), (-6.0, -1.0)):
        whole = PeakLimiter(gain, ceiling, RATE)
        out = np.concatenate((whole.push(pcm), whole.finish()))
        streamed = PeakLimiter(gain, ceiling, RATE)
        pieces = [streamed.push(piece) for piece in np.array_split(pcm, 29)] + [streamed.finish()]
        assert out.size == pcm.size
        np.testing.assert_array_equal(np.concatenate(pieces), out)
        assert true_peak_db(out / 32768.0) <= ceiling + 0.02
    quiet = speech_like(3.0, 8, 0.05)
    untouched = PeakLimiter(3.0, -1.0, RATE)
    scaled = np.concatenate((untouched.push(quiet), untouched.finish()))
    np.testing.assert_allclose(scaled, quiet * 10 ** (3 / 20), atol=1)  # under the ceiling: the gain alone


def test_sliding_min_and_box_mean_match_their_definitions() -> None:
    values = np.random.default_rng(3).random(1000)
    for width in (1, 2, 7, 64, 1000):
        expected = [values[i : i + width].min() for i in range(values.size - width + 1)]
        np.testing.assert_array_equal(sliding_min(values, width), expected)
        means = [values[i : i + width].mean() for i in range(values.size - width + 1)]
        np.testing.assert_allclose(box_mean(values, width), means)


def test_leveling_lands_on_the_target_even_where_the_limiter_takes_level_back() -> None:
    pause = np.zeros(round(0.25 * RATE), dtype=np.int16)
    parts = [np.concatenate((speech_like(5.0, seed, 0.4), pause)) for seed in range(4)]  # as segments end
    summary = summary_of(measure(p, RATE) for p in parts)
    targets = (PRESETS["podcast"], PRESETS["broadcast"], LoudnessTarget("lufs", -18.0, -4.0), PRESETS["audiobook"])
    for target in targets:
        leveling = leveling_for(target, summary, lambda: parts, RATE)
        limiter = PeakLimiter(leveling.gain_db, leveling.true_peak_db, RATE)
        out = np.concatenate([limiter.push(p) for p in parts] + [limiter.finish()]) / 32768.0
        measured = integrated(out, RATE) if target.measure == "lufs" else rms_db(out)
        assert measured == pytest.approx(target.level, abs=0.3), target
        assert true_peak_db(out) <= target.true_peak_db + 0.02


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"preset": "loud"}, "loudness.preset: Input should be 'podcast', 'broadcast' or 'audiobook'"),
        ({"target_lufs": -5.0}, "loudness.target_lufs: Input should be less than or equal to -10"),
        (
            {"target_lufs": -12, "true_peak_db": -3},
            "loudness: target_lufs -12 is 9 LU under its true_peak_db -3; speech needs at least 12",
        ),
        ({"target_lufs": -31}, "loudness.target_lufs: Input should be greater than or equal to -30"),
        ({"target_lufs": True}, "loudness.target_lufs: Input should be a valid number"),
        ({"target_lufs": "-16"}, "loudness.target_lufs: Input should be a valid number"),
        ({"target_lufs": -16, "true_peak_db": 1.0}, "loudness.true_peak_db: Input should be less than or equal to 0"),
        ({"true_peak_db": -2.0}, "true_peak_db goes with target_lufs"),
        ({"preset": "podcast", "target_lufs": -16}, "loudness: give either preset or target_lufs"),
        ({}, "loudness: give preset or target_lufs"),
        ({"preset": "podcast", "gain": 3}, "loudness.gain: Extra inputs are not permitted"),
    ],
)
def test_a_loudness_out_of_bounds_is_refused_with_no_job(
    client: httpx.Client, fields: dict[str, Any], message: str
) -> None:
    before = [job["id"] for job in client.get("/v1/jobs").json()["jobs"]]
    refused = client.post("/v1/jobs", json={"text": SHORT, "loudness": fields})
    assert refused.status_code == 422
    assert message in refused.json()["error"]["message"]
    both = client.post("/v1/jobs", json={"text": SHORT, "loudness": {"preset": "podcast"}, "volume_db": -3.0})
    assert both.status_code == 422
    assert "volume_db and loudness" in both.json()["error"]["message"]
    assert [job["id"] for job in client.get("/v1/jobs").json()["jobs"]] == before


def test_loudness_target_names_the_problem() -> None:
    with pytest.raises(ValueError, match=r"loudness\.preset must be one of podcast, broadcast, audiobook"):
        loudness_target("loud")
    with pytest.raises(ValueError, match=r"loudness\.true_peak_db must be within -9 to 0"):
        loudness_target(target_lufs=-16.0, true_peak_db=-12.0)
    with pytest.raises(ValueError, match=r"-10 is 6 LU under its true_peak_db -4; speech needs at least 12"):
        loudness_target(target_lufs=-10.0, true_peak_db=-4.0)
    assert loudness_target(target_lufs=-18.0) == LoudnessTarget("lufs", -18.0, -1.0)


def leveled(
    client: httpx.Client, text: str, loudness: dict[str, Any], **fields: Any
) -> tuple[np.ndarray, int, dict[str, Any]]:
    """The succeeded job's audio, its rate, and the job."""
    job = client.post("/v1/jobs", json={"text": text, "format": "wav", "loudness": loudness, **fields})
    assert job.status_code == 202, job.text
    done = wait_for_job(client, job.json()["id"])
    assert done["status"] == "succeeded", done["error"]
    audio, rate = soundfile.read(io.BytesIO(httpx.get(done["result"]["url"]).content), dtype="float64")
    return audio, rate, done


@pytest.mark.parametrize(
    ("loudness", "lufs", "ceiling", "text", "segmented"),
    [
        ({"preset": "podcast"}, -16.0, -1.0, TWO_SEGMENTS, True),  # assembled from segments
        ({"target_lufs": -13.0, "true_peak_db": -1.0}, -13.0, -1.0, SHORT, False),  # made in one
    ],
    ids=["podcast-segments", "custom-one"],
)
def test_a_job_lands_on_its_integrated_loudness_under_its_ceiling(
    client: httpx.Client, loudness: dict[str, Any], lufs: float, ceiling: float, text: str, segmented: bool
) -> None:
    """A preset on a job assembled from segments, a target of its own on a job made in one; every
    preset's leveling is checked on plain data above."""
    audio, rate, done = leveled(client, text, loudness)
    assert (done["progress"]["segments_total"] > 1) is segmented
    assert integrated(audio, rate) == pytest.approx(lufs, abs=0.5)
    assert true_peak_db(audio) <= ceiling + 0.05


def test_the_audiobook_preset_passes_acx_checks(client: httpx.Client) -> None:
    """Two paragraphs: ACX measures the noise floor in the quiet between them (the 0.6 s paragraph
    pause, digital silence). Within one paragraph every half second holds some speech (sentence
    pauses are 0.25 s), which put the quietest one at -60 dB give or take a tenth, by chance."""
    first = PARAGRAPH[: PARAGRAPH.index("It was the season")].strip()  # two sentences
    audio, rate, _ = leveled(client, f"{first}\n\n{SHORT}", {"preset": "audiobook"}, format="wav")
    assert -23.0 <= rms_db(audio) <= -18.0
    assert 20 * np.log10(np.abs(audio).max()) <= -3.0
    assert noise_floor_db(audio, rate) <= -60.0


def test_a_batch_levels_every_item_to_the_one_target(client: httpx.Client) -> None:
    """A plain item and one spoken x-loud, a sentence each (a few seconds of speech: enough to meter),
    both land on the batch's one target."""
    third = PARAGRAPH[PARAGRAPH.index("It was the season") : PARAGRAPH.index(" We had")]
    quiet, loud = (
        PARAGRAPH[: PARAGRAPH.index(" It was the epoch")],
        f"<speak><prosody volume='x-loud'>{third}</prosody></speak>",
    )
    defaults = {"format": "wav", "loudness": {"preset": "podcast"}}
    items: list[dict[str, Any]] = [{"text": quiet, "volume_db": -9.0}, {"text": loud, "text_type": "ssml"}]
    refused = client.post("/v1/batches", json={"defaults": defaults, "items": items})
    assert refused.status_code == 422
    assert "items[0]" in refused.json()["error"]["message"]  # its volume_db with the defaults' loudness
    items[0] = {"text": quiet}
    batch = submit(client, {"defaults": defaults, "items": items})
    done = wait_for_batch(client, batch["id"], lambda b: b["status"] != "running")
    levels = []
    for item in done["items"]:
        done = wait_for_job(client, item["job_id"])
        assert done["status"] == "succeeded", done["error"]
        audio, rate = soundfile.read(io.BytesIO(httpx.get(done["result"]["url"]).content), dtype="float64")
        levels.append(integrated(audio, rate))
    assert levels == pytest.approx([-16.0, -16.0], abs=0.5)


def test_the_speech_endpoint_levels_with_the_voice_calibration(client: httpx.Client) -> None:
    """Streamed audio, every part of it, is leveled by a gain calibrated once per voice: near the
    target, under the ceiling."""
    body = {"model": "tts-1", "voice": "alloy", "input": LAST_SENTENCE, "response_format": "wav"}
    plain = client.post("/v1/audio/speech", json=body, timeout=120)
    loud = client.post("/v1/audio/speech", json={**body, "loudness": {"preset": "podcast"}}, timeout=120)
    assert plain.status_code == loud.status_code == 200
    assert wait_for_job(client, loud.headers["x-ttsq-job-id"])["progress"]["segments_total"] > 1  # streamed in parts
    before, rate = soundfile.read(io.BytesIO(plain.content), dtype="float64")
    after, _ = soundfile.read(io.BytesIO(loud.content), dtype="float64")
    assert abs(integrated(after, rate) + 16.0) < 1.5 < abs(integrated(before, rate) + 16.0)
    assert true_peak_db(after) <= -1.0 + 0.05
