"""``make bench-normalization``: what each normalisation rule changes on a news-style corpus, and
whether the voice's front end then reads it differently.

For each language's corpus (``bench/normalization_corpus/<lang>.txt``, one sentence a line) and each
rule (its option alone on, the others off): sentences touched, edits made, and how many of the
touched sentences the front end phonemises differently after the edits (espeak-ng ``en-us`` for
English, the Kokoro front end's pyopenjtalk reading for Japanese), exactly and ignoring spaces and
stress marks (espeak-ng joins or splits words without a change of sound). Then all rules together,
and the time :func:`spoken_edits` takes on the corpus and on a 200 kB hostile string.

Writes ``bench/results/<stamp>-normalization.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from bench.machine import describe
from tts_core.frontend.phonemes import phonemize
from tts_core.text.normalization import NORMALIZE_OPTIONS, NormalizeOptions, apply_edits, spoken_edits
from tts_core.voices import kokoro, kokoro_package

CORPUS: Final = Path(__file__).parent / "normalization_corpus"
RESULTS: Final = Path(__file__).parent / "results"
HOSTILE_CHARS: Final = 200_000
_NOT_SOUND: Final = str.maketrans("", "", " ˈˌ|")

Phonemes = Callable[[str], str]


def _english(text: str) -> str:
    return " | ".join("".join(sentence) for sentence in phonemize(text, "en-us"))


def _japanese() -> Phonemes | None:
    folder = kokoro_package.data_dir()
    if folder is None:
        return None
    front_end = kokoro.front_end(folder)
    return front_end.phonemes


def _only(option: str) -> NormalizeOptions:
    off = NormalizeOptions(**{f.name: False for f in fields(NormalizeOptions)})
    return replace(off, **{option: True})


def measure(sentences: list[str], language: str, options: NormalizeOptions, phonemes: Phonemes) -> dict[str, Any]:
    """Sentences touched, edits, and touched sentences read differently (exactly / beyond spacing)."""
    touched = edits = differ = differ_in_sound = 0
    same: list[str] = []
    for sentence in sentences:
        found = spoken_edits(sentence, language, options)
        if not found:
            continue
        touched += 1
        edits += len(found)
        before, after = phonemes(sentence), phonemes(apply_edits(sentence, found))
        if before != after:
            differ += 1
        if before.translate(_NOT_SOUND) != after.translate(_NOT_SOUND):
            differ_in_sound += 1
        else:
            same.append(sentence)
    return {
        "sentences_touched": touched,
        "edits": edits,
        "read_differently": differ,
        "read_differently_beyond_spacing": differ_in_sound,
        "read_the_same": same,
    }


def _hostile(language: str) -> dict[str, Any]:
    """Digits, dots, @, colons, signs and letters at random: the time one call takes."""
    chars = random.Random(7).choices("0123456789.@:$-+/,% aA年日", k=HOSTILE_CHARS)
    text = "".join(chars)
    started = time.perf_counter()
    found = spoken_edits(text, language)
    return {"chars": HOSTILE_CHARS, "seconds": time.perf_counter() - started, "edits": len(found)}


def language_result(language: str, phonemes: Phonemes) -> dict[str, Any]:
    sentences = [line.strip() for line in (CORPUS / f"{language}.txt").read_text("utf-8").splitlines() if line.strip()]
    rules = {}
    for option in NORMALIZE_OPTIONS:
        found = measure(sentences, language, _only(option), phonemes)
        if found["edits"]:
            rules[option] = found
    started = time.perf_counter()
    for sentence in sentences:
        spoken_edits(sentence, language)
    seconds = time.perf_counter() - started
    return {
        "sentences": len(sentences),
        "rules": rules,
        "all": measure(sentences, language, NormalizeOptions(), phonemes),
        "us_per_sentence": seconds / len(sentences) * 1e6,
        "hostile": _hostile(language),
    }


def table(result: dict[str, Any]) -> str:
    rows = [
        "| language | rule | sentences touched | edits | read differently | beyond spacing |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for language, found in result["languages"].items():
        for rule, r in [*found["rules"].items(), ("all rules", found["all"])]:
            rows.append(
                f"| {language} | {rule} | {r['sentences_touched']} of {found['sentences']} | {r['edits']} | "
                f"{r['read_differently']} | {r['read_differently_beyond_spacing']} |"
            )
        hostile = found["hostile"]
        rows.append(
            f"| {language} | time | {found['us_per_sentence']:.0f} µs a sentence; "
            f"{hostile['chars'] // 1000} kB hostile: {hostile['seconds']:.2f} s | | | |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", default="en,ja")
    args = parser.parse_args()
    result: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(), "machine": describe(), "languages": {}}
    front_ends: dict[str, Phonemes | None] = {"en": _english, "ja": _japanese()}
    for language in args.languages.split(","):
        phonemes = front_ends.get(language)
        if phonemes is None:
            print(f"{language}: no front end installed, skipped")
            continue
        result["languages"][language] = language_result(language, phonemes)
    result["finished_at"] = datetime.now(UTC).isoformat()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-normalization.json"
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    print(table(result))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
