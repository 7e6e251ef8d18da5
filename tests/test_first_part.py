"""A streamed job's first audio is a short clause of its first sentence, not the whole sentence, and
the audio streamed and stored is still all of the job's (real worker, real models)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from itertools import accumulate, combinations, pairwise
from typing import Any, Final

import httpx
import numpy as np
import pytest
import soundfile

from api.audio_answer import FIRST_PART_HEADER
from tests.conftest import wait_for_job
from tts_core.base.plan import PlannedUtterance
from tts_core.frontend.segments import iter_stream_segments
from tts_core.text import first_part
from tts_core.text.first_part import (
    CLAUSE_PAUSE_S,
    FIRST_PART_SCAN_CHARS,
    FirstPartLimits,
    Pace,
    PhraseBreak,
    cut_sentence_segments,
    first_cuts,
    pieces,
    word_breaks,
)

JAPANESE = "この書生の掌の裏でしばらくはよい心持に坐っておったが、しばらくすると非常な速力で運転し始めた。"
"""One 47-character sentence: before, its first audio was all of it."""
JAPANESE_STREAMED: Final = "この書生の掌の裏でしばらくはよい心持に坐っておった。"
"""JAPANESE up to its comma, streamed: past the 16 morae spoken whole, so cut at accent phrases, in
three (the rest after an 11-morae first part would take longer to make than that part plays)."""
ENGLISH = (
    "These reflections have dispelled the agitation with which I began my letter, and I feel my heart glow "
    "with an enthusiasm which elevates me to heaven. Nothing contributes so much to tranquillise the mind."
)
CASES = [("ja_JP-kokoro-jf_alpha", JAPANESE_STREAMED, 24000), ("alloy", ENGLISH, 22050)]


def speak(api_url: str, voice: str, text: str) -> tuple[httpx.Headers, bytes]:
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": "wav"}
    with httpx.stream("POST", f"{api_url}/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return response.headers, response.read()


@pytest.mark.parametrize(("voice", "text", "rate"), CASES)
def test_the_first_streamed_part_is_a_clause_and_the_whole_is_all_there(
    api_url: str, client: httpx.Client, voice: str, text: str, rate: int
) -> None:
    headers, streamed = speak(api_url, voice, text)
    job = wait_for_job(client, headers["x-ttsq-job-id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["progress"]["segments_total"] >= 2  # the first sentence alone is cut in two
    heard = np.frombuffer(streamed[44:], dtype="<i2")  # the streamed WAV's samples after its header
    stored, stored_rate = soundfile.read(io.BytesIO(httpx.get(job["result"]["url"]).content), dtype="int16")
    assert stored_rate == rate
    assert np.array_equal(heard, stored)
    assert heard.size / rate == pytest.approx(job["result"]["duration_s"], abs=0.002)
    first_s = int(headers[FIRST_PART_HEADER]) / 1000
    first_sentence_s = heard.size / rate / 2  # well under the first sentence's share, however said
    assert 0.3 < first_s < first_sentence_s, (first_s, heard.size / rate)
    # The cut is a pause as at a comma: quiet samples right after the first part, no click.
    first_end = round(first_s * rate)
    pause = heard[first_end - round(CLAUSE_PAUSE_S * rate) + 10 : first_end - 10]
    assert pause.size > 0
    assert np.abs(pause).max() < 50


def test_japanese_is_cut_at_accent_phrases_into_pieces_each_ready_before_the_last_is_heard() -> None:
    from tts_core.voices.kokoro import KOKORO_CPU_PACE, front_end
    from tts_core.voices.kokoro_package import data_dir

    folder = data_dir()
    assert folder is not None
    reader = front_end(folder)
    cut = [JAPANESE[a:b] for a, b in pieces(JAPANESE, first_cuts(JAPANESE, reader))]
    assert "".join(cut) == JAPANESE
    assert cut[0] == "この書生の掌の"  # three accent phrases, 11 morae; the comma is at 35
    # One cut more than the first (the rest, 49 morae, would take 3.2 s to make while the first part
    # plays for 1.5 s), and no more: one model call each.
    assert len(cut) == 3
    weights = [b.weight for b in reader.phrase_breaks(JAPANESE) if b.end in accumulate(len(c) for c in cut)]
    assert stalls([w - v for v, w in zip([0.0, *weights], weights, strict=False)], KOKORO_CPU_PACE) == 0.0


def stalls(parts: list[float], pace: Pace) -> float:
    """Seconds a listener waits after the first part, each part made after the one before."""
    ahead, waited = pace.heard(parts[0]), 0.0
    for part in parts[1:]:
        waited += max(0.0, pace.call(part) - ahead)
        ahead = max(0.0, ahead - pace.call(part)) + pace.heard(part)
    return waited


class Breaks:
    """A front end of made-up phrase breaks, one character a mora: at ``places``, and at ``total``."""

    def __init__(self, total: int, places: Iterable[int], limits: FirstPartLimits, clause: int | None = None) -> None:
        self.first_part_limits = limits
        self.places = [PhraseBreak(w, w, clause=w == clause) for w in [*(p for p in places if p < total), total]]

    def phrase_breaks(self, sentence: str) -> list[PhraseBreak]:
        return [b for b in self.places if b.end <= len(sentence)]


PACE: Final = Pace(call_s=0.3, call_s_per_weight=0.06, heard_s_per_weight=0.13)
PACED: Final = FirstPartLimits(6, 12, 16, PACE)


@pytest.mark.parametrize("total", [17, 30, 45, 60, 90, 150, 199])
def test_a_paced_sentence_gets_the_fewest_pieces_that_never_stall(total: int) -> None:
    """Other lengths: the first part within the limits, no stall under the pace, and no plan of fewer
    pieces (every choice of cuts at the same places, for as many pieces as there are) that never stalls."""
    reader = Breaks(total, range(2, total, 2), PACED)
    cuts = first_cuts("x" * total, reader)
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    assert PACED.least <= parts[0] <= PACED.most
    assert min(parts) >= PACED.least
    assert stalls([float(p) for p in parts], PACE) == 0.0
    least = int(PACED.least)
    fewer = (
        [b - a for a, b in zip([0, *c], [*c, total], strict=True)]
        for n in range(1, len(cuts))
        for c in combinations(range(least, total - least + 1, 2), n)
    )
    plans = [p for p in fewer if min(p) >= least and p[0] <= PACED.most]
    assert all(stalls([float(p) for p in plan], PACE) > 0 for plan in plans)


def test_a_paced_first_part_ends_at_a_clause_where_that_costs_no_piece() -> None:
    reader = Breaks(40, range(2, 40, 2), PACED, clause=10)
    assert first_cuts("x" * 40, reader)[0] == 10
    assert first_cuts("x" * 40, Breaks(40, range(2, 40, 2), PACED))[0] < 10  # else the shortest first part


def test_a_paced_cut_takes_the_nearest_place_when_none_is_near_enough() -> None:
    """Phrases too long for the next piece to be ready in time: cut at the next place anyway (the
    stall is shortest so), and every piece still ends at a place."""
    reader = Breaks(100, [10, 40, 70], PACED)  # 30 morae take 2.1 s to make; 10 are heard for 1.4 s
    assert first_cuts("x" * 100, reader) == [10, 40]  # 4 s heard of those 30: the last 60 in time
    assert 0 < stalls([10, 30, 60], PACE) < stalls([10, 60, 30], PACE)


def test_without_a_pace_the_rest_of_the_sentence_is_one_piece() -> None:
    unpaced = FirstPartLimits(6, 12, 16)
    assert first_cuts("x" * 90, Breaks(90, range(2, 90, 2), unpaced)) == [12]


def test_a_paced_sentence_past_the_scanned_head_is_cut_within_it() -> None:
    """The rest of a sentence longer than the head read for its cuts weighs more than any piece: it is
    cut at places within the head only, a bounded number of times."""
    reader = Breaks(FIRST_PART_SCAN_CHARS * 2, range(2, FIRST_PART_SCAN_CHARS * 2, 2), PACED)
    cuts = first_cuts("x" * FIRST_PART_SCAN_CHARS * 2, reader)
    assert cuts
    assert max(cuts) < FIRST_PART_SCAN_CHARS


def test_english_prefers_a_comma_then_a_phrase_start() -> None:
    long_sentence = "Well, as it happens, the train was late again today, and nobody could tell us why."
    assert first_cuts(long_sentence, object()) == [20]  # once only
    assert [b.end for b in word_breaks("a b")] == [1, 3]
    sentence = "These reflections have dispelled the agitation with which I began my letter, and I feel my heart glow"
    cut = first_cuts(sentence, object())
    assert sentence[: cut[0]] == "These reflections have dispelled the agitation"  # before "with", not "which"
    assert first_cuts("Too short to cut.", object()) == []
    # Up to 12 words are spoken whole: one model call, though there is a comma and a phrase start.
    assert first_cuts("Good morning, here is the news for you.", object()) == []
    assert first_cuts("Thanks for reaching out, a member of our team will reply soon.", object()) == []
    longer = "Good morning, here is the news for you today and for the rest of the week."  # 16 words
    assert longer[: first_cuts(longer, object())[0]] == "Good morning, here is the news"


def test_a_streamed_plan_names_its_first_sentences_pieces_for_the_entry_task_to_make() -> None:
    """Each cut piece of the first sentence is a segment of its own; the entry task makes them one
    after the other (``workers.pipeline``), the rest of the job is grouped as usual."""
    reader = Breaks(60, range(2, 60, 2), PACED)
    text = "x" * 60
    cut = [
        PlannedUtterance([1] * (b - a), pause_after_s=CLAUSE_PAUSE_S)
        for a, b in pairwise([0, *first_cuts(text, reader)])
    ]
    plan = [*cut, PlannedUtterance([1] * 10), PlannedUtterance([1] * 10)]
    segments = list(iter_stream_segments(plan, max_ids=400))
    assert len(cut) >= 2
    assert cut_sentence_segments(segments) == len(cut) + 1  # the cut pieces and the sentence's last
    assert len(segments) == len(cut) + 2  # the next sentence: a segment of the usual kind
    assert cut_sentence_segments([[PlannedUtterance([1])], [PlannedUtterance([1])]]) == 1  # nothing was cut


@pytest.mark.parametrize("speed", [0.8, 1.5, 2.0])
def test_faster_speech_is_paced_for_its_speed(speed: float) -> None:
    """At ``speed`` a mora plays (and is made) in 1/speed of the time while a call's fixed time stays:
    the plan keeps the audio flowing at that pace."""
    reader, text = Breaks(60, range(2, 60, 2), PACED), "x" * 60
    cuts = first_cuts(text, reader, speed)
    parts = [float(b - a) for a, b in zip([0, *cuts], [*cuts, 60], strict=True)]
    assert stalls(parts, PACE.at_speed(speed)) == 0.0
    if speed > 1:  # the plan made for normal speech would stop at this speed
        normal = [
            float(b - a) for a, b in zip([0, *first_cuts(text, reader)], [*first_cuts(text, reader), 60], strict=True)
        ]
        assert stalls(normal, PACE.at_speed(speed)) > 0


def test_places_with_no_speech_between_them_are_one_first_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Input built to hurt: a hundred places at one weight (phrases of no morae) are tried as one first
    part, not a hundred (each try walks the rest of the sentence)."""
    places = [PhraseBreak(end, float(min(end, 8))) for end in range(1, 150)] + [PhraseBreak(150, 60.0)]

    class Flat:
        first_part_limits = PACED

        def phrase_breaks(self, sentence: str) -> list[PhraseBreak]:
            return places

    tried: list[float] = []
    following = first_part._following

    def counted(first: PhraseBreak, *args: Any) -> tuple[list[PhraseBreak], float]:
        tried.append(first.weight)
        return following(first, *args)

    monkeypatch.setattr(first_part, "_following", counted)
    cuts = first_cuts("x" * 150, Flat())
    assert sorted(tried) == [6.0, 7.0, 8.0]
    assert cuts
