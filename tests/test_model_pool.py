"""A real worker with a budget of two models: the Japanese voices load one model between them, other
voices evict the least recently used model (never the pinned default), every job still speaks with
the voice it asked for, and the worker's metrics count each load and eviction."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from api.main import create_app
from cli.processes import ManagedProcess
from tests.conftest import FOLDER_VOICE_ID, serve, start_worker, wait_for, wait_for_job
from tests.test_metrics import scrape, total, value, worker_url
from tests.test_segment_jobs import PARAGRAPH
from tests.voices import BROKEN_VOICE_ID, MULTI_SPEAKER_VOICE_ID
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from ttsq.constants import bulk_segments_queue, interactive_queue, model_queue
from ttsq.settings import Settings

ALPHA, KUMO = "ja_JP-kokoro-jf_alpha", "ja_JP-kokoro-jm_kumo"
JAPANESE = "今日は良い天気ですね。"
ENGLISH = "The pool keeps two models at a time."


@dataclass(frozen=True)
class Pool:
    client: httpx.Client
    worker: ManagedProcess
    queue: str


@pytest.fixture(scope="module")
def pool(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """A worker on a queue of its own holding at most two models, and an API sending to it."""
    own = settings.model_copy(update={"queue": f"pool-{uuid.uuid4().hex[:8]}"})
    folder = tmp_path_factory.mktemp("pool")
    worker = start_worker(own, folder / "worker.log", "pool-worker", {"TTSQ_WORKER__MAX_LOADED_MODELS": "2"})
    try:
        with serve(create_app(own)) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield Pool(client, worker, own.queue)
    finally:
        worker.stop()


def speak(client: httpx.Client, voice: str, text: str) -> bytes:
    """The job's audio (WAV), once it succeeded with that voice."""
    (audio,) = speak_together(client, [(voice, text)])
    return audio


def speak_together(client: httpx.Client, asked: list[tuple[str, str]]) -> list[bytes]:
    """:func:`speak` of each voice and text, the jobs submitted together and then awaited: for jobs
    whose order does not matter to what the worker loads and evicts."""
    ids = [client.post("/v1/jobs", json={"text": text, "voice": voice}).json()["id"] for voice, text in asked]
    audio = []
    for job_id, (voice, _) in zip(ids, asked, strict=True):
        done = wait_for_job(client, job_id)
        assert (done["status"], done["voice"]) == ("succeeded", voice), done
        response = client.get(f"/v1/jobs/{job_id}/audio", follow_redirects=True)
        assert response.status_code == 200
        audio.append(response.content)
    return audio


def loads(worker: ManagedProcess, model: str) -> float:
    return value(scrape(f"{worker_url(worker)}/metrics"), "ttsq_model_loads_total", device="cpu", model=model)


def test_japanese_voices_share_one_model_and_others_evict_the_least_recent(
    pool: Pool,
) -> None:
    client, worker = pool.client, pool.worker
    metrics_url = f"{worker_url(worker)}/metrics"
    start = scrape(metrics_url)
    assert value(start, "ttsq_model_loads_total", device="cpu", model=DEFAULT_VOICE_ID) == 1
    assert value(start, "ttsq_models_loaded", device="cpu") == 1

    alpha, kumo = speak_together(client, [(ALPHA, JAPANESE), (KUMO, JAPANESE)])
    assert alpha != kumo  # two styles of one model: two voices
    after_japanese = scrape(metrics_url)
    assert value(after_japanese, "ttsq_model_loads_total", device="cpu", model="kokoro") == 1
    assert value(after_japanese, "ttsq_models_loaded", device="cpu") == 2  # the default and Kokoro
    assert total(after_japanese, "ttsq_model_evictions_total") == 0

    # Two more models through a budget of two: each evicts the least recently used unpinned model.
    speak(client, FOLDER_VOICE_ID, ENGLISH)
    speak_together(client, [(MULTI_SPEAKER_VOICE_ID, ENGLISH), (DEFAULT_VOICE_ID, ENGLISH)])  # pinned: still loaded
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


def test_bulk_segments_wait_in_their_model_queue_which_its_holder_asks_for_first(
    pool: Pool, redis_client: redis.Redis
) -> None:
    """What the worker really sends to Redis (MONITOR): a bulk job's segments pushed to its model's
    queue, and BRPOPs that list the fixed queues, then the model queues of the models the worker
    holds, then the other model queues of its catalog."""
    client, queue = pool.client, pool.queue
    commands: list[list[str]] = []
    listening, done = threading.Event(), threading.Event()

    def listen() -> None:
        with redis_client.monitor() as monitor:  # type: ignore[no-untyped-call]
            listening.set()  # MONITOR answered: every command from now on is seen
            for entry in monitor.listen():
                words = entry["command"].split()
                if any(w.startswith(queue) for w in words):
                    commands.append(words)
                if done.is_set():
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert listening.wait(10), "MONITOR did not start"
    job = client.post("/v1/jobs", json={"text": PARAGRAPH, "priority": "bulk"}).json()
    finished = wait_for_job(client, job["id"])
    assert finished["status"] == "succeeded"
    client.post("/v1/jobs", json={"text": "One more, to see the next BRPOP."}).json()
    own, own_interactive = model_queue(queue, DEFAULT_VOICE_ID), model_queue(queue, DEFAULT_VOICE_ID, True)

    def brpop_after_the_short_job(seen: list[list[str]]) -> bool:
        pushes = [i for i, w in enumerate(seen) if w[:2] == ["LPUSH", own_interactive]]
        return bool(pushes) and any(w[0] == "BRPOP" and queue in w for w in seen[pushes[-1] :])

    wait_for(lambda: list(commands), brpop_after_the_short_job, 30, "a BRPOP after the short job's entry")
    done.set()
    listener.join(10)

    pushed = [w[1] for w in commands if w[0] == "LPUSH"]
    assert pushed.count(own) == finished["progress"]["segments_total"] > 1
    assert own_interactive in pushed  # the short job's entry: its model's interactive queue
    assert bulk_segments_queue(queue) not in pushed
    assert interactive_queue(queue) not in pushed
    catalog = VoiceCatalog.discover(None).model_keys()
    # kombu lists every queue once per priority step (``name\x06\x16<step>`` after the plain names).
    brpops = [
        [k for k in w[1:-1] if "\\x06" not in k and "\x06" not in k] for w in commands if w[0] == "BRPOP" and queue in w
    ]
    assert brpops, "no BRPOP of the worker's queues seen"
    for keys in brpops:
        entry, segments = keys.index(queue), keys.index(bulk_segments_queue(queue))
        assert keys[0] == interactive_queue(queue)
        assert entry < segments
        assert set(keys[1:entry]) >= {model_queue(queue, key, True) for key in catalog}
        assert set(keys[segments + 1 :]) >= {model_queue(queue, key) for key in catalog}
        for not_held in (FOLDER_VOICE_ID, BROKEN_VOICE_ID):  # never loaded here, or evicted
            assert keys.index(own) < keys.index(model_queue(queue, not_held)), keys
            assert keys.index(own_interactive) < keys.index(model_queue(queue, not_held, True)), keys
