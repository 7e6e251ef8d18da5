"""Sentence and paragraph pauses per job, heard in the audio a real worker makes."""

from __future__ import annotations

import io

import httpx
import pytest
import soundfile

from tests.conftest import wait_for_job

DETERMINISTIC = {"noise_scale": 0.0, "noise_w": 0.0, "format": "wav"}


def duration_s(client: httpx.Client, body: dict[str, object]) -> float:
    job = client.post("/v1/jobs", json={**DETERMINISTIC, **body})
    assert job.status_code == 202, job.text
    done = wait_for_job(client, job.json()["id"])
    assert done["status"] == "succeeded", done
    audio = client.get(f"/v1/jobs/{done['id']}/audio", follow_redirects=True).content
    samples, rate = soundfile.read(io.BytesIO(audio))
    return float(len(samples) / rate)


def test_a_blank_line_adds_the_jobs_paragraph_pause(client: httpx.Client) -> None:
    pauses = {"sentence_pause_s": 0.1, "paragraph_pause_s": 1.5}
    paragraphs = duration_s(client, {"text": "The first part ends here.\n\nThe second part begins.", **pauses})
    one_run = duration_s(client, {"text": "The first part ends here. The second part begins.", **pauses})
    assert paragraphs - one_run == pytest.approx(1.4, abs=0.05)


def test_the_jobs_sentence_pause_replaces_the_servers(client: httpx.Client) -> None:
    text = "One sentence. Another sentence. A third sentence."
    short = duration_s(client, {"text": text, "sentence_pause_s": 0.1})
    long = duration_s(client, {"text": text, "sentence_pause_s": 1.1})
    assert long - short == pytest.approx(2.0, abs=0.05)  # two pauses between three sentences


@pytest.mark.parametrize("bad", [-0.1, 10.5, True, "1"])
def test_pauses_out_of_range_or_not_numbers_are_refused(client: httpx.Client, bad: object) -> None:
    answer = client.post("/v1/jobs", json={"text": "Hi.", "paragraph_pause_s": bad})
    assert answer.status_code == 422
    assert "paragraph_pause_s" in answer.json()["error"]["message"]
