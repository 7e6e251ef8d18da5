"""What the soak says: short messages, passages of the bench corpus, and a few hostile texts of the
kinds the hostile probes found (issue 19: a word of thousands of letters, runs of commas, breaks
and sentences that ask for hours of silence, a million digits, lone surrogates, kanji without end).
The hostile ones may be accepted or refused; they must never hurt the stack."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any

from bench.corpus import narration, short_messages


@dataclass(frozen=True)
class Hostile:
    name: str
    body: dict[str, Any] | None = None
    raw: bytes | None = None
    """A body sent as bytes, for what JSON encoders will not write (a lone surrogate)."""


def short_text(rng: random.Random) -> str:
    return rng.choice(short_messages())


def bulk_text(rng: random.Random, low: int = 1500, high: int = 3000) -> str:
    """A passage of the narration corpus of whole sentences, about ``low`` to ``high`` characters
    (at least one sentence, however long)."""
    text = narration()
    start = text.find(". ", rng.randrange(0, len(text) - 2 * high)) + 2
    end = text.rfind(".", start, start + rng.randint(low, high))
    if end < start:
        end = text.find(".", start)
    return text[start : end + 1]


def random_word(rng: random.Random, letters: int, alphabet: str = string.ascii_lowercase) -> str:
    return "".join(rng.choice(alphabet) for _ in range(letters))


def hostile_texts(rng: random.Random, japanese_voice: str | None) -> list[Hostile]:
    hostile = [
        Hostile("long word", {"text": "Intro " + random_word(rng, 3000) + " outro."}),
        Hostile("comma run", {"text": "Wait" + "," * 20_000 + " then go."}),
        Hostile("break run", {"text": "<speak>Hi" + '<break time="10s"/>' * 1200 + "x</speak>", "text_type": "ssml"}),
        Hostile("a million digits", {"text": "1" * 1_000_000}),
        Hostile("tiny sentences, long pauses", {"text": "A. " * 3000, "sentence_pause_s": 5}),
        Hostile("emoji run", {"text": "\U0001f600" * 1000 + " ok"}),
        Hostile("lone surrogate", raw=rb'{"text": "abc \udcff def"}'),
        Hostile("deep nesting", raw=b'{"text": "Hi.", "metadata": {"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}"),
    ]
    if japanese_voice is not None:
        kanji = random_word(rng, 300, "日本語漢字東京大阪山川田中森林花火")
        hostile.append(Hostile("kanji run", {"text": kanji, "voice": japanese_voice}))
    return hostile
