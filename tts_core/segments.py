"""Cut a job's text into segments: sentences grouped up to a phoneme-id budget.

A segment is the unit of work one worker task synthesises. Every utterance in it fits the budget
(a longer sentence is cut at clause punctuation, then at word boundaries), so no single model call
grows with the user's punctuation habits, and segments are similar in cost for the batcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from tts_core.config import DEFAULT_SEGMENT_IDS, VoiceConfig
from tts_core.errors import EmptyText
from tts_core.phonemes import phoneme_ids, phonemize
from tts_core.text import cut_long, has_speech, normalize_text, split_sentences

_SHRINK: Final = 0.9
"""Safety margin when turning an id budget into a character limit for re-cutting."""


@dataclass(frozen=True)
class Utterance:
    """One piece of text the model speaks in one go, with its phoneme ids."""

    text: str
    phoneme_ids: list[int]

    @property
    def ids(self) -> list[int]:
        return self.phoneme_ids


class FrontEnd(Protocol):
    """An engine's text front end: where its sentences end and what ids the model reads."""

    def sentences(self, text: str) -> list[str]:
        """Sentences of normalised text."""

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        """Model input ids of a sentence: one list per utterance the front end makes of it."""


class PiperFrontEnd:
    """espeak-ng phonemes mapped through the voice's id map, as Piper makes them."""

    def __init__(self, config: VoiceConfig) -> None:
        self._config = config

    def sentences(self, text: str) -> list[str]:
        return split_sentences(text)

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        return [phoneme_ids(p, self._config.phoneme_id_map) for p in phonemize(sentence, self._config.espeak_voice)]


@dataclass(frozen=True)
class PlannedUtterance:
    """An utterance as a job's plan keeps it: model ids, its rate (times the job's speed) and the
    silence around it. ``pause_after_s`` None means the job's sentence pause (none after the job's
    last utterance); a number is exact (an SSML break or paragraph pause)."""

    ids: list[int]
    rate: float = 1.0
    pause_after_s: float | None = None
    pause_before_s: float = 0.0
    """Only a job's first utterance has one: a break before any speech."""

    def to_json(self) -> list[object]:
        return [self.ids, self.rate, self.pause_after_s, self.pause_before_s]

    @classmethod
    def from_json(cls, data: list[object]) -> PlannedUtterance:
        ids, rate, after, before = data
        assert isinstance(ids, list)
        return cls(
            [int(i) for i in ids],
            float(str(rate)),
            None if after is None else float(str(after)),
            float(str(before)),
        )


def plain(utterances: Sequence[Utterance]) -> list[PlannedUtterance]:
    """Utterances of plain text: normal rate, sentence pauses."""
    return [PlannedUtterance(u.phoneme_ids) for u in utterances]


def plan_utterances(text: str, front_end: FrontEnd, max_ids: int = DEFAULT_SEGMENT_IDS) -> list[Utterance]:
    """Normalise, split into sentences, phonemise, and cut any utterance over ``max_ids``.

    Raises :class:`EmptyText` if nothing speakable is left.
    """
    normalized = normalize_text(text)
    if not has_speech(normalized):
        raise EmptyText("text has nothing to speak")
    utterances: list[Utterance] = []
    for sentence in front_end.sentences(normalized):
        utterances.extend(_fit(sentence, front_end, max_ids))
    if not utterances:
        raise EmptyText("text has nothing to speak")
    return utterances


def _fit(sentence: str, front_end: FrontEnd, max_ids: int) -> list[Utterance]:
    """Phonemise ``sentence``; if it exceeds the budget, cut the text shorter and try each piece.

    The id budget is the only limit on an utterance's length: characters say little about how long
    the model's input becomes, phoneme ids say it exactly."""
    utterances = [Utterance(sentence, ids) for ids in front_end.phoneme_ids(sentence) if ids]
    longest = max((len(u.phoneme_ids) for u in utterances), default=0)
    if longest <= max_ids or len(sentence) <= 1:
        return utterances
    ids_per_char = sum(len(u.phoneme_ids) for u in utterances) / len(sentence)
    limit = min(len(sentence) // 2 or 1, max(1, int(max_ids / ids_per_char * _SHRINK)))
    fitted: list[Utterance] = []
    for piece in cut_long(sentence, limit):
        fitted.extend(_fit(piece, front_end, max_ids))
    return fitted


class _HasIds(Protocol):
    @property
    def ids(self) -> list[int]: ...


U = TypeVar("U", bound=_HasIds)


def group_segments(utterances: Sequence[U], max_ids: int = DEFAULT_SEGMENT_IDS) -> list[list[U]]:
    """Pack consecutive utterances into segments whose id counts sum to at most ``max_ids``."""
    segments: list[list[U]] = []
    size = 0
    for utterance in utterances:
        length = len(utterance.ids)
        if segments and size + length <= max_ids:
            segments[-1].append(utterance)
            size += length
        else:
            segments.append([utterance])
            size = length
    return segments
