"""OpenJTalk's analysis for the VOICEVOX API, run in a child process of the API.

pyopenjtalk-plus loads ONNX Runtime as it is imported (its model for reading 何), and the API
process never loads the inference runtime (``tests/test_process_footprint.py``): so the analysis
(``tts_core.frontend.accent_analysis``, text only, no synthesis) runs in one spawned process, started on the
first Japanese query, which also keeps a crash in OpenJTalk's C code out of the API. The child is
replaced after :data:`DICTIONARIES_PER_CHILD` user dictionaries, so tenants changing theirs cannot
grow it without bound.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Final

from tts_core.base.errors import SynthesisError
from tts_core.frontend.mora_kana import KanaPhrase
from tts_core.lexicon.lexicon import LexiconEntry

ANALYSIS_PROCESSES: Final = 1
"""Processes analysing text: a short message takes about a millisecond, so one serves hundreds of
queries a second; each more would map OpenJTalk's dictionary again."""
ANALYSIS_TIMEOUT_S: Final = 60.0
"""The longest a query waits for its analysis (the first one includes the child's start, under a second)."""

DICTIONARIES_PER_CHILD: Final = 8
"""User dictionaries a child loads before it is replaced (after the query that loaded the last). Each
OpenJTalk instance maps the system dictionary again: measured, a child of 190 MiB reached 392 MiB
after 16 small dictionaries and 260 MiB after 8; a new child starts in about a second."""

_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()


def analyse(text: str, entries: Sequence[LexiconEntry] = ()) -> list[KanaPhrase]:
    """The text's accent phrases (``entries``: a lexicon's readings, as a user dictionary); a child
    that died is replaced once, then :class:`SynthesisError`."""
    for attempt in range(2):
        pool = _executor()
        try:
            phrases, spent = pool.submit(_analyse, text, tuple(entries)).result(timeout=ANALYSIS_TIMEOUT_S)
        except BrokenProcessPool:
            _discard(pool, cancel_futures=True)
            if attempt:
                raise SynthesisError("the text analysis process failed") from None
            continue
        if spent:
            _discard(pool, cancel_futures=False)  # queries already given to it are answered
        return phrases
    raise AssertionError("unreachable")


def _analyse(text: str, entries: tuple[LexiconEntry, ...]) -> tuple[list[KanaPhrase], bool]:
    """In the child: the only place that imports pyopenjtalk. The phrases, and whether the child has
    loaded its :data:`DICTIONARIES_PER_CHILD` and is to be replaced."""
    from tts_core.frontend.accent_analysis import accent_phrases, dictionaries_loaded

    return accent_phrases(text, entries), dictionaries_loaded() >= DICTIONARIES_PER_CHILD


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # spawn: the API runs threads, and a fork of a threaded process may inherit held locks.
            _pool = ProcessPoolExecutor(ANALYSIS_PROCESSES, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _discard(pool: ProcessPoolExecutor, *, cancel_futures: bool) -> None:
    """Give no more work to ``pool``; its child exits once idle (at once if it died)."""
    global _pool
    with _lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=cancel_futures)
