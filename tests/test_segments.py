"""Planning text into segments: every utterance fits the id budget, order and words are kept."""

from __future__ import annotations

import itertools
import random

import pytest

from tts_core.base.config import VoiceConfig
from tts_core.base.errors import EmptyText
from tts_core.frontend.segments import (
    LONG_SENTENCE_CHARS,
    PiperFrontEnd,
    Utterance,
    group_segments,
    iter_utterances,
    plan_plain,
    plan_utterances,
)
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.piper_engine import piper_source

LONG_SENTENCE = (
    "The river, which had been rising for three days under a grey and patient sky, finally spilled "
    "over the old stone wall; the millers, the bakers and the children of the lower town carried sacks, "
    "chairs and chickens up the hill, while the mayor, standing on a cart, shouted instructions that "
    "nobody could hear over the rain, the bells and the roaring water"
)


@pytest.fixture(scope="module")
def voice_config() -> VoiceConfig:
    return VoiceConfig.from_file(piper_source(VoiceCatalog.discover().get(DEFAULT_VOICE_ID)).config_path)


def test_short_text_is_one_utterance(voice_config: VoiceConfig) -> None:
    utterances = plan_utterances("Hello there.", PiperFrontEnd(voice_config), 400)
    assert len(utterances) == 1
    assert utterances[0].phoneme_ids[0] == 1
    assert utterances[0].phoneme_ids[-1] == 2


def test_long_sentence_is_cut_at_clauses_within_budget(voice_config: VoiceConfig) -> None:
    whole = plan_utterances(LONG_SENTENCE, PiperFrontEnd(voice_config), 4096)
    assert len(whole) == 1
    assert len(whole[0].phoneme_ids) > 400
    cut = plan_utterances(LONG_SENTENCE, PiperFrontEnd(voice_config), 400)
    assert len(cut) > 1
    assert all(len(u.phoneme_ids) <= 400 for u in cut)
    assert " ".join(u.text for u in cut) == LONG_SENTENCE  # nothing lost, order kept
    assert all(u.text.endswith((",", ";", "water")) for u in cut)  # clause ends, not mid-clause


def test_unpunctuated_run_is_cut_at_words(voice_config: VoiceConfig) -> None:
    text = " ".join(["blue"] * 300)
    cut = plan_utterances(text, PiperFrontEnd(voice_config), 200)
    assert all(len(u.phoneme_ids) <= 200 for u in cut)
    assert all(set(u.text.split()) == {"blue"} for u in cut)
    assert sum(len(u.text.split()) for u in cut) == 300


class CountingFrontEnd(PiperFrontEnd):
    """The voice's own front end, counting the characters it is asked to phonemise."""

    phonemised = 0

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        self.phonemised += len(sentence)
        return super().phoneme_ids(sentence)


def test_a_sentence_with_no_end_is_phonemised_only_as_far_as_its_utterances_are_taken(
    voice_config: VoiceConfig,
) -> None:
    """100,000 digits are one sentence: taking its first utterances phonemises its first pieces, not
    all of it (before, the whole clause was read before its first utterance came, so a plan limit
    stopped a million digits only after about a minute of espeak-ng)."""
    text = "".join(random.Random(3).choices("0123456789", k=100_000))
    counting = CountingFrontEnd(voice_config)
    first = list(itertools.islice(iter_utterances(text, counting, 400), 10))
    assert len(first) == 10
    assert all(len(u.phoneme_ids) <= 400 for u in first)
    assert counting.phonemised <= 10 * LONG_SENTENCE_CHARS  # its first chunk, read piece by piece: a tenth of the text


def test_nothing_to_say_is_refused(voice_config: VoiceConfig) -> None:
    with pytest.raises(EmptyText):
        plan_utterances(" ... !!! ", PiperFrontEnd(voice_config), 400)


def ids(n: int) -> Utterance:
    return Utterance(f"u{n}", [1] * n)


def test_group_segments_packs_in_order_up_to_budget() -> None:
    utterances = [ids(100), ids(250), ids(60), ids(390), ids(10), ids(5)]
    segments = group_segments(utterances, 400)
    assert [[u.text for u in s] for s in segments] == [["u100", "u250"], ["u60"], ["u390", "u10"], ["u5"]]
    assert all(sum(len(u.phoneme_ids) for u in s) <= 400 for s in segments)


def test_group_segments_keeps_an_oversized_utterance_alone() -> None:
    assert [len(s) for s in group_segments([ids(10), ids(500), ids(10)], 400)] == [1, 1, 1]


def test_a_blank_line_ends_a_paragraph_with_its_pause(voice_config: VoiceConfig) -> None:
    text = "First sentence. Second one.\n  \nA new paragraph here.\n\n\nThe last one."
    planned = plan_plain(text, PiperFrontEnd(voice_config), 400, paragraph_pause_s=1.25)
    assert [u.pause_after_s for u in planned] == [None, 1.25, 1.25, None]
    flat = plan_plain(text.replace("\n", " "), PiperFrontEnd(voice_config), 400, paragraph_pause_s=1.25)
    assert [u.ids for u in flat] == [u.ids for u in planned]  # the same speech, only the pauses differ
    with pytest.raises(EmptyText):
        plan_plain("\n\n ... \n\n", PiperFrontEnd(voice_config), 400, paragraph_pause_s=1.0)
