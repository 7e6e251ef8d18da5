"""The ``speaker`` option of multi-speaker voices, end to end: by name or index, checked at submit,
carried to the model's ``sid`` input (the test voice's slow speaker speaks longer)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import FOLDER_VOICE_ID, wait_for_job
from tests.voices import MULTI_SPEAKER_VOICE_ID

TEXT = "The quick brown fox jumps over the lazy dog."
STILL = {"noise_scale": 0, "noise_w": 0}
"""No sampling noise: durations depend on the text, the speed and the speaker only."""


def speak(client: httpx.Client, **options: object) -> dict[str, object]:
    job = client.post("/v1/jobs", json={"text": TEXT, "voice": MULTI_SPEAKER_VOICE_ID, **STILL, **options})
    assert job.status_code == 202, job.text
    done = wait_for_job(client, job.json()["id"])
    assert done["status"] == "succeeded", done["error"]
    return done


def duration(job: dict[str, object]) -> float:
    result = job["result"]
    assert isinstance(result, dict)
    return float(result["duration_s"])


def test_the_speaker_reaches_the_model(client: httpx.Client) -> None:
    brisk = speak(client, speaker="brisk")
    slow = speak(client, speaker="slow")
    assert brisk["options"]["speaker_id"] == 0  # type: ignore[index]
    assert slow["options"]["speaker_id"] == 1  # type: ignore[index]
    assert 1.2 < duration(slow) / duration(brisk) < 1.6
    by_index = speak(client, speaker=1)
    assert by_index["options"]["speaker_id"] == 1  # type: ignore[index]
    assert duration(by_index) == duration(slow)
    assert duration(speak(client)) == duration(brisk)  # no speaker: the first


@pytest.mark.parametrize(
    ("voice", "speaker", "status", "message"),
    [
        (MULTI_SPEAKER_VOICE_ID, "nobody", 422, "has no speaker 'nobody'; it has brisk, slow"),
        (MULTI_SPEAKER_VOICE_ID, 2, 422, "has speakers 0 to 1; got 2"),
        (FOLDER_VOICE_ID, "brisk", 422, "has a single speaker; leave speaker out"),
        (MULTI_SPEAKER_VOICE_ID, True, 422, "speaker"),
        (MULTI_SPEAKER_VOICE_ID, "", 422, "speaker"),
    ],
)
def test_a_bad_speaker_is_refused_at_submit(
    client: httpx.Client, voice: str, speaker: object, status: int, message: str
) -> None:
    response = client.post("/v1/jobs", json={"text": TEXT, "voice": voice, "speaker": speaker})
    assert response.status_code == status
    assert message in response.json()["error"]["message"]
