"""How much text one OpenJTalk call is given: every caller of OpenJTalk (the Kokoro G2P, its accent
phrases for a streamed first part, the VOICEVOX analysis) cuts its text with :func:`openjtalk_pieces`
first, so no call's time or refusal depends on how long a text runs without punctuation.

No pyopenjtalk here: the API and ``tts_core.voices.kokoro`` import this without loading it.
"""

from __future__ import annotations

from typing import Final

from tts_core.text.sentences import bounded_pieces

MAX_G2P_CHARS: Final = 200
"""Longest text given to OpenJTalk (native code) in one call; a longer text is read in pieces cut
after a comma or space where there is one. OpenJTalk's time grows faster than the text (measured,
one call: 100 characters 7 ms, 200 36 ms, 400 230 ms, 2,000 18 s) and it refuses about 10,000
characters outright ("too long after normalization": digits are read out, so 2,000 digits pass and
14,000 do not); 200 characters hold more than the model takes in one utterance."""
G2P_BREAKS: Final = "、\uff0c,;\uff1b\uff1a: \u3000"
"""Where a long text is cut for OpenJTalk: after a Japanese or Latin comma, a colon, a space."""


def openjtalk_pieces(text: str) -> list[str]:
    """``text`` in consecutive pieces of at most :data:`MAX_G2P_CHARS` that join back into it."""
    return bounded_pieces(text, MAX_G2P_CHARS, G2P_BREAKS)
