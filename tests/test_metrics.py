"""Prometheus metrics of the API (requests, submissions, queues, cluster job figures) and of a worker
(inference, batches, audio, failures), and the worker's probes, read over HTTP from real processes."""

from __future__ import annotations

import os

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from cli.processes import ManagedProcess, free_port, wait_until
from cli.workerpool import default_worker
from tests.conftest import IdleQueueApi, create_record, enqueue, serve, wait_for, wait_for_job
from ttsq.job_store import JobStore
from ttsq.settings import Settings

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

LONG_TEXT = " ".join(
    [
        "The lighthouse keeper climbed the stairs every evening before the sun went down.",
        "He counted the steps, one hundred and twelve of them, and never once lost count.",
        "At the top he wiped the great lens clean and trimmed the wick with care.",
        "Ships far out at sea saw the beam sweep across the water all night long.",
        "In the morning he wrote the weather in his book and went down to sleep.",
        "Nobody in the village remembered a night when the light had failed them.",
    ]
)


def scrape(url: str) -> Samples:
    """Every sample at ``url``, keyed by name and labels."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 when the series does not exist yet (a counter never incremented)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every series of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, lbls), v in samples.items() if n == name and wanted <= lbls)


def worker_url(worker: ManagedProcess) -> str:
    assert worker.env is not None
    return f"http://127.0.0.1:{worker.env['TTSQ_WORKER__METRICS_PORT']}"


@pytest.fixture
def api_metrics(api_url: str) -> str:
    return f"{api_url}/metrics"


def test_a_job_moves_the_api_and_worker_figures(client: httpx.Client, api_metrics: str, worker: ManagedProcess) -> None:
    before_api, before_worker = scrape(api_metrics), scrape(f"{worker_url(worker)}/metrics")
    job = client.post("/v1/jobs", json={"text": "Counting one job."}).json()
    assert wait_for_job(client, job["id"])["status"] == "succeeded"
    after_api, after_worker = scrape(api_metrics), scrape(f"{worker_url(worker)}/metrics")

    submitted = ("ttsq_jobs_submitted_total", {"voice": job["voice"], "priority": "interactive"})
    assert value(after_api, submitted[0], **submitted[1]) == value(before_api, submitted[0], **submitted[1]) + 1
    finished = {"status": "succeeded", "code": ""}
    assert value(after_api, "ttsq_jobs_finished_total", **finished) == (
        value(before_api, "ttsq_jobs_finished_total", **finished) + 1
    )
    for histogram in ("ttsq_job_latency_seconds", "ttsq_time_to_first_audio_seconds"):
        count = f"{histogram}_count"
        assert value(after_api, count, priority="interactive") == value(before_api, count, priority="interactive") + 1
        assert value(after_api, f"{histogram}_bucket", priority="interactive", le="+Inf") == value(
            after_api, count, priority="interactive"
        )
    posted = {"handler": "/v1/jobs", "method": "POST", "status": "202"}
    name = "ttsq_http_request_duration_seconds_count"
    assert value(after_api, name, **posted) == value(before_api, name, **posted) + 1
    assert value(after_api, "ttsq_redis_up") == 1

    lane = {"device": "cpu", "lane": "interactive"}
    assert value(after_worker, "ttsq_inference_seconds_count", **lane) > value(
        before_worker, "ttsq_inference_seconds_count", **lane
    )
    assert value(after_worker, "ttsq_batch_size_count", **lane) > value(before_worker, "ttsq_batch_size_count", **lane)
    audio_before = value(before_worker, "ttsq_audio_seconds_total", device="cpu", voice=job["voice"])
    audio_after = value(after_worker, "ttsq_audio_seconds_total", device="cpu", voice=job["voice"])
    assert 0.5 < audio_after - audio_before < 5  # one short sentence
    assert value(after_worker, "ttsq_real_time_factor_count", device="cpu") > 0
    assert value(after_worker, "ttsq_model_load_seconds", device="cpu", voice=job["voice"]) > 0
    assert value(after_worker, "ttsq_segments_in_flight", device="cpu") == 0
    assert total(after_worker, "ttsq_worker_info", device="cpu") == 1


def test_a_multi_segment_job_counts_its_first_audio_once(client: httpx.Client, api_metrics: str) -> None:
    before = scrape(api_metrics)
    job = client.post("/v1/jobs", json={"text": LONG_TEXT, "priority": "bulk"}).json()
    done = wait_for_job(client, job["id"])
    assert done["status"] == "succeeded"
    assert done["progress"]["segments_total"] > 1
    after = scrape(api_metrics)
    for name in ("ttsq_time_to_first_audio_seconds_count", "ttsq_job_latency_seconds_count"):
        assert value(after, name, priority="bulk") == value(before, name, priority="bulk") + 1
    first_audio = value(after, "ttsq_time_to_first_audio_seconds_sum", priority="bulk") - value(
        before, "ttsq_time_to_first_audio_seconds_sum", priority="bulk"
    )
    latency = value(after, "ttsq_job_latency_seconds_sum", priority="bulk") - value(
        before, "ttsq_job_latency_seconds_sum", priority="bulk"
    )
    assert 0 < first_audio < latency


def test_a_failed_job_is_counted_by_its_code(
    api_metrics: str, store: JobStore, settings: Settings, worker: ManagedProcess, client: httpx.Client
) -> None:
    before, before_worker = scrape(api_metrics), scrape(f"{worker_url(worker)}/metrics")
    record = create_record(store, voice="xx_XX-nobody-low")  # the API would refuse it; the worker fails it
    enqueue(settings, record.id)
    failed = wait_for_job(client, record.id)
    assert failed["status"] == "failed"
    code = failed["error"]["code"]
    after, after_worker = scrape(api_metrics), scrape(f"{worker_url(worker)}/metrics")
    labels = {"status": "failed", "code": code}
    assert value(after, "ttsq_jobs_finished_total", **labels) == value(before, "ttsq_jobs_finished_total", **labels) + 1
    assert value(after_worker, "ttsq_task_failures_total", code=code) == (
        value(before_worker, "ttsq_task_failures_total", code=code) + 1
    )
    # a failure is not a latency sample
    assert value(after, "ttsq_job_latency_seconds_count", priority="bulk") == value(
        before, "ttsq_job_latency_seconds_count", priority="bulk"
    )


def test_queue_depth_and_oldest_age_come_from_the_queue_itself(idle_queue_api: IdleQueueApi) -> None:
    api = idle_queue_api.client
    empty = scrape(f"{api.base_url}/metrics")
    assert value(empty, "ttsq_queue_depth", queue=idle_queue_api.queue) == 0
    assert value(empty, "ttsq_queue_oldest_age_seconds", queue=idle_queue_api.queue) == 0
    for n in range(3):
        assert api.post("/v1/jobs", json={"text": f"Waiting number {n}."}).status_code == 202
    aged = wait_for(
        lambda: value(scrape(f"{api.base_url}/metrics"), "ttsq_queue_oldest_age_seconds", queue=idle_queue_api.queue),
        lambda age: age >= 0.5,
        30,
        "the oldest waiting job half a second old",
    )
    assert api.post("/v1/jobs", json={"text": "The newest one."}).status_code == 202
    waiting = scrape(f"{api.base_url}/metrics")
    assert value(waiting, "ttsq_queue_depth", queue=idle_queue_api.queue) == 4
    age = value(waiting, "ttsq_queue_oldest_age_seconds", queue=idle_queue_api.queue)
    assert aged <= age < 30  # the oldest of the four, not the newest (a few milliseconds old)


def test_worker_probes_answer(worker: ManagedProcess) -> None:
    base = worker_url(worker)
    assert httpx.get(f"{base}/healthz").status_code == 200
    ready = httpx.get(f"{base}/readyz")
    assert ready.status_code == 200, ready.text
    assert httpx.get(f"{base}/nothing").status_code == 404


def test_worker_is_ready_only_once_its_model_is_loaded(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``/healthz`` answers from the start, while the model loads; ``/readyz`` is 503 until the model
    is loaded and the consumer takes tasks, then 200 (the startup probe of a Kubernetes worker pod)."""
    port = free_port()
    worker_settings = settings.worker.model_copy(update={"metrics_port": port})
    spec = default_worker(settings.model_copy(update={"worker": worker_settings}), "early@%h", "INFO")
    log = tmp_path_factory.mktemp("early") / "worker.log"
    process = ManagedProcess("early", spec.argv, log, {**os.environ, **spec.env}).start()
    answers: list[tuple[int, int]] = []
    try:

        def ready() -> bool:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code
                readiness = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code
            except httpx.TransportError:
                return False  # not listening yet
            answers.append((health, readiness))
            return readiness == 200

        wait_until(ready, 120, "worker ready", process)
        assert "loaded voice" in log.read_text()
    finally:
        process.stop()
    assert answers[0] == (200, 503), answers
    assert {health for health, _ in answers} == {200}
    assert answers[-1] == (200, 200)


def test_request_ids_are_echoed_or_made(client: httpx.Client) -> None:
    given = client.get("/healthz", headers={"X-Request-ID": "trace-42.a:b"})
    assert given.headers["x-request-id"] == "trace-42.a:b"
    made = client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
    assert made.headers["x-request-id"] != "bad id\twith spaces"
    assert len(made.headers["x-request-id"]) == 32
    assert client.get("/healthz").headers["x-request-id"] != made.headers["x-request-id"]


@pytest.mark.recovery
def test_metrics_answer_while_redis_is_down(settings: Settings) -> None:
    """A scrape during a Redis outage still answers, saying Redis is down, with the process's figures."""
    unreachable = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with serve(create_app(unreachable)) as url:
        samples = scrape(f"{url}/metrics")
    assert value(samples, "ttsq_redis_up") == 0
    assert not any(name.startswith("ttsq_queue_") for name, _ in samples)
    assert value(samples, "process_cpu_seconds_total") > 0
