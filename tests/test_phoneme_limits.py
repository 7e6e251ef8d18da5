"""An SSML ``<phoneme>`` is bounded like any other input: its ``ph`` is refused past
``MAX_PHONEME_CHARS`` at submit, and the planner cuts a long one to the id budget. The spoken text
that the job limits count is the element's own text, so one letter could carry a pronunciation of a
million symbols: the planner made it one utterance of twice as many model ids (found probing the
hostile-input class of issue 19), which the model would be asked to attend over at once."""

from __future__ import annotations

from typing import Final

import httpx
import pytest
import redis

from tests.conftest import IdleQueueApi
from tests.test_jobs_api import job_keys
from tests.test_ssml_jobs import ssml_pcm
from tts_core.base.config import DEFAULT_SEGMENT_IDS
from tts_core.base.errors import InvalidSsml
from tts_core.frontend.segments import ipa_pieces, ipa_spans, iter_segments, iter_ssml
from tts_core.text.speech_markup import MAX_PHONEME_CHARS, parse_ssml
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.engines import engine_of

WORD = "həˈloʊ "
"""Seven IPA characters with the space that ends a word."""


def pronunciation(chars: int) -> str:
    """``chars`` characters of words, ending in a symbol."""
    text = (WORD * (chars // len(WORD) + 1))[:chars]
    return text[:-1] + "ʊ" if text.endswith(" ") else text


def phoneme_document(ph: str) -> str:
    return f'<speak>Say <phoneme alphabet="ipa" ph="{ph}">x</phoneme> now.</speak>'


def test_a_pronunciation_past_the_limit_is_refused_and_one_at_it_is_read() -> None:
    parse_ssml(phoneme_document(pronunciation(MAX_PHONEME_CHARS)))
    with pytest.raises(InvalidSsml, match=f"ph has {MAX_PHONEME_CHARS + 1} characters; at most {MAX_PHONEME_CHARS}"):
        parse_ssml(phoneme_document(pronunciation(MAX_PHONEME_CHARS + 1)))


@pytest.mark.parametrize("voice_id", [DEFAULT_VOICE_ID, "ja_JP-kokoro-jf_alpha"])
def test_a_long_pronunciation_is_planned_within_the_budget(voice_id: str) -> None:
    info = VoiceCatalog.discover().get(voice_id)
    front_end = engine_of(info).front_end(info)
    budget = min(DEFAULT_SEGMENT_IDS, front_end.max_ids or DEFAULT_SEGMENT_IDS)
    ph = pronunciation(MAX_PHONEME_CHARS)
    utterances = [
        u
        for segment in iter_segments(iter_ssml(parse_ssml(phoneme_document(ph)), front_end, budget, 0.6), budget)
        for u in segment
    ]
    assert max(len(u.ids) for u in utterances) <= budget
    spoken = sum(len(u.ids) for u in utterances)
    assert spoken >= len(front_end.ipa_ids(ph)) - 2 * len(utterances), "a piece of the pronunciation was lost"


def test_pieces_are_cut_at_spaces_and_a_wall_without_one_is_cut_anyway() -> None:
    info = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    front_end = engine_of(info).front_end(info)
    ph = pronunciation(900)
    spans = list(ipa_spans(ph, front_end, 100))
    assert [start for start, _ in spans[1:]] == [end for _, end in spans[:-1]]  # nothing skipped
    assert spans[0][0] == 0
    assert spans[-1][1] == len(ph)
    assert all(ph[end] == " " for _, end in spans[:-1])
    assert all(len(front_end.ipa_ids(ph[start:end])) <= 100 for start, end in spans)
    wall = list(ipa_pieces("ə" * 5000, front_end, 100))
    assert len(wall) >= 5000 * 2 // 100
    assert max(len(ids) for ids in wall) <= 100


def test_the_api_refuses_an_overlong_pronunciation_and_creates_no_job(
    idle_queue_api: IdleQueueApi, redis_client: redis.Redis
) -> None:
    keys_before = job_keys(redis_client)
    source = phoneme_document(pronunciation(MAX_PHONEME_CHARS + 1))
    response = idle_queue_api.client.post("/v1/jobs", json={"text": source, "text_type": "ssml"})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_ssml"
    assert "ph has 1001 characters" in response.json()["error"]["message"]
    assert job_keys(redis_client) <= keys_before  # no new key (an earlier test's lease may lapse meanwhile)
    assert redis_client.llen(idle_queue_api.queue) == 0


SPOKEN_WHOLE_CHARS: Final = 400
"""A pronunciation of about twice a segment's ids (803 of 400): cut into three pieces, as one of
``MAX_PHONEME_CHARS`` is into six, in under half its audio. Against one word of seven characters it
is 9.6 times as long (one of ``MAX_PHONEME_CHARS`` against 70 characters: 8.6)."""


def test_a_long_pronunciation_is_spoken_whole(client: httpx.Client) -> None:
    """Cut into pieces, the pronunciation is still all spoken: the job takes about as long as the
    symbols say (Piper: about 60 ms of audio a symbol), and more than a short one."""
    short, _ = ssml_pcm(client, phoneme_document(pronunciation(7)))
    long, done = ssml_pcm(client, phoneme_document(pronunciation(SPOKEN_WHOLE_CHARS)))
    assert len(long) > 8 * len(short)
    assert done["status"] == "succeeded"
    assert done["progress"]["segments_total"] >= 2  # type: ignore[index]
