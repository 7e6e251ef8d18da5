"""From text to what a model reads: segments and utterances, espeak-ng phonemes, Japanese readings, accents and morae.
Imports ``base``, ``text`` and ``lexicon``.
"""
