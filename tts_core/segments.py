"""Cut a job's text into segments: sentences grouped up to a phoneme-id budget.

A segment is the unit of work one worker task synthesises. Every utterance in it fits the budget
(a longer sentence is cut at clause punctuation, then at word boundaries), so no single model call
grows with the user's punctuation habits, and segments are similar in cost for the batcher.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol, TypeVar

from tts_core.config import DEFAULT_SEGMENT_IDS, VoiceConfig
from tts_core.errors import EmptyText
from tts_core.phonemes import phoneme_ids, phonemize
from tts_core.plan import PlannedUtterance
from tts_core.speech_markup import Boundary, Break, Speech, SsmlDocument
from tts_core.text import cut_long, has_speech, normalize_text, split_sentences
from tts_core.text_spans import OffsetMap

_SHRINK: Final = 0.9
"""Safety margin when turning an id budget into a character limit for re-cutting."""


@dataclass(frozen=True)
class Utterance:
    """One piece of text the model speaks in one go, with its phoneme ids."""

    text: str
    phoneme_ids: list[int]
    span: tuple[int, int] | None = None
    """Where the text this utterance speaks lies in the submitted text (its piece: utterances that
    espeak-ng made of one piece share it); None where not tracked (SSML, direct synthesis)."""
    sentence_start: bool = False
    """The first utterance of a sentence (with ``span``): where a sentence mark begins."""

    @property
    def ids(self) -> list[int]:
        return self.phoneme_ids


class FrontEnd(Protocol):
    """An engine's text front end: where its sentences end, what ids the model reads, and how many it
    takes at most (``None``: no limit of its own)."""

    @property
    def max_ids(self) -> int | None:
        """The model's own limit on one utterance's ids, if it has one."""

    def sentences(self, text: str) -> list[str]:
        """Sentences of normalised text."""

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        """Model input ids of a sentence: one list per utterance the front end makes of it."""

    def ipa_ids(self, ipa: str) -> list[int]:
        """Model input ids of phonemes given as IPA (SSML ``<phoneme>``), symbols it lacks dropped."""


class PiperFrontEnd:
    """espeak-ng phonemes mapped through the voice's id map, as Piper makes them."""

    max_ids: int | None = None

    def __init__(self, config: VoiceConfig) -> None:
        self._config = config

    def sentences(self, text: str) -> list[str]:
        return split_sentences(text)

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        return [phoneme_ids(p, self._config.phoneme_id_map) for p in phonemize(sentence, self._config.espeak_voice)]

    def ipa_ids(self, ipa: str) -> list[int]:
        return phoneme_ids(list(ipa), self._config.phoneme_id_map)


def plain(utterances: Sequence[Utterance]) -> list[PlannedUtterance]:
    """Utterances of plain text: normal rate, sentence pauses, their place in the text kept."""
    return [PlannedUtterance(u.phoneme_ids, span=u.span, sentence_start=u.sentence_start) for u in utterances]


PARAGRAPH_BREAK: Final = re.compile(r"\n[^\S\n]*\n")
"""A blank line (perhaps with spaces on it) ends a paragraph of plain text."""


def plan_plain(text: str, front_end: FrontEnd, max_ids: int, paragraph_pause_s: float) -> list[PlannedUtterance]:
    """Plain text: sentences with the job's sentence pause, and ``paragraph_pause_s`` after the last
    utterance of every paragraph but the last, so a narrated book breathes where its paragraphs end.

    Raises :class:`EmptyText` if nothing speakable is left."""
    paragraphs = [(base, p) for base, p in _paragraphs(text) if has_speech(normalize_text(p))]
    if not paragraphs:
        raise EmptyText("text has nothing to speak")
    planned: list[PlannedUtterance] = []
    for number, (base, paragraph) in enumerate(paragraphs, start=1):
        utterances = plain(plan_utterances(paragraph, front_end, max_ids, base))
        if number < len(paragraphs):
            utterances[-1] = replace(utterances[-1], pause_after_s=paragraph_pause_s)
        planned.extend(utterances)
    return planned


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """Paragraphs of plain text with the offset each starts at."""
    paragraphs: list[tuple[int, str]] = []
    start = 0
    for found in PARAGRAPH_BREAK.finditer(text):
        paragraphs.append((start, text[start : found.start()]))
        start = found.end()
    paragraphs.append((start, text[start:]))
    return paragraphs


def plan_utterances(
    text: str, front_end: FrontEnd, max_ids: int = DEFAULT_SEGMENT_IDS, base: int | None = None
) -> list[Utterance]:
    """Normalise, split into sentences, phonemise, and cut any utterance over ``max_ids``. With
    ``base`` (where ``text`` starts in the submitted text), each utterance gets its span there.

    Raises :class:`EmptyText` if nothing speakable is left.
    """
    normalized = normalize_text(text)
    if not has_speech(normalized):
        raise EmptyText("text has nothing to speak")
    offsets = OffsetMap(text, normalized, base) if base is not None else None
    utterances: list[Utterance] = []
    cursor = 0
    for sentence in front_end.sentences(normalized):
        at = normalized.find(sentence, cursor)
        cursor = at + len(sentence) if at >= 0 else cursor
        first = True
        for piece, piece_at, ids in _located(_fit(sentence, front_end, max_ids), sentence, at):
            span = _span(offsets, piece_at, len(piece))
            utterances.append(Utterance(piece, ids, span, first and span is not None))
            first = False
    if not utterances:
        raise EmptyText("text has nothing to speak")
    return utterances


def _located(
    pieces: list[tuple[str, list[list[int]]]], sentence: str, sentence_at: int
) -> Iterator[tuple[str, int, list[int]]]:
    """Each utterance's piece with the piece's offset in the normalised text (-1: unknown)."""
    cursor = 0
    for piece, id_lists in pieces:
        inside = sentence.find(piece, cursor) if sentence_at >= 0 else -1
        cursor = inside + len(piece) if inside >= 0 else cursor
        for ids in id_lists:
            yield piece, sentence_at + inside if inside >= 0 else -1, ids


def _span(offsets: OffsetMap | None, at: int, length: int) -> tuple[int, int] | None:
    if offsets is None or not offsets.usable or at < 0:
        return None
    return offsets.start(at), offsets.end(at + length)


def _fit(sentence: str, front_end: FrontEnd, max_ids: int) -> list[tuple[str, list[list[int]]]]:
    """Phonemise ``sentence``; if it exceeds the budget, cut the text shorter and try each piece.
    Returns each piece with the id lists of the utterances espeak-ng made of it.

    The id budget is the only limit on an utterance's length: characters say little about how long
    the model's input becomes, phoneme ids say it exactly."""
    id_lists = [ids for ids in front_end.phoneme_ids(sentence) if ids]
    longest = max((len(ids) for ids in id_lists), default=0)
    if longest <= max_ids or len(sentence) <= 1:
        return [(sentence, id_lists)] if id_lists else []
    ids_per_char = sum(len(ids) for ids in id_lists) / len(sentence)
    limit = min(len(sentence) // 2 or 1, max(1, int(max_ids / ids_per_char * _SHRINK)))
    fitted: list[tuple[str, list[list[int]]]] = []
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


def plan_ssml(
    document: SsmlDocument, front_end: FrontEnd, max_ids: int, paragraph_pause_s: float
) -> list[PlannedUtterance]:
    """Timed utterances of an SSML document: breaks become exact pauses (several in a row add up; a
    break replaces the sentence or paragraph pause at its place), ``<p>`` ends get the paragraph
    pause, ``<s>`` ends the sentence pause, runs of another rate or an IPA word join without a pause.

    Raises :class:`EmptyText` if nothing in it is speakable.
    """
    planned: list[PlannedUtterance] = []
    owed_break: float | None = None
    boundary: str | None = None
    lead = 0.0
    for piece in document.pieces:
        if isinstance(piece, Break):
            if planned:
                owed_break = (owed_break or 0.0) + piece.seconds
            else:
                lead += piece.seconds
        elif isinstance(piece, Boundary):
            boundary = "paragraph" if "paragraph" in (boundary, piece.kind) else piece.kind
        else:
            ids = _speech_ids(piece, front_end, max_ids)
            if not ids:
                continue
            if planned:
                pause = _pause(owed_break, boundary, paragraph_pause_s)
                planned[-1] = replace(planned[-1], pause_after_s=pause)
            planned.extend(PlannedUtterance(i, rate=piece.rate) for i in ids)
            owed_break, boundary = None, None
    if not planned:
        raise EmptyText("the SSML has nothing to speak")
    if owed_break is not None:
        planned[-1] = replace(planned[-1], pause_after_s=owed_break)
    if lead:
        planned[0] = replace(planned[0], pause_before_s=lead)
    return planned


def _pause(owed_break: float | None, boundary: str | None, paragraph_pause_s: float) -> float | None:
    if owed_break is not None:
        return owed_break
    if boundary == "paragraph":
        return paragraph_pause_s
    return None if boundary == "sentence" else 0.0


def _speech_ids(piece: Speech, front_end: FrontEnd, max_ids: int) -> list[list[int]]:
    if piece.ipa is not None:
        return [front_end.ipa_ids(piece.ipa)]
    try:
        return [u.phoneme_ids for u in plan_utterances(piece.text, front_end, max_ids)]
    except EmptyText:  # punctuation only, say
        return []
