"""``lexicons`` section: what a 1,000-entry lexicon costs. Planning time of the long job's text
(``bench.corpus.book_text``, its first 100,000 characters) in one process (no normalisation, the
default normalisation, and the default normalisation with the lexicon), and the throughput corpus
end to end with and without the lexicon, in alternating rounds
with the raw model limit beside them.

The lexicon is made of that text's own words (805 distinct ones of three letters or more), then the
other corpora's to 1,000, so most entries are met often:
half say a word by an alias (the word itself, so the audio stays the same length), half by IPA
(espeak-ng's own phonemes of the word, spliced in as a lexicon's IPA is). That is the worst case
for matching and splicing, not a lighter one.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from bench import corpus
from bench.corpus import book_text
from bench.stack import BenchStack
from tts_core.frontend.phonemes import phonemize
from tts_core.frontend.segments import FrontEnd, iter_plain, iter_segments
from tts_core.lexicon.lexicon import Lexicon, LexiconEntry
from tts_core.lexicon.pronunciation import Pronunciation
from tts_core.text.normalization import NormalizeOptions, spoken_edits
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.engines import engine_of
from ttsq.settings import Settings

ENTRIES: Final = 1000
PLANNED_CHARS: Final = 100_000
NAME: Final = "bench1000"
WORD: Final = re.compile(r"[A-Za-z]{3,}")

RawLimit = Callable[[list[str], Settings], dict[str, Any]]
EndToEnd = Callable[..., dict[str, Any]]


def frequent_words_lexicon(texts: list[str], entries: int, espeak_voice: str) -> Lexicon:
    """The ``entries`` most frequent words of the texts (the first text's words first, then the
    others' words it lacks), alternately by alias and by espeak-ng's IPA."""
    words: list[str] = []
    for text in texts:
        counted = Counter(m.group().lower() for m in WORD.finditer(text))
        words += [w for w, _ in counted.most_common() if w not in set(words)]
    made: list[LexiconEntry] = []
    for n, word in enumerate(words[:entries]):
        if n % 2:
            ipa = "".join(p for sentence in phonemize(word, espeak_voice) for p in sentence)
            made.append(LexiconEntry((word,), phoneme=ipa))
        else:
            made.append(LexiconEntry((word,), alias=word))
    return Lexicon("en-US", tuple(made))


def planning_s(text: str, front_end: FrontEnd, settings: Settings) -> tuple[float, int]:
    """Seconds to plan ``text`` into segments as a worker does, and the segments."""
    started = time.perf_counter()
    utterances = iter_plain(text, front_end, settings.segment_max_ids, settings.paragraph_pause_s)
    segments = sum(1 for _ in iter_segments(utterances, settings.segment_max_ids, settings.sentence_pause_s))
    return time.perf_counter() - started, segments


def planning(settings: Settings, lexicon: Lexicon, text: str, rounds: int) -> dict[str, Any]:
    info = VoiceCatalog.discover().get(settings.default_voice)
    engine = engine_of(info)
    options = NormalizeOptions()
    normalized = Pronunciation([], info.language, lambda t: spoken_edits(t, info.language, options))
    with_lexicon = Pronunciation([lexicon], info.language, lambda t: spoken_edits(t, info.language, options))
    variants = {
        "plain": engine.front_end(info),
        "normalized": engine.spoken_front_end(info, normalized),
        "lexicon": engine.spoken_front_end(info, with_lexicon),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    segments: dict[str, int] = {}
    for _ in range(rounds):
        for name, front_end in variants.items():
            seconds, segments[name] = planning_s(text, front_end, settings)
            times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "characters": len(text),
        "seconds": medians,
        "rounds": times,
        "segments": segments,
        "lexicon_over_plain": medians["lexicon"] / medians["plain"],
        "lexicon_over_normalized": medians["lexicon"] / medians["normalized"],
    }


def lexicons(
    stack: BenchStack, texts: list[str], quick: bool, raw_limit: RawLimit, end_to_end: EndToEnd
) -> dict[str, Any]:
    settings = stack.settings()
    book = book_text(5_000 if quick else PLANNED_CHARS)
    lexicon = frequent_words_lexicon([book, corpus.narration(), *corpus.paragraphs()], ENTRIES, "en-us")
    stored = stack.http.put(f"/v1/lexicons/{NAME}", json=lexicon.to_json())
    stored.raise_for_status()
    result: dict[str, Any] = {
        "entries": len(lexicon.entries),
        "planning": planning(settings, lexicon, book, 1 if quick else 3),
    }
    raws, plain, fixed = [], [], []
    for _ in range(1 if quick else 2):
        raws.append(raw_limit(texts, settings))
        plain.append(end_to_end(stack, texts))
        fixed.append(end_to_end(stack, texts, lexicons=[NAME]))
    result["throughput"] = {
        "raw": statistics.median(r["audio_per_wall"] for r in raws),
        "e2e": statistics.median(e["audio_per_wall"] for e in plain),
        "e2e_lexicon": statistics.median(e["audio_per_wall"] for e in fixed),
        "ratio_to_raw": statistics.median(
            e["audio_per_wall"] / r["audio_per_wall"] for r, e in zip(raws, plain, strict=True)
        ),
        "lexicon_ratio_to_raw": statistics.median(
            e["audio_per_wall"] / r["audio_per_wall"] for r, e in zip(raws, fixed, strict=True)
        ),
        "runs": {"raw": raws, "e2e": plain, "e2e_lexicon": fixed},
    }
    return result


def lexicon_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    planned = result["planning"]
    seconds = planned["seconds"]
    flow = result["throughput"]
    return [
        (f"planning {planned['characters']:,} chars: plain / normalised / + {result['entries']:,}-entry lexicon",
         f"{seconds['plain']:.2f} / {seconds['normalized']:.2f} / {seconds['lexicon']:.2f} s "
         f"({planned['lexicon_over_plain']:.2f}x plain)"),
        ("throughput e2e / raw, without and with the lexicon",
         f"{flow['ratio_to_raw']:.2f} / {flow['lexicon_ratio_to_raw']:.2f}"),
    ]  # fmt: skip
