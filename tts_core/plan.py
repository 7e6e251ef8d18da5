"""A job's plan as it is stored and read back: pure data, no front end, so the API can read plans
(progress, streaming) without loading espeak-ng or ONNX Runtime."""

from __future__ import annotations

from dataclasses import dataclass


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

    def to_json(self) -> list[object]:
        """``[ids, rate, after, before]``, then ``[span, sentence_start]`` where it has a span, then
        ``gain`` where it is not 1 (after a null span if need be): plans stored before gains existed
        read the same."""
        spoken: list[object] = [list(self.span), self.sentence_start] if self.span is not None else []
        if self.gain != 1.0:
            spoken = [*(spoken or [None, False]), self.gain]
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
        )
