"""A job's plan as it is stored and read back: pure data, no front end, so the API can read plans
(progress, streaming) without loading espeak-ng or ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadWord:
    """A word as the front end read it (where it says, e.g. Kokoro's Japanese G2P): the ids it
    became and the characters it was read from."""

    ids: tuple[int, int]
    """Index range (end exclusive) in its utterance's ids; it may hold silent ids between its sounds."""
    text: tuple[int, int]
    """Offsets (end exclusive) in the text: the text given to the front end, or, in a plan, the
    submitted text."""


@dataclass(frozen=True)
class MarkPoint:
    """An SSML ``<mark>`` as a plan keeps it: its name and the element's span in the submitted SSML.
    It is heard where the utterance that holds it starts to sound, or, ``after``, where it ends (a
    mark after the document's last speech)."""

    name: str
    start: int
    end: int
    after: bool = False

    def to_json(self) -> list[object]:
        return [self.name, self.start, self.end, self.after]

    @classmethod
    def from_json(cls, data: object) -> MarkPoint:
        assert isinstance(data, list)
        name, start, end, after = data
        return cls(str(name), int(start), int(end), bool(after))


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
    span: tuple[int, int] | None = None
    """Offsets in the submitted text of the piece it speaks (plain text only): what marks point at."""
    sentence_start: bool = False
    """It begins a sentence of the text (with ``span``)."""
    gain: float = 1.0
    """A factor on its samples (SSML ``<prosody volume>``; 0 is silent)."""
    words: tuple[ReadWord, ...] | None = None
    """Its words where the front end says where they are (in order, text in the submitted text);
    None where words are found from the spaces of the text."""
    source: tuple[int, int] | None = None
    """Offsets in the submitted SSML of what it was read from (SSML only): what its phoneme marks
    point at."""
    marks: tuple[MarkPoint, ...] = ()
    """SSML ``<mark>`` elements heard where it starts (or, ``after``, ends)."""

    def to_json(self) -> list[object]:
        """``[ids, rate, after, before]``, then ``[span, sentence_start]`` where it has a span, then
        ``gain`` where it is not 1, then the words as one flat list ``[first_id, end_id, text_start,
        text_end, ...]`` (or null), then ``[source, marks]`` (each after the defaults of those before
        it, where something after it is set): plans stored before gains, words or SSML marks existed
        read the same."""
        spoken: list[object] = [list(self.span), self.sentence_start] if self.span is not None else []
        ssml = self.source is not None or bool(self.marks)
        if self.gain != 1.0 or self.words is not None or ssml:
            spoken = [*(spoken or [None, False]), self.gain]
        if self.words is not None or ssml:
            spoken.append(None if self.words is None else [n for word in self.words for n in (*word.ids, *word.text)])
        if ssml:
            source = None if self.source is None else list(self.source)
            spoken += [source, [m.to_json() for m in self.marks]]
        return [self.ids, self.rate, self.pause_after_s, self.pause_before_s, *spoken]

    @classmethod
    def from_json(cls, data: list[object]) -> PlannedUtterance:
        ids, rate, after, before, *spoken = data
        assert isinstance(ids, list)
        span: tuple[int, int] | None = None
        if spoken and spoken[0] is not None:
            where = spoken[0]
            assert isinstance(where, list)
            span = (int(where[0]), int(where[1]))
        return cls(
            [int(i) for i in ids],
            float(str(rate)),
            None if after is None else float(str(after)),
            float(str(before)),
            span,
            bool(spoken[1]) if spoken else False,
            float(str(spoken[2])) if len(spoken) > 2 else 1.0,
            _words(spoken[3]) if len(spoken) > 3 and spoken[3] is not None else None,
            _span(spoken[4]) if len(spoken) > 4 else None,
            tuple(MarkPoint.from_json(m) for m in spoken[5]) if len(spoken) > 5 else (),  # type: ignore[attr-defined]
        )


def _words(flat: object) -> tuple[ReadWord, ...]:
    assert isinstance(flat, list)
    numbers = [int(n) for n in flat]
    return tuple(
        ReadWord((numbers[k], numbers[k + 1]), (numbers[k + 2], numbers[k + 3])) for k in range(0, len(numbers), 4)
    )


def _span(data: object) -> tuple[int, int] | None:
    if data is None:
        return None
    assert isinstance(data, list)
    return int(data[0]), int(data[1])
