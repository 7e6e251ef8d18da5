"""No cheap request may ask for unbounded silence, and work that can never succeed is refused at
submit (issue 19, findings 4 and 5: a six-character request of 1,200 ten-second breaks made 12,000 s
of audio and 519 MB in a worker; 1,000,000 digits were accepted, then planned for 52 s and +470 MB
before failing ``plan_too_long``).
"""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from typing import Any

import httpx
import pytest
import redis

from tests.conftest import IdleQueueApi, create_record, enqueue, wait_for_job
from tts_core.base.config import VoiceConfig
from tts_core.base.errors import PauseTooLong
from tts_core.frontend.segments import IDS_PER_PAUSE_SECOND, PiperFrontEnd, iter_segments, plan_ssml
from tts_core.text.pauses import MAX_PAUSE_AT_ONE_PLACE_S, ssml_silence, text_silence
from tts_core.text.speech_markup import parse_ssml
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.piper_engine import piper_source
from ttsq.constants import KEY_PREFIX
from ttsq.job_store import JobStore
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore

TEN_S = '<break time="10s"/>'


def job_count(client: redis.Redis) -> int:
    return sum(1 for key in client.scan_iter(match=f"{KEY_PREFIX}:job:*", count=1000) if key.count(b":") == 2)


def refused(api: IdleQueueApi, client: redis.Redis, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body``: it must be refused with 422, with no job created and nothing queued."""
    jobs_before = job_count(client)
    answer = api.client.post(path, json=body, timeout=60)
    assert answer.status_code == 422, answer.text[:300]
    assert job_count(client) == jobs_before
    assert client.llen(api.queue) == 0
    error: dict[str, Any] = answer.json()["error"]
    return error


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"text": "<speak>Hello" + TEN_S * 1200 + "</speak>", "text_type": "ssml"}, "pause_too_long"),
        ({"text": "<speak>" + TEN_S * 3 + "Hello</speak>", "text_type": "ssml"}, "pause_too_long"),
        ({"text": "<speak>Hello" + TEN_S + TEN_S + "</speak>", "text_type": "ssml"}, "pause_too_long"),
        ({"text": "<speak>" + f"a{TEN_S}" * 1200 + "</speak>", "text_type": "ssml"}, "too_much_silence"),
        ({"text": "<speak>" + '<s>a</s><break strength="x-strong"/>' * 3000 + "</speak>", "text_type": "ssml"},
         "too_much_silence"),
        ({"text": "<speak>" + "<p>a</p>" * 3000 + "</speak>", "text_type": "ssml", "paragraph_pause_s": 5.0},
         "too_much_silence"),
        ({"text": "A. " * 20_000, "sentence_pause_s": 5.0}, "too_much_silence"),
        ({"text": "a\n\n" * 20_000, "paragraph_pause_s": 5.0}, "too_much_silence"),
        ({"text": "".join(random.Random(1).choices("0123456789", k=1_000_000))}, "plan_too_long"),
        ({"text": "1234567 " * 125_000}, "plan_too_long"),
    ],
    ids=[
        "1200-breaks-in-a-row", "breaks-before-speech", "two-breaks-in-a-row", "1200-words-each-with-a-break",
        "sentences-with-strong-breaks", "paragraph-pauses", "sentence-pauses", "blank-line-paragraphs",
        "a-million-digits", "numbers",
    ],
)  # fmt: skip
def test_what_asks_too_much_is_refused_at_submit(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis, body: dict[str, Any], code: str
) -> None:
    error = refused(idle_queue_api, redis_client, "/v1/jobs", body)
    assert error["code"] == code, error


def test_a_batch_item_asking_too_much_is_refused_by_name(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    items = [{"text": "Fine."}, {"text": "<speak>Hi" + TEN_S * 2 + "</speak>", "text_type": "ssml"}]
    error = refused(idle_queue_api, redis_client, "/v1/batches", {"items": items})
    assert error["code"] == "pause_too_long"
    assert error["message"].startswith("items[1].")


def test_the_speech_endpoint_refuses_an_impossible_plan(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "7" * 900_000}
    error = refused(idle_queue_api, redis_client, "/v1/audio/speech", body)
    assert error["code"] == "plan_too_long"


@pytest.mark.parametrize(
    "body",
    [
        {"text": "\n\n".join(["It was a bright cold day in April. The clocks were striking thirteen."] * 500)},
        {"text": "<speak>" + f"Chapter one.{TEN_S}" + "It was a bright cold day. " * 40 + "</speak>",
         "text_type": "ssml"},
        {"text": "The year 1999 ended; 2000 began. Call 555 0100 at 10:30. " * 2000},
    ],
    ids=["book-paragraphs", "one-long-break", "prose-with-numbers"],
)  # fmt: skip
def test_ordinary_texts_are_accepted(idle_queue_api: IdleQueueApi, body: dict[str, Any]) -> None:
    """Accepted as the long jobs they are, and waiting to run (on a queue no worker reads here)."""
    answer = idle_queue_api.client.post("/v1/jobs", json=body, timeout=60)
    assert answer.status_code == 202, answer.text[:300]
    job = idle_queue_api.client.get(f"/v1/jobs/{answer.json()['id']}").json()
    assert (job["status"], job["priority"], job["text_type"]) == ("queued", "bulk", body.get("text_type", "text"))
    assert job["error"] is None


def test_pauses_are_charged_with_the_speech(idle_queue_api: IdleQueueApi, redis_client: redis.Redis) -> None:
    """A day of 30 s takes a two-second sentence but not the same sentence with 30 s of breaks."""
    store = TenantStore(redis_client)
    key, _ = store.create(f"silence-quota-{uuid.uuid4().hex[:6]}", Limits(audio_seconds_per_day=30))
    headers = {"authorization": f"Bearer {key}"}
    plain = "Hello there, friend."
    paused = "<speak>" + plain.replace(" ", f" {TEN_S}", 4) + f"{TEN_S}</speak>"
    answer = idle_queue_api.client.post("/v1/jobs", json={"text": paused, "text_type": "ssml"}, headers=headers)
    assert answer.status_code == 429, answer.text
    assert answer.json()["error"]["code"] == "audio_seconds_per_day_exceeded"
    assert idle_queue_api.client.post("/v1/jobs", json={"text": plain}, headers=headers).status_code == 202


def test_breaks_in_a_row_add_up_at_one_place() -> None:
    document = parse_ssml("<speak>One" + '<break time="4s"/>' * 2 + "two<s>three</s>four</speak>")
    silence = ssml_silence(document, sentence_pause_s=0.25, paragraph_pause_s=0.6)
    assert (silence.longest_s, silence.longest_at) == (8.0, 2)
    assert silence.total_s == pytest.approx(8.0 + 2 * 0.25)  # a sentence pause on each side of <s>three</s>
    document = parse_ssml("<speak>One" + '<break time="6s"/>' * 2 + "two</speak>")
    with pytest.raises(PauseTooLong, match="12 s"):
        ssml_silence(document, 0.25, 0.6).check(speech_s=100, allowance_s=60, ratio=1)
    assert text_silence("One. Two.\n\nThree.", 0.25, 0.6).total_s == pytest.approx(0.25 + 0.6)


@pytest.fixture(scope="module")
def front_end() -> PiperFrontEnd:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    return PiperFrontEnd(VoiceConfig.from_file(piper_source(info).config_path))


def test_a_segment_holds_a_bounded_silence_whatever_the_breaks(front_end: PiperFrontEnd) -> None:
    """Pauses weigh in a segment's budget: a plan of many short words each followed by a maximal
    break never puts more than about one budget of silence in one segment (before, a segment of
    400 ids could hold a hundred of them: 1,000 s, 44 MB of samples)."""
    document = parse_ssml("<speak>" + f"Go{TEN_S}" * 200 + "Stop.</speak>")
    budget = 400
    segments = list(iter_segments(plan_ssml(document, front_end, budget, 0.6), budget, 0.25))
    most = max(sum(u.pause_before_s + (u.pause_after_s or 0.25) for u in s) for s in segments)
    assert most <= budget / IDS_PER_PAUSE_SECOND + MAX_PAUSE_AT_ONE_PLACE_S
    assert len(segments) >= 200 * MAX_PAUSE_AT_ONE_PLACE_S * IDS_PER_PAUSE_SECOND / budget


PLAN_DIGITS = """
import random, resource, sys, time
from tts_core.base.device import Device
from ttsq.errors import PlanTooLong
from ttsq.settings import Settings
from workers.voice_host import VoiceHost
settings = Settings(max_job_segments=2000)
engine = VoiceHost(settings, Device.CPU)
text = "".join(random.Random(1).choices("0123456789", k=1_000_000))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    engine.plan_segments("en_US-joe-medium", text, 400, max_segments=settings.max_job_segments)
except PlanTooLong as e:
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(round(grown), e)
"""


def test_planning_stops_at_the_segment_limit() -> None:
    """A worker plans no further than the limit: with 2,000 segments allowed, a million digits (68,141
    segments when planned whole: 36 s and +427 MiB on the 2-core reference machine) stop after
    2,000 segments (about 3 s here; 59 s while a sentence was phonemised whole before its first
    utterance), and the planning process grows by a few tens of MiB at most."""
    done = subprocess.run([sys.executable, "-c", PLAN_DIGITS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mib, message = done.stdout.split(" ", 1)
    assert "more than 2000 segments (planning stopped there)" in message
    assert int(grown_mib) < 64


@pytest.mark.usefixtures("worker")
def test_the_worker_checks_the_plans_silence_too(store: JobStore, settings: Settings, client: httpx.Client) -> None:
    """The API counts the text's sentences; the worker counts the plan's utterances (a sentence too
    long for one is cut, each piece followed by the sentence pause) and fails a job whose plan passes
    the allowance before any synthesis. The record is written straight to Redis, past the API."""
    record = create_record(store, "A. " * 200, options={"sentence_pause_s": 5.0})
    enqueue(settings, record.id)
    done = wait_for_job(client, record.id)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "too_much_silence"
    assert done["progress"]["segments_done"] == 0
