"""Streamed text (``synthesize-chunk`` events) cut into sentences as they complete, so the first can be
spoken while a language model is still writing the rest.

Each chunk is looked at once, with a bounded window of the text before it: whether a sentence ends
depends only on the few characters around its end (``tts_core.text.sentences.ABBREVIATION_CONTEXT``), so a
stream costs time linear in its length however it is cut (re-splitting the whole open text for every
chunk was quadratic over a stream, on the event loop of every Wyoming client).
"""

from __future__ import annotations

import re
from typing import Final

from tts_core.base.errors import TextTooLong
from tts_core.text.sentences import ABBREVIATION_CONTEXT, split_sentences

FULL_STOP: Final = re.compile(r"(?<=[。！？])")
"""Japanese ends a sentence without the space ``split_sentences`` waits for; cut after each full stop."""

LOOKBACK: Final = 2 * ABBREVIATION_CONTEXT
"""Characters of already-read text scanned again with a chunk: more than a sentence end depends on
(its last word, a closing quote and the period), so a sentence end found in the window is one in the
whole text, and one the window cuts short is never taken."""


class SentenceBuffer:
    """The text of one stream: complete sentences out once the next has begun; the last kept until
    more text or the stream's end, since it may still grow. The whole stream may hold at most
    ``max_chars`` characters, as one ``synthesize`` may.

    The open sentence is kept as ``_held`` (read: no sentence end can come in it) and ``_open`` (the
    window the next chunk is read with). A sentence end not yet decided can only be at ``_pending``
    or after, in ``_open``: where the text's trailing spaces begin, which the next chunk's first
    character decides."""

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._received = 0
        self._held: list[str] = []
        self._open: list[str] = []
        self._pending = 0

    def add(self, text: str, cut: bool = True) -> str | None:
        """The sentences this text completed, as one text; None while the first is still open (and
        always without ``cut``: the whole is then given by :meth:`finish`)."""
        self._received += len(text)
        if self._received > self._max_chars:
            raise TextTooLong(self._received, self._max_chars)
        if not cut or not text.strip():  # no sentence is complete until something follows its end
            self._open.append(text)
            return None
        window = "".join([*self._open, text])
        end = self._completed(window)
        done = None
        if end:
            done = " ".join(sentences_of("".join([*self._held, window[:end]])))
            self._held, window = [], window[end:]
        self._pending = len(window) - (len(text) - len(text.rstrip()))
        keep = max(0, self._pending - LOOKBACK)
        self._held.append(window[:keep])
        self._open, self._pending = [window[keep:]], self._pending - keep
        return done

    def _completed(self, window: str) -> int:
        """Where the open sentence's last complete sentence ends in ``window``, 0 if none has."""
        sentences = sentences_of(window)
        if len(sentences) < 2:
            return 0
        end = _end_of(window, sum(_visible(s) for s in sentences[:-1]))
        return end if end >= self._pending else 0  # one before it was decided with less text: none

    def finish(self) -> str:
        """What is left at the stream's end."""
        rest = "".join([*self._held, *self._open]).strip()
        self._held, self._open, self._pending = [], [], 0
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
