"""A job's timing marks, built as its utterances' timings arrive in order.

Each planned utterance of plain text knows the span of the submitted text it speaks (utterances that
espeak-ng made of one piece share it) and whether it starts a sentence; each timing says where its
audio and spoken words lie in the job's audio. A sentence's mark spans its pieces' text and audio;
its words are the letter-or-digit runs of that text, matched to the spoken words by
``tts_core.timing.allocate``, unless the front end said where its words are (Japanese, which has no
spaces: ``PlannedUtterance.words``), when each such word has its own run. Marks come out one
sentence at a time, so a book's marks never have to be held at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tts_core.marks import Mark, MarkType
from tts_core.plan import PlannedUtterance, ReadWord
from tts_core.text_spans import raw_tokens
from tts_core.timing import Run, Span, UtteranceTiming, Weigh, allocate, letter_weight


@dataclass
class _Piece:
    span: tuple[int, int]
    timings: list[UtteranceTiming] = field(default_factory=list)
    read: list[tuple[ReadWord, ...] | None] = field(default_factory=list)
    """Each utterance's words as its front end read them, if it said."""


@dataclass(frozen=True)
class _Word:
    text_start: int
    text_end: int
    audio: Span


class MarkBuilder:
    """Feed every utterance of a job in order with :meth:`add`, then :meth:`finish`; both return the
    marks completed so far: a sentence mark, then its word marks where the timings have words."""

    def __init__(self, text: str, sample_rate: int, weigh: Weigh = letter_weight) -> None:
        """``weigh`` guesses a word's phonemes, to match words with what the model voiced."""
        self._text = text
        self._rate = sample_rate
        self._weigh = weigh
        self._pieces: list[_Piece] = []
        self._last_end_ms = {"sentence": 0, "word": 0}

    def add(self, utterance: PlannedUtterance, timing: UtteranceTiming) -> list[Mark]:
        if utterance.span is None:  # not plain text: nothing to point at
            return []
        if self._pieces and self._pieces[-1].span == utterance.span:
            self._pieces[-1].timings.append(timing)
            self._pieces[-1].read.append(utterance.words)
            return []
        done = self._flush() if utterance.sentence_start else []
        self._pieces.append(_Piece(utterance.span, [timing], [utterance.words]))
        return done

    def finish(self) -> list[Mark]:
        return self._flush()

    def _flush(self) -> list[Mark]:
        pieces, self._pieces = self._pieces, []
        if not pieces:
            return []
        start, end = pieces[0].span[0], pieces[-1].span[1]
        audio = (pieces[0].timings[0].start, pieces[-1].timings[-1].end)
        marks = [self._mark("sentence", start, end, audio)]
        marks.extend(self._mark("word", w.text_start, w.text_end, w.audio) for w in self._sentence_words(pieces))
        return marks

    def _sentence_words(self, pieces: list[_Piece]) -> list[_Word]:
        words: list[_Word] = []
        for piece in pieces:
            read = _read_words(piece)
            if read is not None:  # the front end's words, as it cut them (they may touch)
                words.extend(read)
                continue
            for word in self._piece_words(piece):
                if words and words[-1].text_end == word.text_start:  # a word cut between pieces
                    before = words.pop()
                    word = _Word(before.text_start, word.text_end, (before.audio[0], word.audio[1]))
                words.append(word)
        return words

    def _piece_words(self, piece: _Piece) -> list[_Word]:
        runs: list[Run] = []
        for timing in piece.timings:
            if timing.words is None:
                return []
            runs.extend(timing.words)
        base, end = piece.span
        spans = [_letters(self._text, base + s, base + e) for s, e in raw_tokens(self._text[base:end])]
        words = [span for span in spans if span is not None]
        whole = (piece.timings[0].start, piece.timings[-1].end)
        audio = allocate([self._text[s:e] for s, e in words], runs, whole, self._weigh)
        return [_Word(s, e, a) for (s, e), a in zip(words, audio, strict=True)]

    def _mark(self, kind: MarkType, text_start: int, text_end: int, audio: Span) -> Mark:
        start_ms = max(self._ms(audio[0]), self._last_end_ms[kind])
        end_ms = max(self._ms(audio[1]), start_ms + 1)
        self._last_end_ms[kind] = end_ms
        return Mark(kind, start_ms, end_ms, text_start, text_end, self._text[text_start:text_end])

    def _ms(self, samples: int) -> int:
        return round(samples * 1000 / self._rate)


def _read_words(piece: _Piece) -> list[_Word] | None:
    """The piece's words as its front end read them, each with its own run; None unless every
    utterance of the piece has them and its timing has a run for each."""
    words: list[_Word] = []
    for read, timing in zip(piece.read, piece.timings, strict=True):
        if read is None or timing.words is None or len(timing.words) != len(read):
            return None
        words.extend(_Word(w.text[0], w.text[1], (run[0], run[1])) for w, run in zip(read, timing.words, strict=True))
    return words


def _letters(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The token's span without the punctuation around it; None if it has no letter or digit."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return (start, end) if start < end else None
