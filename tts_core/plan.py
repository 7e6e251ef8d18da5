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

    def to_json(self) -> list[object]:
        """``[ids, rate, after, before]``, then ``[span, sentence_start]`` where it has a span, then
        ``gain`` where it is not 1 or words follow (after a null span if need be), then the words as
        one flat list ``[first_id, end_id, text_start, text_end, ...]`` where it has them: plans
        stored before gains or words existed read the same."""
        spoken: list[object] = [list(self.span), self.sentence_start] if self.span is not None else []
        if self.gain != 1.0 or self.words is not None:
            spoken = [*(spoken or [None, False]), self.gain]
        if self.words is not None:
            spoken.append([n for word in self.words for n in (*word.ids, *word.text)])
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
            _words(spoken[3]) if len(spoken) > 3 else None,
        )


def _words(flat: object) -> tuple[ReadWord, ...]:
    assert isinstance(flat, list)
    numbers = [int(n) for n in flat]
    return tuple(
        ReadWord((numbers[k], numbers[k + 1]), (numbers[k + 2], numbers[k + 3])) for k in range(0, len(numbers), 4)
    )
