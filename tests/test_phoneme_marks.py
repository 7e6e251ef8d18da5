"""Phoneme, viseme and SSML marks of real jobs through the API and a worker with the default Piper
voice: visemes lie in their words, follow the phonemes through the IPA table, close the lips where
the audio is quiet; SSML marks are heard between the words around them; marks a job cannot have are
refused with no job made."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import soundfile

from api.submission import marks_available
from tests.conftest import wait_for_job
from tts_core.marks.speech_marks import Mark, check_marks, marks_from_json
from tts_core.marks.visemes import SIL, viseme_of
from tts_core.voices.kokoro_engine import KokoroEngine
from ttsq.job_record import TextType

STILL = {"noise_scale": 0.0, "noise_w": 0.0, "format": "wav"}
"""No sampling noise: the same text gives the same audio, run after run."""
LIPS = (
    "Mary had a little lamb. Bob bought a big map, and a happy baby ate a ripe apple!\n\n"
    "Abby saw a hippo by the bump on the pipe. A puppy, Amy.\n\n"
    "Pam made maple muffins for Bob, and the puppy slept by the pump. Pop the bubble, Abby, and hop up the steps!"
)
VOWELS = frozenset("@aeEiouO")
"""Visemes of an open mouth."""
ANIMAL = '<mark name="animal"/>'
SSML = (
    f"<speak>Mary had a little {ANIMAL}lamb. "
    '<mark name="pause"/><break time="600ms"/>Then <mark name="a &amp; b"/>came the rest.'
    '<mark name="last"/></speak>'
)


@pytest.fixture(scope="module")
def client(api_url: str) -> Any:
    with httpx.Client(base_url=api_url, timeout=30) as session:
        yield session


def finished_job(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={**STILL, **body})
    assert answer.status_code == 202, answer.text
    done = wait_for_job(client, answer.json()["id"])
    assert done["status"] == "succeeded", done
    return done


def marks_and_audio(
    client: httpx.Client, body: dict[str, Any], segments: int = 1
) -> tuple[list[Mark], npt.NDArray[np.float64], int]:
    """The job's marks (checked per type against its audio's length) and its audio; the job must
    have been cut into at least ``segments`` segments."""
    job = finished_job(client, body)
    assert job["progress"]["segments_total"] >= segments
    result = job["result"]
    samples, rate = soundfile.read(io.BytesIO(httpx.get(result["url"]).content), dtype="float64")
    marks = marks_from_json(json.loads(httpx.get(result["marks_url"]).content))
    check_marks(marks, round(len(samples) * 1000 / rate))
    return marks, samples, rate


@pytest.fixture(scope="module")
def lips(client: httpx.Client) -> tuple[list[Mark], npt.NDArray[np.float64], int]:
    """Several segments: their phonemes' timings are stored between the steps and read back."""
    return marks_and_audio(client, {"text": LIPS, "marks": ["word", "phoneme", "viseme"]}, segments=2)


def of_type(marks: list[Mark], kind: str) -> list[Mark]:
    return [m for m in marks if m.type == kind]


def test_every_viseme_lies_inside_its_word(lips: tuple[list[Mark], Any, int]) -> None:
    marks, _, _ = lips
    words = {(w.text_start, w.text_end): w for w in of_type(marks, "word")}
    visemes = [v for v in of_type(marks, "viseme") if v.value != SIL]
    assert len(visemes) > 2 * len(words)
    for viseme in visemes:
        word = words[viseme.text_start, viseme.text_end]
        assert word.start_ms <= viseme.start_ms < viseme.end_ms <= word.end_ms, (viseme, word)
    heard = {(v.text_start, v.text_end) for v in visemes}
    assert heard == set(words), "every word has visemes"


def test_visemes_follow_the_phonemes_through_the_ipa_table(lips: tuple[list[Mark], Any, int]) -> None:
    marks, _, _ = lips
    phonemes = of_type(marks, "phoneme")
    visemes = [v for v in of_type(marks, "viseme") if v.value != SIL]
    assert [v.value for v in visemes] == [viseme_of(p.value) for p in phonemes]
    assert [(v.start_ms, v.end_ms, v.text_start, v.text_end) for v in visemes] == [
        (p.start_ms, p.end_ms, p.text_start, p.text_end) for p in phonemes
    ]
    by_word = {w.value: [v.value for v in visemes if v.text_start == w.text_start] for w in of_type(marks, "word")}
    # As Polly's en-US table has them: m → p, ɛ → E, ɹ → r, i → i; æ → a; b → p, ɑ → a; ʌ → E.
    assert by_word["Mary"] == ["p", "E", "r", "i"]
    assert by_word["map"] == ["p", "a", "p"]
    assert by_word["Bob"] == ["p", "a", "p"]
    assert by_word["bump"] == ["p", "E", "p", "p"]


def test_pauses_between_sentences_and_at_commas_are_sil(lips: tuple[list[Mark], Any, int]) -> None:
    marks, _, _ = lips
    words = of_type(marks, "word")
    silences = [v for v in of_type(marks, "viseme") if v.value == SIL]
    assert len(silences) >= 4, "three sentence ends, a paragraph and commas pause"
    for silence in silences:
        before = max((w for w in words if w.end_ms <= silence.start_ms), key=lambda w: w.end_ms)
        after = min((w for w in words if w.start_ms >= silence.end_ms), key=lambda w: w.start_ms)
        assert (silence.text_start, silence.text_end) == (before.text_end, after.text_start)
    between = [LIPS[s.text_start : s.text_end] for s in silences]
    assert ". " in between
    assert "!\n\n" in between


def rms(samples: npt.NDArray[np.float64], rate: int, mark: Mark) -> float:
    part = samples[mark.start_ms * rate // 1000 : mark.end_ms * rate // 1000]
    return float(np.sqrt(np.mean(part**2)))


def test_the_audio_under_a_p_viseme_is_a_lip_closure(lips: tuple[list[Mark], npt.NDArray[np.float64], int]) -> None:
    """p, b and m close the lips: between two vowels, the audio dips under the louder of them, and by
    at least 3 dB taken over all of them (a word's last vowel may fade as quiet as its closure)."""
    marks, samples, rate = lips
    visemes = of_type(marks, "viseme")
    closures = [
        (rms(samples, rate, p), max(rms(samples, rate, before), rms(samples, rate, after)))
        for before, p, after in zip(visemes, visemes[1:], visemes[2:], strict=False)
        if p.value == "p" and before.value in VOWELS and after.value in VOWELS
    ]
    assert len(closures) >= 6
    for closed, open_ in closures:
        assert closed < open_, closures
    closed_db, open_db = (20 * np.log10(np.median([c[i] for c in closures])) for i in (0, 1))
    assert closed_db < open_db - 3, (closed_db, open_db)


def test_ssml_marks_are_heard_between_the_words_around_them(client: httpx.Client) -> None:
    marks, samples, rate = marks_and_audio(client, {"text": SSML, "text_type": "ssml", "marks": ["ssml", "phoneme"]})
    points = of_type(marks, "ssml")
    assert [p.value for p in points] == ["animal", "pause", "a & b", "last"]
    assert SSML[points[0].text_start : points[0].text_end] == ANIMAL
    assert [SSML[p.text_start : p.text_end] for p in points[1:]] == [
        '<mark name="pause"/>',
        '<mark name="a &amp; b"/>',
        '<mark name="last"/>',
    ]
    phonemes = of_type(marks, "phoneme")
    for point in points:
        before = [p for p in phonemes if p.text_end <= point.text_start]
        after = [p for p in phonemes if p.text_start >= point.text_end]
        assert before[-1].end_ms <= point.start_ms == point.end_ms
        if after:
            assert point.start_ms <= after[0].start_ms
    lamb = next(p for p in phonemes if p.text_start > points[0].text_start)
    assert SSML[lamb.text_start : lamb.text_end].startswith("lamb")
    assert lamb.value == "l"
    assert lamb.start_ms - points[0].start_ms < 30, "the mark is where lamb starts"
    pause, then = points[1], next(p for p in phonemes if p.text_start > points[1].text_start)
    assert then.start_ms - pause.start_ms < 30, "a mark before a break is heard where the speech after it starts"
    assert points[-1].start_ms <= round(len(samples) * 1000 / rate)


def test_phonemes_of_ssml_point_at_what_they_were_read_from(client: httpx.Client) -> None:
    source = '<speak>Say <phoneme alphabet="ipa" ph="bˈɑːb">Robert</phoneme> <sub alias="maybe">mb</sub></speak>'
    marks, _, _ = marks_and_audio(client, {"text": source, "text_type": "ssml", "marks": ["phoneme", "viseme"]})
    read_from: dict[str, list[str]] = {}
    for phoneme in of_type(marks, "phoneme"):
        read_from.setdefault(source[phoneme.text_start : phoneme.text_end], []).append(phoneme.value)
    assert read_from['<phoneme alphabet="ipa" ph="bˈɑːb">Robert</phoneme>'] == ["b", "ˈɑː", "b"]
    assert read_from["Say"]
    assert read_from['<sub alias="maybe">mb</sub>']
    visemes = [v.value for v in of_type(marks, "viseme") if v.text_start == source.index("<phoneme")]
    assert visemes == ["p", "a", "p"]


def test_a_japanese_voice_hears_ssml_marks_where_the_speech_after_them_starts(client: httpx.Client) -> None:
    """Kokoro's graph times its ids too: a mark is heard at the first phoneme after it."""
    source = '<speak><mark name="start"/>今日は。<break time="1s"/><mark name="weather"/>良い天気ですね。</speak>'
    body = {"text": source, "text_type": "ssml", "voice": "ja_JP-kokoro-jf_alpha", "marks": ["ssml", "phoneme"]}
    found, samples, rate = marks_and_audio(client, body)
    marks = [m for m in found if m.type == "ssml"]
    phonemes = [m for m in found if m.type == "phoneme"]
    assert [m.value for m in marks] == ["start", "weather"]
    assert marks[0].start_ms == phonemes[0].start_ms
    assert marks[1].start_ms == min(p.start_ms for p in phonemes if p.start_ms >= marks[1].start_ms)
    assert marks[1].start_ms >= 1000, "after the first sentence and the second of silence"
    gap = samples[(marks[1].start_ms - 500) * rate // 1000 : (marks[1].start_ms - 100) * rate // 1000]
    assert not gap.any(), "the break is just before it"
    assert marks[1].start_ms < round(len(samples) * 1000 / rate)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"text": "Hi.", "marks": ["ssml"]}, "ssml marks come from the <mark> elements of SSML"),
        ({"text": "<speak>Hi.</speak>", "text_type": "ssml", "marks": ["word"]}, "gives ssml, phoneme, viseme"),
        ({"text": "<speak>Hi.</speak>", "text_type": "ssml", "marks": ["sentence"]}, "plain text only"),
        ({"text": "Hi.", "marks": ["syllable"]}, "marks"),
        ({"text": '<speak>Hi <mark name=""/>there.</speak>', "text_type": "ssml", "marks": ["ssml"]}, "<mark>"),
    ],
)
def test_marks_a_job_cannot_have_are_refused_and_no_job_is_made(
    client: httpx.Client, body: dict[str, Any], named: str
) -> None:
    before = [job["id"] for job in client.get("/v1/jobs").json()["jobs"]]
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert named in answer.json()["error"]["message"]
    assert [job["id"] for job in client.get("/v1/jobs").json()["jobs"]] == before


@pytest.mark.parametrize(
    ("times_words", "times_phonemes", "text_type", "allowed"),
    [
        (True, True, TextType.TEXT, ["sentence", "word", "phoneme", "viseme"]),
        (True, True, TextType.SSML, ["ssml", "phoneme", "viseme"]),
        (False, False, TextType.TEXT, ["sentence"]),
        (False, False, TextType.SSML, ["ssml"]),
    ],
)
def test_the_marks_a_job_can_have_follow_its_engine_and_text_type(
    times_words: bool, times_phonemes: bool, text_type: TextType, allowed: list[str]
) -> None:
    """Every engine ttsq ships times its ids; one that does not (a plugin's) gives no word, phoneme or viseme marks."""

    class Untimed(KokoroEngine):
        pass

    Untimed.times_words, Untimed.times_phonemes = times_words, times_phonemes
    assert marks_available(text_type, Untimed()) == allowed


def test_a_batch_takes_every_kind_of_mark_in_its_defaults(client: httpx.Client) -> None:
    kinds = ["sentence", "word", "phoneme", "viseme"]
    answer = client.post(
        "/v1/batches", json={"items": [{"text": "Hum a tune.", "ref": "a"}], "defaults": {"marks": kinds, **STILL}}
    )
    assert answer.status_code == 202, answer.text
    item = client.get(f"/v1/batches/{answer.json()['id']}").json()["items"][0]
    done = wait_for_job(client, item["job_id"])
    assert done["options"]["marks"] == kinds
    marks = marks_from_json(json.loads(httpx.get(done["result"]["marks_url"]).content))
    assert {m.type for m in marks} == set(kinds)
    refused = client.post(
        "/v1/batches", json={"items": [{"text": "Hi.", "marks": ["ssml"]}], "defaults": {"marks": ["sentence"]}}
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["message"].startswith("items[0].marks: ssml marks come from")
