"""Phonemisation with espeak-ng exactly as Piper voices were trained, and Piper's id scheme.

``piper-phonemize-fix`` (import name ``piper_phonemize``: the same C++ and patched espeak-ng as
Piper's ``piper-phonemize``, with wheels for Python 3.11 to 3.13) bundles espeak-ng and its data and
does not pull the CPU ``onnxruntime`` distribution (``piper-tts`` does, which silently removes the
CUDA provider of ``onnxruntime-gpu``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import piper_phonemize

from tts_core.config import BOS, EOS, PAD

_ESPEAK_LOCK = threading.Lock()
"""espeak-ng keeps global state: one phonemisation at a time per process (worker threads, API threads)."""


def phonemize(text: str, espeak_voice: str) -> list[list[str]]:
    """Phonemes of ``text``, one list per clause-ending sentence as espeak-ng splits it."""
    with _ESPEAK_LOCK:
        sentences: list[list[str]] = piper_phonemize.phonemize_espeak(text, espeak_voice)
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
