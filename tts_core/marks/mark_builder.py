"""A job's timing marks, built as its utterances' timings arrive in order.

Each planned utterance of plain text knows the span of the submitted text it speaks (utterances that
espeak-ng made of one piece share it) and whether it starts a sentence; each timing says where its
audio and spoken words lie in the job's audio. A sentence's mark spans its pieces' text and audio;
its words are the letter-or-digit runs of that text, matched to the spoken words by
``tts_core.base.timing.allocate``, unless the front end said where its words are (Japanese, which has no
spaces: ``PlannedUtterance.words``), when each such word has its own run. Marks come out one
sentence at a time, so a book's marks never have to be held at once.

Where the timings have phonemes, each goes to the word it is mostly heard in and is kept within
that word's mark, so a phoneme or viseme never strays outside its word; a viseme is its phoneme's,
and a pause of at least :data:`SIL_MIN_MS` between two phonemes is a ``sil`` viseme. An SSML
utterance has no sentence or words: its phonemes point at the SSML it was read from, and each of
its ``<mark>`` elements is heard where its speech starts.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Final

from tts_core.base.plan import PlannedUtterance, ReadWord
from tts_core.base.timing import Phone, Run, Span, UtteranceTiming, Weigh, allocate, letter_weight
from tts_core.marks.speech_marks import MARK_TYPES, Mark, MarkType
from tts_core.marks.visemes import SIL, viseme_of
from tts_core.text.text_spans import raw_tokens

SIL_MIN_MS: Final = 50
"""The shortest pause between phonemes given a ``sil`` viseme: a comma's or a sentence's pause is
longer, the breath between two words of a phrase shorter (the mouth moves straight on)."""

_ORDER: Final = {kind: rank for rank, kind in enumerate(("sentence", "ssml", "word", "phoneme", "viseme"))}
"""How marks that start together are written: a sentence before its words, a word before its phonemes."""


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
    marks completed so far: a sentence mark, then its word marks where the timings have words, and
    phoneme and viseme marks where they have phonemes; SSML marks and phonemes utterance by utterance."""

    def __init__(self, text: str, sample_rate: int, weigh: Weigh = letter_weight) -> None:
        """``weigh`` guesses a word's phonemes, to match words with what the model voiced."""
        self._text = text
        self._rate = sample_rate
        self._weigh = weigh
        self._pieces: list[_Piece] = []
        self._last_end_ms = dict.fromkeys(MARK_TYPES, 0)
        self._last_phoneme: Mark | None = None

    def add(self, utterance: PlannedUtterance, timing: UtteranceTiming) -> list[Mark]:
        if utterance.span is None:  # not plain text: no sentence or words to point at
            return _in_order(self._unspanned(utterance, timing))
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
        sentence = self._mark("sentence", start, end, audio)
        words = self._sentence_words(pieces)
        word_marks = [self._mark("word", w.text_start, w.text_end, w.audio) for w in words]
        phones = [p for piece in pieces for t in piece.timings for p in t.phonemes or ()]
        marks = [sentence, *word_marks, *self._sounds(phones, words, word_marks, sentence)]
        return _in_order(marks)

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
        tokens = [(base + s, base + e) for s, e in raw_tokens(self._text[base:end])]
        found = [(span, token) for token in tokens if (span := _letters(self._text, *token)) is not None]
        whole = (piece.timings[0].start, piece.timings[-1].end)
        # A word is weighed whole, its signs too ("$5" is said "five dollars"), and marked by its letters.
        audio = allocate([self._text[s:e] for _, (s, e) in found], runs, whole, self._weigh)
        return [_Word(s, e, a) for ((s, e), _), a in zip(found, audio, strict=True)]

    def _sounds(self, phones: list[Phone], words: list[_Word], word_marks: list[Mark], sentence: Mark) -> list[Mark]:
        """Phoneme and viseme marks of a sentence: each phoneme within the word it is mostly heard in
        (the sentence, if it has no words)."""
        starts = [w.audio[0] for w in words]
        marks: list[Mark] = []
        for start, end, ipa in phones:
            owner = sentence
            if words:
                middle = (start + end) // 2
                at = max(0, bisect_right(starts, middle) - 1)
                if at + 1 < len(words) and middle - words[at].audio[1] > words[at + 1].audio[0] - middle:
                    at += 1  # in the gap between two words, nearer the next
                owner = word_marks[at]
            marks.extend(self._phoneme(ipa, (start, end), owner))
        return marks

    def _unspanned(self, utterance: PlannedUtterance, timing: UtteranceTiming) -> list[Mark]:
        """An SSML utterance's marks: its ``<mark>`` elements, and its phonemes pointing at its source."""
        heard = timing.words[0][0] if timing.words else timing.start
        marks = [self._point(m.name, m.start, m.end, timing.end if m.after else heard) for m in utterance.marks]
        if utterance.source is not None:
            text_start, text_end = utterance.source
            whole = Mark("phoneme", 0, self._ms(timing.end), text_start, text_end, "")
            for start, end, ipa in timing.phonemes or ():
                marks.extend(self._phoneme(ipa, (start, end), whole))
        return marks

    def _phoneme(self, ipa: str, audio: Span, owner: Mark) -> list[Mark]:
        """A phoneme's mark and its viseme's, kept within ``owner``'s time and pointing at its text;
        a ``sil`` viseme before them if the pause since the last phoneme is long enough. None if
        nothing of it is left inside ``owner`` (a phoneme shorter than a millisecond)."""
        start_ms = max(self._ms(audio[0]), owner.start_ms, self._last_end_ms["phoneme"])
        end_ms = min(self._ms(audio[1]), owner.end_ms)
        if end_ms <= start_ms:
            return []
        phoneme = Mark("phoneme", start_ms, end_ms, owner.text_start, owner.text_end, ipa)
        marks = [phoneme]
        last, self._last_phoneme = self._last_phoneme, phoneme
        self._last_end_ms["phoneme"] = end_ms
        if last is not None and start_ms - last.end_ms >= SIL_MIN_MS:
            same = (last.text_start, last.text_end) == (phoneme.text_start, phoneme.text_end)
            between = (
                (last.text_start, last.text_end) if same else (last.text_end, max(last.text_end, phoneme.text_start))
            )
            marks.append(Mark("viseme", last.end_ms, start_ms, *between, SIL))
        marks.append(replace(phoneme, type="viseme", value=viseme_of(ipa)))
        return marks

    def _point(self, name: str, text_start: int, text_end: int, samples: int) -> Mark:
        """An SSML mark: a point in time, never before the one before it."""
        at = max(self._ms(samples), self._last_end_ms["ssml"])
        self._last_end_ms["ssml"] = at
        return Mark("ssml", at, at, text_start, text_end, name)

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


def _in_order(marks: list[Mark]) -> list[Mark]:
    """Marks as Polly writes them: by time, a sentence before its words and a word before its sounds
    where they start together (each type's own order kept)."""
    return sorted(marks, key=lambda m: (m.start_ms, _ORDER[m.type]))


def _letters(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The token's span without the punctuation around it; None if it has no letter or digit."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return (start, end) if start < end else None
