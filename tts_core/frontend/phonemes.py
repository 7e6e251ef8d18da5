"""Phonemisation with espeak-ng exactly as Piper voices were trained, and Piper's id scheme.

What reaches espeak-ng is bounded: no run of characters without a space longer than
:data:`MAX_TOKEN_CHARS` (longer ones are read in pieces) and no call longer than
:data:`MAX_CALL_CHARS` (longer text is phonemised piece by piece, cut at spaces). espeak-ng is native
code in the worker's own process; an input it cannot take kills the worker, not just the job.

``piper-phonemize-fix`` (import name ``piper_phonemize``: the same C++ and patched espeak-ng as
Piper's ``piper-phonemize``, with wheels for Python 3.11 to 3.13) bundles espeak-ng and its data and
does not pull the CPU ``onnxruntime`` distribution (``piper-tts`` does, which silently removes the
CUDA provider of ``onnxruntime-gpu``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Final

import piper_phonemize

from tts_core.base.config import BOS, EOS, PAD
from tts_core.text.sentences import bounded_pieces, split_long_tokens

_ESPEAK_LOCK = threading.Lock()
"""espeak-ng keeps global state: one phonemisation at a time per process (worker threads, API threads)."""

MAX_TOKEN_CHARS: Final = 100
"""Longest run of characters without a space that espeak-ng is given; a longer one is read in pieces
of this many. The espeak-ng that piper-phonemize bundles crashes the process (SIGSEGV) on one word of
30,000 to 35,000 random letters (measured: 30,000 pass, 35,000 crash, depending on the letters); no
word of a language comes near 100, and a URL or code this long is read in pieces either way."""

MAX_CALL_CHARS: Final = 10_000
"""Longest text phonemised in one espeak-ng call: a longer sentence (the planner cuts any sentence
whose ids pass the segment budget, far shorter) is phonemised in pieces cut at spaces."""


def phonemize(text: str, espeak_voice: str) -> list[list[str]]:
    """Phonemes of ``text``, one list per clause-ending sentence as espeak-ng splits it."""
    sentences: list[list[str]] = []
    for piece in bounded_pieces(split_long_tokens(text, MAX_TOKEN_CHARS), MAX_CALL_CHARS):
        with _ESPEAK_LOCK:
            sentences.extend(piper_phonemize.phonemize_espeak(piece, espeak_voice))
    return [s for s in sentences if any(not p.isspace() for p in s)]


def phoneme_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """Map phonemes to ids as Piper does: BOS, then each phoneme followed by PAD, then EOS.

    Phonemes the voice does not know are dropped, as in Piper.
    """
    pad = list(id_map[PAD])
    ids = [*id_map[BOS], *pad]
    for phoneme in phonemes:
        mapped = id_map.get(phoneme)
        if mapped is not None:
            ids.extend(mapped)
            ids.extend(pad)
    ids.extend(id_map[EOS])
    return ids
