"""A real worker with a budget of two models: the Japanese voices load one model between them, other
voices evict the least recently used model (never the pinned default), every job still speaks with
the voice it asked for, and the worker's metrics count each load and eviction."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from api.main import create_app
from cli.processes import ManagedProcess
from tests.conftest import FOLDER_VOICE_ID, serve, start_worker, wait_for_job
from tests.test_metrics import scrape, total, value, worker_url
from tests.voices import MULTI_SPEAKER_VOICE_ID
from tts_core.catalog import DEFAULT_VOICE_ID
from ttsq.settings import Settings

ALPHA, KUMO = "ja_JP-kokoro-jf_alpha", "ja_JP-kokoro-jm_kumo"
JAPANESE = "今日は良い天気ですね。"
ENGLISH = "The pool keeps two models at a time."


@pytest.fixture(scope="module")
def pool(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, ManagedProcess]]:
    """A worker on a queue of its own holding at most two models, and an API sending to it."""
    own = settings.model_copy(update={"queue": f"pool-{uuid.uuid4().hex[:8]}"})
    folder = tmp_path_factory.mktemp("pool")
    worker = start_worker(own, folder / "worker.log", "pool-worker", {"TTSQ_WORKER__MAX_LOADED_MODELS": "2"})
    try:
        with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield client, worker
    finally:
        worker.stop()


def speak(client: httpx.Client, voice: str, text: str) -> bytes:
    """The job's audio (WAV), once it succeeded with that voice."""
    job = client.post("/v1/jobs", json={"text": text, "voice": voice}).json()
    done = wait_for_job(client, job["id"])
    assert (done["status"], done["voice"]) == ("succeeded", voice), done
    response = client.get(f"/v1/jobs/{job['id']}/audio", follow_redirects=True)
    assert response.status_code == 200
    return response.content


def loads(worker: ManagedProcess, model: str) -> float:
    return value(scrape(f"{worker_url(worker)}/metrics"), "ttsq_model_loads_total", device="cpu", model=model)


def test_japanese_voices_share_one_model_and_others_evict_the_least_recent(
    pool: tuple[httpx.Client, ManagedProcess],
) -> None:
    client, worker = pool
    metrics_url = f"{worker_url(worker)}/metrics"
    start = scrape(metrics_url)
    assert value(start, "ttsq_model_loads_total", device="cpu", model=DEFAULT_VOICE_ID) == 1
    assert value(start, "ttsq_models_loaded", device="cpu") == 1

    alpha, kumo = speak(client, ALPHA, JAPANESE), speak(client, KUMO, JAPANESE)
    assert alpha != kumo  # two styles of one model: two voices
    after_japanese = scrape(metrics_url)
    assert value(after_japanese, "ttsq_model_loads_total", device="cpu", model="kokoro") == 1
    assert value(after_japanese, "ttsq_models_loaded", device="cpu") == 2  # the default and Kokoro
    assert total(after_japanese, "ttsq_model_evictions_total") == 0

    # Two more models through a budget of two: each evicts the least recently used unpinned model.
    speak(client, FOLDER_VOICE_ID, ENGLISH)
    speak(client, MULTI_SPEAKER_VOICE_ID, ENGLISH)
    speak(client, DEFAULT_VOICE_ID, ENGLISH)  # pinned: still loaded
    after_english = scrape(metrics_url)
    evictions = {
        model: value(after_english, "ttsq_model_evictions_total", device="cpu", model=model)
        for model in ("kokoro", FOLDER_VOICE_ID, DEFAULT_VOICE_ID)
    }
    assert evictions == {"kokoro": 1, FOLDER_VOICE_ID: 1, DEFAULT_VOICE_ID: 0}
    assert value(after_english, "ttsq_models_loaded", device="cpu") == 2
    assert value(after_english, "ttsq_model_loads_total", device="cpu", model=DEFAULT_VOICE_ID) == 1

    # The evicted Japanese model comes back on its next job, with the same voice as before.
    again = speak(client, KUMO, JAPANESE)
    assert again == kumo
    assert loads(worker, "kokoro") == 2
