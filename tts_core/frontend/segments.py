"""Cut a job's text into segments: sentences grouped up to a phoneme-id budget.

A segment is the unit of work one worker task synthesises. Every utterance in it fits the budget
(a longer sentence is cut at clause punctuation, then at word boundaries), so no single model call
grows with the user's punctuation habits, and segments are similar in cost for the batcher. A
segment's pauses count toward its budget (:data:`IDS_PER_PAUSE_SECOND`), so the silence a segment
holds in memory is bounded as its speech is.

Planning is lazy (:func:`iter_plain`, :func:`iter_ssml`, :func:`iter_segments`): a caller that stops
at a segment limit has phonemised only what came before it, and a sentence longer than
:data:`LONG_SENTENCE_CHARS` is cut by characters before it is phonemised at all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol, TypeVar, runtime_checkable

from tts_core.base.config import DEFAULT_SEGMENT_IDS, VoiceConfig
from tts_core.base.errors import EmptyText, PauseTooLong
from tts_core.base.plan import MarkPoint, PlannedUtterance, ReadWord
from tts_core.frontend.phonemes import phoneme_ids, phonemize
from tts_core.lexicon.lexicon import IPA_SYLLABLE_MARKS
from tts_core.text.first_part import CLAUSE_PAUSE_S, ends_at_cut, first_cuts, pieces
from tts_core.text.pauses import MAX_PAUSE_AT_ONE_PLACE_S, between
from tts_core.text.sentences import cut_long, has_speech, normalize_text, split_sentences
from tts_core.text.speech_markup import Boundary, Break, MarkElement, Speech, SsmlDocument
from tts_core.text.spoken_text import SpokenPart
from tts_core.text.text_spans import OffsetMap

_SHRINK: Final = 0.9
"""Safety margin when turning an id budget into a character limit for re-cutting."""

LONG_SENTENCE_CHARS: Final = 1000
"""A sentence longer than this is cut (at clauses, then words, then hard) before it is phonemised:
every utterance fits far fewer characters (400 ids are about 200 of prose, 30 digits), and a
1,000,000-digit "sentence" phonemised whole held hundreds of MB before it was cut."""

IDS_PER_PAUSE_SECOND: Final = 40
"""What a second of silence weighs in a segment's id budget: about what a second of Piper speech
does (0.027 s an id). A segment of 400 ids then holds at most about 10 s of speech and pauses
together, plus one utterance's own pauses."""


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
    words: tuple[ReadWord, ...] | None = None
    """Its words, text offsets in the submitted text, where the front end says where they are (a
    :class:`WordReader`) and ``span`` is known."""
    clause_end: bool = False
    """It ends a clause its sentence was cut at for streaming (:mod:`tts_core.text.first_part`): a
    :data:`CLAUSE_PAUSE_S` pause follows, not the sentence pause."""

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


@dataclass(frozen=True)
class Reading:
    """One utterance's ids as a :class:`WordReader` made them, with its words (text offsets in the
    sentence it was given)."""

    ids: list[int]
    words: tuple[ReadWord, ...] | None = None


@runtime_checkable
class WordReader(Protocol):
    """A front end that also says where its words are, for text whose words are not cut by spaces
    (Japanese): word marks then come from its own segmentation."""

    def read(self, sentence: str) -> list[Reading]:
        """What :meth:`FrontEnd.phoneme_ids` gives, one :class:`Reading` per utterance."""


def _read(front_end: FrontEnd, sentence: str) -> list[Reading]:
    if isinstance(front_end, WordReader):
        return front_end.read(sentence)
    return [Reading(ids) for ids in front_end.phoneme_ids(sentence)]


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

    def read_parts(self, parts: Sequence[SpokenPart]) -> list[Reading]:
        """Text runs phonemised by espeak-ng and IPA runs spliced in as words of the sentence around
        them (one utterance, not one per pronunciation), so a lexicon's IPA keeps the sentence's flow."""
        sentences: list[list[str]] = []
        continues = False
        for index, part in enumerate(parts):
            if part.ipa:
                word = [" ", *(symbol for symbol in part.text if symbol not in IPA_SYLLABLE_MARKS), " "]
                if sentences:
                    sentences[-1] = _joined(sentences[-1], word)
                else:
                    sentences.append(word[1:])
                continues = True
                continue
            pieces = self._phonemes_before(part.text, index + 1 < len(parts))
            if continues and pieces and sentences:
                sentences[-1] = _joined(sentences[-1], pieces.pop(0))
            sentences.extend(pieces)
            continues = False
        return [Reading(phoneme_ids(_trimmed(s), self._config.phoneme_id_map)) for s in sentences if _trimmed(s)]

    def _phonemes_before(self, text: str, before_ipa: bool) -> list[list[str]]:
        """Phonemes of a text run; one that ends in a word before IPA is read with a stand-in word
        after it (then dropped), since espeak-ng says a last word as it would end a sentence ("a"
        as the letter's name)."""
        if not has_speech(text):  # punctuation between pronunciations: espeak-ng would name it ("exclamation")
            marks = [ch for ch in text.strip() if ch in self._config.phoneme_id_map]
            return [marks] if marks else []
        stripped = text.rstrip()
        if not (before_ipa and stripped and stripped[-1].isalnum()):
            return phonemize(text, self._config.espeak_voice)
        sentences = phonemize(f"{stripped} {STAND_IN_WORD}", self._config.espeak_voice)
        stand_in = [" ", *STAND_IN_PHONEMES]
        if sentences and sentences[-1][-len(stand_in) :] == stand_in:
            sentences[-1] = sentences[-1][: -len(stand_in)]
            return [s for s in sentences if s]
        return phonemize(text, self._config.espeak_voice)


def _joined(first: list[str], second: list[str]) -> list[str]:
    """Two phoneme runs as one, with one space where both bring one."""
    if first and second and first[-1] == " " and (second[0] == " " or not second[0].isalpha()):
        first = first[:-1]  # one space, and none before punctuation (as espeak-ng writes it)
    return [*first, *second]


def _trimmed(phonemes: list[str]) -> list[str]:
    start, end = 0, len(phonemes)
    while start < end and phonemes[start] == " ":
        start += 1
    while end > start and phonemes[end - 1] == " ":
        end -= 1
    return phonemes[start:end]


STAND_IN_WORD: Final = "thing"
"""Read after a text run that IPA follows, so its last word is said as mid-sentence."""
STAND_IN_PHONEMES: Final = ("θ", "ˈ", "\u026a", "ŋ")
"""What espeak-ng (en-us) makes of :data:`STAND_IN_WORD`; where its output ends otherwise, the run
is read alone."""


def plain(utterances: Iterable[Utterance]) -> Iterator[PlannedUtterance]:
    """Utterances of plain text: normal rate, sentence pauses, their place in the text kept."""
    return (
        PlannedUtterance(
            u.phoneme_ids,
            pause_after_s=CLAUSE_PAUSE_S if u.clause_end else None,
            span=u.span,
            sentence_start=u.sentence_start,
            words=u.words,
        )
        for u in utterances
    )


PARAGRAPH_BREAK: Final = re.compile(r"\n[^\S\n]*\n")
"""A blank line (perhaps with spaces on it) ends a paragraph of plain text."""


def plan_plain(text: str, front_end: FrontEnd, max_ids: int, paragraph_pause_s: float) -> list[PlannedUtterance]:
    """Plain text: sentences with the job's sentence pause, and ``paragraph_pause_s`` after the last
    utterance of every paragraph but the last, so a narrated book breathes where its paragraphs end.

    Raises :class:`EmptyText` if nothing speakable is left."""
    return list(iter_plain(text, front_end, max_ids, paragraph_pause_s))


def iter_plain(
    text: str,
    front_end: FrontEnd,
    max_ids: int,
    paragraph_pause_s: float,
    first_clause: bool = False,
    speed: float = 1.0,
) -> Iterator[PlannedUtterance]:
    """:func:`plan_plain`, one utterance at a time (each paragraph's last is held back until the
    next paragraph shows it is not the text's last). ``first_clause``: the first sentence is cut
    after its first clause for streaming, its pieces paced for speech at ``speed``
    (:mod:`tts_core.text.first_part`)."""
    paragraphs = [(base, p) for base, p in _paragraphs(text) if has_speech(normalize_text(p))]
    if not paragraphs:
        raise EmptyText("text has nothing to speak")
    held: PlannedUtterance | None = None
    for base, paragraph in paragraphs:
        if held is not None:
            yield replace(held, pause_after_s=paragraph_pause_s)
            held = None
        cut_first, first_clause = first_clause, False
        for utterance in plain(iter_utterances(paragraph, front_end, max_ids, base, cut_first, speed)):
            if held is not None:
                yield held
            held = utterance
    if held is None:
        raise EmptyText("text has nothing to speak")
    yield held


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
    utterances = list(iter_utterances(text, front_end, max_ids, base))
    if not utterances:
        raise EmptyText("text has nothing to speak")
    return utterances


def iter_utterances(
    text: str,
    front_end: FrontEnd,
    max_ids: int = DEFAULT_SEGMENT_IDS,
    base: int | None = None,
    first_clause: bool = False,
    speed: float = 1.0,
) -> Iterator[Utterance]:
    """:func:`plan_utterances`, one utterance at a time (none at all for text with nothing to say);
    ``first_clause``: the first sentence cut after its first clause, paced for speech at ``speed``
    (:func:`tts_core.text.first_part.first_cuts`)."""
    normalized = normalize_text(text)
    if not has_speech(normalized):
        return
    offsets = OffsetMap(text, normalized, base) if base is not None else None
    cursor = 0
    for index, sentence in enumerate(front_end.sentences(normalized)):
        at = normalized.find(sentence, cursor)
        cursor = at + len(sentence) if at >= 0 else cursor
        cuts = first_cuts(sentence, front_end, speed) if first_clause and index == 0 else []
        first = True
        clauses = pieces(sentence, cuts) if cuts else [(0, len(sentence))]
        for number, (start, end) in enumerate(clauses):
            clause = sentence[start:end]
            located = _located(_fit_long(clause, front_end, max_ids), clause, at + start if at >= 0 else -1)
            for (piece, piece_at, reading), last_of_clause in _marking_last(located):
                span = _span(offsets, piece_at, len(piece))
                words = None
                if span is not None and offsets is not None and reading.words is not None:
                    words = tuple(_located_word(offsets, piece_at, word) for word in reading.words)
                clause_end = number < len(clauses) - 1 and last_of_clause
                yield Utterance(piece, reading.ids, span, first and span is not None, words, clause_end)
                first = False


T = TypeVar("T")


def _marking_last(items: Iterable[T]) -> Iterator[tuple[T, bool]]:
    """Each item with whether it is the last, reading one ahead: a clause is phonemised piece by
    piece as its utterances are taken, never whole first (a million characters with no sentence end
    would be read in full, about a minute of espeak-ng, before a plan limit could stop it)."""
    iterator = iter(items)
    for current in iterator:
        for following in iterator:
            yield current, False
            current = following
        yield current, True


def _located_word(offsets: OffsetMap, piece_at: int, word: ReadWord) -> ReadWord:
    """A word of a piece, its text offsets moved from the piece into the submitted text."""
    start, end = word.text
    return ReadWord(word.ids, (offsets.start(piece_at + start), offsets.end(piece_at + end)))


def _fit_long(sentence: str, front_end: FrontEnd, max_ids: int) -> Iterator[tuple[str, list[Reading]]]:
    """:func:`_fit` of each piece of a sentence cut to :data:`LONG_SENTENCE_CHARS` first."""
    for piece in cut_long(sentence, LONG_SENTENCE_CHARS):
        yield from _fit(piece, front_end, max_ids)


def _located(
    pieces: Iterable[tuple[str, list[Reading]]], sentence: str, sentence_at: int
) -> Iterator[tuple[str, int, Reading]]:
    """Each utterance's piece with the piece's offset in the normalised text (-1: unknown)."""
    cursor = 0
    for piece, readings in pieces:
        inside = sentence.find(piece, cursor) if sentence_at >= 0 else -1
        cursor = inside + len(piece) if inside >= 0 else cursor
        for reading in readings:
            yield piece, sentence_at + inside if inside >= 0 else -1, reading


def _span(offsets: OffsetMap | None, at: int, length: int) -> tuple[int, int] | None:
    if offsets is None or not offsets.usable or at < 0:
        return None
    return offsets.start(at), offsets.end(at + length)


def _fit(sentence: str, front_end: FrontEnd, max_ids: int) -> list[tuple[str, list[Reading]]]:
    """Phonemise ``sentence``; if it exceeds the budget, cut the text shorter and try each piece.
    Returns each piece with the readings (id lists) of the utterances espeak-ng made of it.

    The id budget is the only limit on an utterance's length: characters say little about how long
    the model's input becomes, phoneme ids say it exactly."""
    readings = [reading for reading in _read(front_end, sentence) if reading.ids]
    longest = max((len(r.ids) for r in readings), default=0)
    if longest <= max_ids:
        return [(sentence, readings)] if readings else []
    if len(sentence) <= 1:  # one character said at length (a lexicon's long alias): its ids cut instead
        return [(sentence, [cut for reading in readings for cut in _cut_ids(reading, max_ids)])]
    ids_per_char = sum(len(r.ids) for r in readings) / len(sentence)
    limit = min(len(sentence) // 2 or 1, max(1, int(max_ids / ids_per_char * _SHRINK)))
    fitted: list[tuple[str, list[Reading]]] = []
    for piece in cut_long(sentence, limit):
        fitted.extend(_fit(piece, front_end, max_ids))
    return fitted


def _cut_ids(reading: Reading, max_ids: int) -> list[Reading]:
    """A reading longer than ``max_ids`` as several, each framed by the reading's first and last id
    (the model's start and end symbols) and without words (no text is left to cut them by)."""
    if len(reading.ids) <= max_ids:
        return [reading]
    first, *inner, last = reading.ids
    step = max(1, max_ids - 2)
    return [Reading([first, *inner[at : at + step], last]) for at in range(0, len(inner), step)]


class _HasIds(Protocol):
    @property
    def ids(self) -> list[int]: ...


U = TypeVar("U", bound=_HasIds)


def group_segments(
    utterances: Iterable[U], max_ids: int = DEFAULT_SEGMENT_IDS, sentence_pause_s: float = 0.0
) -> list[list[U]]:
    """Pack consecutive utterances into segments whose weights sum to at most ``max_ids``."""
    return list(iter_segments(utterances, max_ids, sentence_pause_s))


def iter_segments(
    utterances: Iterable[U], max_ids: int = DEFAULT_SEGMENT_IDS, sentence_pause_s: float = 0.0
) -> Iterator[list[U]]:
    """:func:`group_segments`, one segment at a time. An utterance weighs its ids plus its pauses
    (``IDS_PER_PAUSE_SECOND`` a second; a pause of None is ``sentence_pause_s``)."""
    segment: list[U] = []
    size = 0
    for utterance in utterances:
        weight = len(utterance.ids) + round(_pause_s(utterance, sentence_pause_s) * IDS_PER_PAUSE_SECOND)
        if segment and size + weight > max_ids:
            yield segment
            segment, size = [], 0
        segment.append(utterance)
        size += weight
    if segment:
        yield segment


def iter_stream_segments(
    utterances: Iterable[PlannedUtterance], max_ids: int = DEFAULT_SEGMENT_IDS, sentence_pause_s: float = 0.0
) -> Iterator[list[PlannedUtterance]]:
    """A streamed job's segments: its first utterance alone, and while it ended at a clause cut
    (``iter_plain(first_clause=True)``) the next alone too, so the rest of the first sentence is
    streamed as soon as it is made; then :func:`iter_segments` of the rest."""
    rest = iter(utterances)
    for utterance in rest:
        yield [utterance]
        if not ends_at_cut(utterance):
            break
    yield from iter_segments(rest, max_ids, sentence_pause_s)


def _pause_s(utterance: object, sentence_pause_s: float) -> float:
    """The silence around an utterance of a plan (none for a bare utterance, which has no pauses)."""
    if not isinstance(utterance, PlannedUtterance):
        return 0.0
    after = sentence_pause_s if utterance.pause_after_s is None else utterance.pause_after_s
    return after + utterance.pause_before_s


def plan_ssml(
    document: SsmlDocument, front_end: FrontEnd, max_ids: int, paragraph_pause_s: float
) -> list[PlannedUtterance]:
    """Timed utterances of an SSML document: breaks become exact pauses (several in a row add up, to
    at most ``MAX_PAUSE_AT_ONE_PLACE_S``; a break replaces the sentence or paragraph pause at its
    place), ``<p>`` ends get the paragraph pause, ``<s>`` ends the sentence pause, runs of another
    rate or an IPA word join without a pause. A ``<mark>`` goes with the utterance after it (or,
    after the last speech, with the last utterance, heard at its end); each utterance keeps the span
    of SSML it was read from.

    Raises :class:`EmptyText` if nothing in it is speakable, :class:`PauseTooLong` for too long a pause.
    """
    return list(iter_ssml(document, front_end, max_ids, paragraph_pause_s))


def iter_ssml(
    document: SsmlDocument, front_end: FrontEnd, max_ids: int, paragraph_pause_s: float
) -> Iterator[PlannedUtterance]:
    """:func:`plan_ssml`, one utterance at a time (each is held back until the pause after it is known)."""
    held: PlannedUtterance | None = None
    owed_break: float | None = None
    boundary: str | None = None
    lead = 0.0
    spoken = 0
    marks: list[MarkPoint] = []
    for piece in document.pieces:
        if isinstance(piece, Break):
            owed_break, lead = _added_break(piece.seconds, held is not None, owed_break, lead, spoken)
        elif isinstance(piece, Boundary):
            boundary = "paragraph" if "paragraph" in (boundary, piece.kind) else piece.kind
        elif isinstance(piece, MarkElement):
            marks.append(MarkPoint(piece.name, piece.start, piece.end))
        else:
            for n, utterance in enumerate(_speech_utterances(piece, front_end, max_ids)):
                if n == 0:
                    utterance, marks = _with_marks(utterance, marks), []
                    spoken += 1
                    if held is not None:
                        yield replace(held, pause_after_s=between(owed_break, boundary, paragraph_pause_s))
                    if spoken == 1 and lead:
                        utterance = replace(utterance, pause_before_s=lead)
                    owed_break, boundary = None, None
                else:
                    assert held is not None
                    yield held
                held = utterance
    if held is None:
        raise EmptyText("the SSML has nothing to speak")
    held = _with_marks(held, [replace(m, after=True) for m in marks])
    yield held if owed_break is None else replace(held, pause_after_s=owed_break)


def _with_marks(utterance: PlannedUtterance, marks: list[MarkPoint]) -> PlannedUtterance:
    return replace(utterance, marks=(*utterance.marks, *marks)) if marks else utterance


def _added_break(
    seconds: float, after_speech: bool, owed_break: float | None, lead: float, spoken: int
) -> tuple[float | None, float]:
    """A break added to the silence owed after the last speech (or, before any, to the lead);
    :class:`PauseTooLong` once breaks in a row pass ``MAX_PAUSE_AT_ONE_PLACE_S``."""
    if after_speech:
        owed_break = (owed_break or 0.0) + seconds
    else:
        lead += seconds
    if max(owed_break or 0.0, lead) > MAX_PAUSE_AT_ONE_PLACE_S:
        raise PauseTooLong(max(owed_break or 0.0, lead), spoken + 1, MAX_PAUSE_AT_ONE_PLACE_S)
    return owed_break, lead


def _speech_utterances(piece: Speech, front_end: FrontEnd, max_ids: int) -> Iterator[PlannedUtterance]:
    """The utterances of one piece of speech, one at a time: its sentences (each within the budget),
    or its IPA cut into pieces within the budget, which join without a pause."""
    if piece.ipa is not None:
        for ids in ipa_pieces(piece.ipa, front_end, max_ids):
            yield PlannedUtterance(ids, rate=piece.rate, pause_after_s=0.0, gain=piece.gain, source=piece.source)
        return
    try:
        utterances = plan_utterances(piece.text, front_end, max_ids)
    except EmptyText:  # punctuation only, say
        return
    for utterance in utterances:
        yield PlannedUtterance(utterance.phoneme_ids, rate=piece.rate, gain=piece.gain, source=piece.source)


def ipa_pieces(ipa: str, front_end: FrontEnd, max_ids: int) -> Iterator[list[int]]:
    """Model ids of phonemes given as IPA, in pieces of at most ``max_ids`` ids (:func:`ipa_spans`),
    so no pronunciation reaches the model longer than any planned sentence."""
    for start, end in ipa_spans(ipa, front_end, max_ids):
        ids = front_end.ipa_ids(ipa[start:end])
        if len(ids) > 2:  # more than the ids around an utterance: a piece of spaces says nothing
            yield ids


def ipa_spans(ipa: str, front_end: FrontEnd, max_ids: int) -> Iterator[tuple[int, int]]:
    """Where to cut IPA so that each piece makes at most ``max_ids`` ids: before a space where the
    piece has one. A piece is read from a window of at most ``max_ids`` characters (each symbol is
    one id or more), so the work is linear in the IPA's length."""
    start = 0
    while start < len(ipa):
        end = min(len(ipa), start + max_ids)
        ids = len(front_end.ipa_ids(ipa[start:end]))
        while ids > max_ids and end - start > 1:
            shorter = start + max(1, (end - start) * max_ids // ids)
            space = ipa.rfind(" ", start + 1, shorter + 1)
            end = space if space > start else min(shorter, end - 1)
            ids = len(front_end.ipa_ids(ipa[start:end]))
        yield start, end
        start = end
