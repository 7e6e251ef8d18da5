"""Volume through the real worker: a job's ``volume_db`` and SSML ``<prosody volume>`` scale what a
listener hears, and nothing else (the same length, the same speech)."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile

from tests.conftest import wait_for_job

TEXT = "The level of this sentence is set by the job."
STILL = {"noise_scale": 0.0, "noise_w": 0.0}
"""No sampling noise: the same text makes the same samples, so levels compare exactly."""


def spoken(client: httpx.Client, **fields: Any) -> np.ndarray:
    job = client.post("/v1/jobs", json={"text": TEXT, "format": "wav", **STILL, **fields}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded", done["error"]
    audio: np.ndarray = soundfile.read(io.BytesIO(httpx.get(done["result"]["url"]).content), dtype="float64")[0]
    return audio


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(audio**2)))


def test_volume_db_and_prosody_volume_scale_the_samples(client: httpx.Client) -> None:
    plain = spoken(client)
    quieter = spoken(client, volume_db=-12.0)
    ssml = spoken(client, text=f'<speak><prosody volume="-6dB">{TEXT}</prosody></speak>', text_type="ssml")
    both = spoken(
        client, text=f'<speak><prosody volume="soft">{TEXT}</prosody></speak>', text_type="ssml", volume_db=-6.0
    )
    silent = spoken(client, text=f'<speak><prosody volume="silent">{TEXT}</prosody></speak>', text_type="ssml")
    assert rms(plain) > 0.02
    assert {len(a) for a in (quieter, ssml, both, silent)} == {len(plain)}  # the level only, not the timing
    assert rms(quieter) / rms(plain) == pytest.approx(10 ** (-12 / 20), rel=0.01)
    assert rms(ssml) / rms(plain) == pytest.approx(10 ** (-6 / 20), rel=0.01)
    assert rms(both) / rms(plain) == pytest.approx(10 ** (-12 / 20), rel=0.01)  # the job's and the SSML's add up
    assert not np.any(silent)
    loudest = spoken(
        client, text=f'<speak><prosody volume="+12dB">{TEXT}</prosody></speak>', text_type="ssml", volume_db=12.0
    )
    twelve_up = np.clip(plain * 10 ** (12 / 20), -1, 32767 / 32768)
    np.testing.assert_allclose(loudest, twelve_up, atol=4 / 32768)  # +12 dB in all, not +24
    np.testing.assert_allclose(quieter, plain * 10 ** (-12 / 20), atol=2 / 32768)  # the same speech, scaled


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"volume_db": 20.0}, "volume_db: Input should be less than or equal to 12"),
        ({"volume_db": -41}, "volume_db: Input should be greater than or equal to -40"),
        ({"volume_db": True}, "volume_db: Input should be a valid number"),
        ({"text": '<speak><prosody pitch="+10%">x</prosody></speak>', "text_type": "ssml"}, "attribute 'pitch'"),
    ],
)
def test_volume_out_of_bounds_and_pitch_are_refused(client: httpx.Client, fields: dict[str, Any], message: str) -> None:
    refused = client.post("/v1/jobs", json={"text": TEXT, **fields})
    assert refused.status_code == 422
    assert message in refused.json()["error"]["message"]
