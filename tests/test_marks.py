"""Sentence and word marks of real jobs, and the subtitles made with them: stored beside the audio,
linked from the result, and lined up with what the worker's model actually said."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import httpx
import pytest
import soundfile
import srt  # type: ignore[import-untyped]
import webvtt

from cli.processes import ManagedProcess
from tests.conftest import JOB_TIMEOUT_S, wait_for, wait_for_job
from tts_core.base.audio import rms_dbfs
from tts_core.base.plan import PlannedUtterance
from tts_core.base.timing import UtteranceTiming, allocate
from tts_core.marks.mark_builder import MarkBuilder
from tts_core.marks.speech_marks import Mark, check_marks, marks_from_json

DETERMINISTIC = {"noise_scale": 0.0, "noise_w": 0.0, "format": "wav"}
STORY = (
    "Apples, bananas, cherries. In 1999, Mr. Smith bought 42 of the   oranges \N{EM DASH} fresh ones!\n\n"
    "The end of the story, my friend; goodbye. She walked home slowly, thinking of the long summer "
    "evenings by the river, when the light stayed late and nobody wanted to go inside. "
    "Tomorrow would be different."
)
WORD = re.compile(r"[^\W_](?:[\w'\N{RIGHT SINGLE QUOTATION MARK}.-]*[^\W_])?")
"""A written word as marks name it: letters and digits, inner apostrophes, dots and hyphens kept."""
EDGE_S = 0.02
"""The stretch just outside a word mark whose loudness is compared with the word's own."""


def finished_job(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={**DETERMINISTIC, **body})
    assert answer.status_code == 202, answer.text
    done = wait_for_job(client, answer.json()["id"])
    assert done["status"] == "succeeded", done
    return done


def fetched(url: str) -> bytes:
    answer = httpx.get(url)
    assert answer.status_code == 200, url
    return answer.content


def written_words(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in WORD.finditer(text)]


@pytest.fixture(scope="module")
def story(client: httpx.Client) -> tuple[dict[str, Any], list[Mark], Any, int]:
    job = finished_job(client, {"text": STORY, "marks": ["sentence", "word"]})
    result = job["result"]
    samples, rate = soundfile.read(io.BytesIO(fetched(result["url"])), dtype="int16")
    marks = marks_from_json(json.loads(fetched(result["marks_url"])))
    return job, marks, samples, rate


@pytest.fixture(scope="module")
def client(api_url: str) -> Any:
    with httpx.Client(base_url=api_url, timeout=30) as session:
        yield session


def test_marks_are_in_order_and_end_with_the_audio(story: tuple[dict[str, Any], list[Mark], Any, int]) -> None:
    job, marks, samples, rate = story
    assert job["progress"]["segments_total"] > 1, "the story should fan out, so marks cross segments"
    duration_ms = round(len(samples) * 1000 / rate)
    check_marks(marks, duration_ms)  # monotonic, non-overlapping, inside the audio, values match offsets
    sentences = [m for m in marks if m.type == "sentence"]
    assert [m.value for m in sentences][:3] == [
        "Apples, bananas, cherries.",
        "In 1999, Mr. Smith bought 42 of the   oranges \N{EM DASH} fresh ones!",
        "The end of the story, my friend; goodbye.",
    ]
    assert abs(max(m.end_ms for m in marks) - duration_ms) <= 50
    assert all(STORY[m.text_start : m.text_end] == m.value for m in marks)


def test_every_word_is_marked_once_in_order(story: tuple[dict[str, Any], list[Mark], Any, int]) -> None:
    _, marks, _, _ = story
    words = [(m.text_start, m.text_end, m.value) for m in marks if m.type == "word"]
    assert words == written_words(STORY)


QUIET_AROUND = {
    "Apples": (True, True),
    "bananas": (True, True),
    "cherries": (True, True),
    "goodbye": (True, True),
    "story": (False, True),
    "slowly": (False, True),
    "friend": (False, True),
    "summer": (False, False),
}
"""Words of the story, and whether the voice pauses before and after each (punctuation there)."""


def test_word_marks_land_on_the_words(story: tuple[dict[str, Any], list[Mark], Any, int]) -> None:
    """Cut the audio at a word's marks: the cut is speech, and where punctuation makes the voice
    pause, just outside the cut is far quieter than inside it."""
    _, marks, samples, rate = story
    by_value = {m.value: m for m in marks if m.type == "word"}
    edge = round(EDGE_S * rate)
    for value, (quiet_before, quiet_after) in QUIET_AROUND.items():
        mark = by_value[value]
        start, end = mark.start_ms * rate // 1000, mark.end_ms * rate // 1000
        inside = rms_dbfs(samples[start:end])
        assert inside > -35, f"{value}: the cut at its marks is not speech ({inside:.1f} dBFS)"
        if quiet_before:
            assert rms_dbfs(samples[max(start - edge, 0) : start]) < inside - 10, f"{value} starts inside speech"
        if quiet_after:
            assert rms_dbfs(samples[end : end + edge]) < inside - 10, f"{value} ends inside speech"


def test_a_number_read_as_several_words_gets_their_time(story: tuple[dict[str, Any], list[Mark], Any, int]) -> None:
    _, marks, _, _ = story
    by_value = {m.value: m for m in marks if m.type == "word"}
    # "nineteen hundred ninety nine" lasts far longer than "In" or "Mr", which surround it.
    assert by_value["1999"].end_ms - by_value["1999"].start_ms > 3 * (by_value["In"].end_ms - by_value["In"].start_ms)
    assert by_value["In"].end_ms <= by_value["1999"].start_ms < by_value["1999"].end_ms <= by_value["Mr"].start_ms


def test_subtitles_read_back_by_players(story: tuple[dict[str, Any], list[Mark], Any, int]) -> None:
    job, marks, _, _ = story
    vtt = fetched(job["result"]["subtitles_url"]).decode()
    captions = webvtt.from_buffer(io.StringIO(vtt)).captions
    subtitles = list(srt.parse(fetched(job["result"]["srt_url"]).decode()))
    assert len(captions) == len(subtitles) >= len([m for m in marks if m.type == "sentence"])
    shown = " ".join(c.text.replace("\n", " ") for c in captions)
    assert shown.split() == STORY.split()
    for caption, subtitle in zip(captions, subtitles, strict=True):
        assert caption.text == subtitle.content
        assert seconds(caption.start) == pytest.approx(subtitle.start.total_seconds(), abs=0.001)
        assert seconds(caption.end) == pytest.approx(subtitle.end.total_seconds(), abs=0.001)
        assert all(len(line) <= 42 for line in caption.lines)
    ends = [m.end_ms for m in marks if m.type == "sentence"]
    assert seconds(captions[-1].end) == pytest.approx(ends[-1] / 1000, abs=0.001)


def seconds(timestamp: str) -> float:
    """``HH:MM:SS.mmm`` as webvtt-py gives a caption's times."""
    hours, minutes, rest = timestamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(rest)


def test_only_the_asked_for_kinds_are_stored(client: httpx.Client) -> None:
    job = finished_job(client, {"text": "One short sentence. And another one.", "marks": ["sentence"]})
    marks = json.loads(fetched(job["result"]["marks_url"]))
    assert [m["type"] for m in marks] == ["sentence", "sentence"]
    assert job["options"]["marks"] == ["sentence"]
    assert fetched(job["result"]["subtitles_url"]).startswith(b"WEBVTT")


def test_a_job_without_marks_links_no_marks(client: httpx.Client) -> None:
    job = finished_job(client, {"text": "No marks here."})
    assert job["result"]["marks_url"] is None
    assert job["result"]["subtitles_url"] is None
    assert job["result"]["srt_url"] is None


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"text": "<speak>Hi.</speak>", "text_type": "ssml", "marks": ["sentence"]}, "plain text"),
        ({"text": "Hi.", "marks": ["word", "word"]}, "marks"),
        ({"text": "Hi.", "marks": ["syllable"]}, "marks"),
    ],
)
def test_marks_that_cannot_be_made_are_refused(client: httpx.Client, body: dict[str, Any], named: str) -> None:
    before = [job["id"] for job in client.get("/v1/jobs").json()["jobs"]]  # other tests' jobs may move on
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert named in answer.json()["error"]["message"]
    assert [job["id"] for job in client.get("/v1/jobs").json()["jobs"]] == before


def test_a_batch_item_with_marks_gets_them_and_the_manifest_names_them(
    client: httpx.Client, webhook_worker: ManagedProcess
) -> None:
    """The service worker writes the manifest."""
    answer = client.post(
        "/v1/batches",
        json={
            "items": [{"text": "First item.", "ref": "a"}, {"text": "Second item.", "ref": "b", "marks": []}],
            "defaults": {"marks": ["sentence", "word"]},
        },
    )
    assert answer.status_code == 202, answer.text
    batch_id = answer.json()["id"]
    batch = wait_for(
        lambda: client.get(f"/v1/batches/{batch_id}").json(),
        lambda batch: batch["manifest_url"] is not None,
        JOB_TIMEOUT_S,
        "the batch's manifest",
    )
    manifest = json.loads(fetched(batch["manifest_url"]))
    by_ref = {item["ref"]: item for item in manifest["items"]}
    assert by_ref["a"]["marks_key"].endswith("/marks.json")
    assert by_ref["b"]["marks_key"] is None


# Matching written words with voiced ones (plain data).


def test_one_run_per_word_is_matched_in_order() -> None:
    runs = [(0, 10, 3), (20, 30, 4), (40, 50, 2)]
    assert allocate(["cat", "dogs", "in"], runs, (0, 60)) == [(0, 10), (20, 30), (40, 50)]


def test_a_number_takes_several_runs_and_joined_words_share_one() -> None:
    weights = {"In": 2, "1999": 24, "of": 2, "the": 2, "end": 3}
    runs = [(0, 10, 2), (20, 80, 14), (90, 110, 6), (120, 130, 4), (140, 160, 4), (170, 180, 3)]
    spans = allocate(["In", "1999", "of", "the", "end"], runs, (0, 200), weights.__getitem__)
    assert spans == [(0, 10), (20, 130), (140, 148), (148, 160), (170, 180)]  # "of the": 2 to 3 characters


def test_words_without_runs_share_the_utterance_by_characters() -> None:
    assert allocate(["ab", "abcd"], [], (0, 60)) == [(0, 20), (20, 60)]


def test_a_word_cut_between_two_pieces_is_one_mark() -> None:
    text = "Supercalifragilistic day"
    builder = MarkBuilder(text, 1000)
    first = PlannedUtterance([1], span=(0, 10), sentence_start=True)
    second = PlannedUtterance([1], span=(10, 24))
    marks = builder.add(first, UtteranceTiming(0, 100, [(10, 90, 10)]))
    marks += builder.add(second, UtteranceTiming(200, 400, [(210, 290, 10), (310, 390, 3)]))
    marks += builder.finish()
    assert [(m.type, m.value, m.start_ms, m.end_ms) for m in marks] == [
        ("sentence", text, 0, 400),
        ("word", "Supercalifragilistic", 10, 290),
        ("word", "day", 310, 390),
    ]


def test_a_japanese_voice_gives_sentence_marks_and_subtitles(client: httpx.Client) -> None:
    text = "吾輩は猫である。名前はまだ無い。"
    job = finished_job(client, {"text": text, "voice": "ja_JP-kokoro-jf_alpha", "marks": ["sentence"]})
    marks = marks_from_json(json.loads(fetched(job["result"]["marks_url"])))
    check_marks(marks, round(job["result"]["duration_s"] * 1000) + 1)
    assert [m.value for m in marks] == ["吾輩は猫である。", "名前はまだ無い。"]
    captions = webvtt.from_buffer(io.StringIO(fetched(job["result"]["subtitles_url"]).decode())).captions
    assert [c.text for c in captions] == ["吾輩は猫である。", "名前はまだ無い。"]


def test_a_batch_item_naming_a_mark_twice_is_refused_by_name(client: httpx.Client) -> None:
    answer = client.post("/v1/batches", json={"items": [{"text": "Hi.", "marks": ["word", "word"]}]})
    assert answer.status_code == 422, answer.text
    assert "marks names a kind twice" in answer.json()["error"]["message"]
    assert "items" in answer.json()["error"]["message"]


def test_the_files_route_passes_on_the_stored_audio_marks_and_subtitles(
    story: tuple[dict[str, Any], list[Mark], Any, int], client: httpx.Client
) -> None:
    """A page that cannot follow presigned URLs gets the same bytes through the API."""
    job, _, _, _ = story
    result = job["result"]
    by_file = {
        "audio": result["url"],
        "marks.json": result["marks_url"],
        "subtitles.vtt": result["subtitles_url"],
        "subtitles.srt": result["srt_url"],
    }
    for name, url in by_file.items():
        answer = client.get(f"/v1/jobs/{job['id']}/files/{name}")
        assert answer.status_code == 200, (name, answer.text)
        assert answer.content == fetched(url), name
        assert answer.headers["content-disposition"].startswith("inline;"), name
    saved = client.get(f"/v1/jobs/{job['id']}/files/audio", params={"download": "true"})
    assert saved.headers["content-disposition"].startswith(f'attachment; filename="{job["id"]}.wav"')
    assert saved.headers["content-type"] == result["content_type"]


def test_the_files_route_names_what_is_missing(client: httpx.Client) -> None:
    plain = finished_job(client, {"text": "No marks here."})
    missing = client.get(f"/v1/jobs/{plain['id']}/files/marks.json")
    assert missing.status_code == 404
    assert "no marks.json" in missing.json()["error"]["message"]
    assert client.get(f"/v1/jobs/{plain['id']}/files/cover.png").status_code == 422
