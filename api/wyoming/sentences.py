"""Streamed text (``synthesize-chunk`` events) cut into sentences as they complete, so the first can be
spoken while a language model is still writing the rest."""

from __future__ import annotations

import re
from typing import Final

from tts_core.errors import TextTooLong
from tts_core.text import split_sentences

FULL_STOP: Final = re.compile(r"(?<=[。！？])")
"""Japanese ends a sentence without the space ``split_sentences`` waits for; cut after each full stop."""


class SentenceBuffer:
    """The text of one stream: complete sentences out once the next has begun; the last kept until
    more text or the stream's end, since it may still grow. The whole stream may hold at most
    ``max_chars`` characters, as one ``synthesize`` may."""

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._received = 0
        self._text = ""

    def add(self, text: str, cut: bool = True) -> str | None:
        """The sentences this text completed, as one text; None while the first is still open (and
        always without ``cut``: the whole is then given by :meth:`finish`)."""
        self._received += len(text)
        if self._received > self._max_chars:
            raise TextTooLong(self._received, self._max_chars)
        self._text += text
        if not cut:
            return None
        sentences = sentences_of(self._text)
        if len(sentences) < 2:
            return None
        done = sentences[:-1]
        self._text = self._text[_end_of(self._text, sum(_visible(s) for s in done)) :]
        return " ".join(done)

    def finish(self) -> str:
        """What is left at the stream's end."""
        rest, self._text = self._text.strip(), ""
        return rest


def sentences_of(text: str) -> list[str]:
    """``split_sentences``, with Japanese full stops ending sentences too."""
    return [part for sentence in split_sentences(text) for part in FULL_STOP.split(sentence) if part]


def _visible(text: str) -> int:
    return sum(not ch.isspace() for ch in text)


def _end_of(text: str, visible: int) -> int:
    """Where the first ``visible`` non-space characters of ``text`` end: sentences keep every
    non-space character in order (the split consumes only spaces), so this finds where the kept,
    incomplete sentence begins in the raw text."""
    seen = 0
    for index, ch in enumerate(text):
        if seen == visible:
            return index
        seen += not ch.isspace()
    return len(text)
