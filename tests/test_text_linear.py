"""No text-processing step is worse than linear: every splitter, normaliser and text front end the API
or a worker runs on a tenant's text is fed 200,000 characters (a fifth of the longest text a job may
have) of the patterns that make such code slow (repeated abbreviations, "a. " runs, quotes, brackets,
digits, lone punctuation, long words, "。" runs, blank lines, markup) and must finish within a
CPU-time bound.

Linear code takes a CPU second or two at most for each; the quadratic sentence split took 16.8 s for
100,000 characters of "a. " (about 67 s for 200,000), so the bound is generous and still tells the
two apart: ``test_the_bound_fails_a_quadratic_step`` runs a quadratic step at this size under this
bound and sees it stopped. CPU time, not wall time: the machine the suite runs on is shared.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from types import FrameType

import pytest

from api.wyoming.sentences import SentenceBuffer, sentences_of
from tts_core.frontend.phonemes import MAX_TOKEN_CHARS
from tts_core.frontend.segments import LONG_SENTENCE_CHARS, iter_plain
from tts_core.text.first_part import word_breaks
from tts_core.text.normalization import spoken_edits
from tts_core.text.pauses import ssml_silence, text_silence
from tts_core.text.scripts import can_speak, letter_scripts
from tts_core.text.sentences import (
    bounded_pieces,
    check_text,
    cut_long,
    normalize_text,
    split_long_tokens,
    split_sentences,
)
from tts_core.text.speech_markup import parse_ssml
from tts_core.text.text_spans import OffsetMap
from tts_core.voices.piper_engine import PIPER
from ttsq.estimate import estimate_audio_s

MILLION = 1_000_000
"""The longest text a job may have: what the length checks and the stream buffer are given."""
SIZE = 200_000
"""Characters each step is fed: a quadratic step costs 25 times what it costs at 40,000 characters,
a linear one five times."""

CPU_LIMIT_S = 6.0
"""CPU seconds ``SIZE`` characters may take in any one step: the slowest linear one (English
normalisation of "$1 " amounts, a num2words call each) takes about 1.5 on a shared 2-core EPYC; the
quadratic split of ``test_the_bound_fails_a_quadratic_step`` would take about 45."""


class _TooSlow(Exception):
    pass


def _stop(_: int, __: FrameType | None) -> None:
    raise _TooSlow


def cpu_bounded(work: Callable[[], object], limit_s: float = CPU_LIMIT_S) -> float:
    """Run ``work``; fail the test once it has used ``limit_s`` CPU seconds (a quadratic step is not
    waited for). ``SIGPROF`` counts this process's CPU time, so the bound does not move with the
    machine's load, and pytest-timeout's ``SIGALRM`` is left alone."""
    previous = signal.signal(signal.SIGPROF, _stop)
    signal.setitimer(signal.ITIMER_PROF, limit_s)
    start = time.process_time()
    try:
        work()
    except _TooSlow:
        pytest.fail(f"more than {limit_s:g} CPU seconds for {SIZE:,} characters: worse than linear")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    return time.process_time() - start


def sized(unit: str) -> str:
    """``unit`` repeated as often as ``SIZE`` characters hold it whole."""
    return unit * (SIZE // len(unit))


def streamed(chunk: int) -> Callable[[str], object]:
    """A Wyoming stream of the text in chunks of ``chunk`` characters, to its end."""

    def stream(text: str) -> list[str | None]:
        buffer = SentenceBuffer(MILLION)
        done = [buffer.add(text[at : at + chunk]) for at in range(0, len(text), chunk)]
        return [*done, buffer.finish()]

    return stream


class _StubFrontEnd:
    """A front end with no phonemiser: an id per character, so planning's own work is measured."""

    max_ids: int | None = None

    def sentences(self, text: str) -> list[str]:
        return split_sentences(text)

    def phoneme_ids(self, sentence: str) -> list[list[int]]:
        return [[1] * min(len(sentence), 300)]

    def ipa_ids(self, ipa: str) -> list[int]:
        return [1] * len(ipa)


def _planned(text: str) -> int:
    return sum(1 for _ in iter_plain(text, _StubFrontEnd(), 400, 0.8))


def _ssml(elements: str) -> object:
    return ssml_silence(parse_ssml(f"<speak>{elements}</speak>"), 0.3, 0.8)


ABBREVIATIONS = ["a. ", "Dr. ", "e.g. ", "A. b. "]
"""Sentence ends that are merged again: each was a string grown part by part and split again."""
QUOTES_AND_BRACKETS = ['"a." ', '"Fine!" she said. ', "(a) ", "(((", '")']
PUNCTUATION = [". ", "?! ", "…", "。", "あ。"]
LINES = ["a\n\n", "\n", " \n", "\x00a"]
WORDS = ["a", "a ", "a, ", "1", "1 "]

STEPS: dict[str, tuple[Callable[[str], object], list[str]]] = {
    "normalize_text": (normalize_text, [*LINES, "a. ", "\u200ba"]),
    "check_text": (lambda text: check_text(text, MILLION), ["a. ", "Dr. ", "a\n\n", "\x00a"]),
    "split_sentences": (
        lambda text: split_sentences(normalize_text(text)),
        [*ABBREVIATIONS, *QUOTES_AND_BRACKETS, *PUNCTUATION, "a\n\n", "a", "1"],
    ),
    "sentences_of": (sentences_of, [*ABBREVIATIONS, "。", "あ。", "\n", '"a." ']),
    "stream_in_10": (streamed(10), ["a. ", "Dr. "]),
    "stream_in_1000": (streamed(1000), [*ABBREVIATIONS, "。", "a\n\n", " ", "a"]),
    "stream_in_60000": (streamed(60_000), ["a. ", "Dr. ", "A. b. ", "。"]),
    "cut_long": (lambda text: cut_long(text, LONG_SENTENCE_CHARS), ["a ", "a, ", "a", " "]),
    "cut_long_short": (lambda text: cut_long(text, 30), ["a ", "a, ", "a"]),
    "bounded_pieces": (lambda text: bounded_pieces(text, 200, " 、,"), ["a", "a ", "、"]),
    "split_long_tokens": (
        lambda text: split_long_tokens(text, MAX_TOKEN_CHARS),
        ["a", "a ", f"{'a' * MAX_TOKEN_CHARS} "],
    ),
    "spoken_edits_en": (lambda text: spoken_edits(text, "en"), ["$1 ", "Dr. ", "a.com/", "a@a.", "+1 "]),
    "spoken_edits_ja": (lambda text: spoken_edits(text, "ja"), ["1,000 ", "1", "３月"]),
    "text_silence": (lambda text: text_silence(text, 0.3, 0.8), ["a. ", "Dr. ", "a\n\n"]),
    "estimate": (lambda text: (estimate_audio_s(text), PIPER.least_segments(text, 400)), ["1", "a. ", "Dr. "]),
    "scripts": (lambda text: (can_speak(text, frozenset({"Latin"})), letter_scripts(text)), ["あ", "a"]),
    "offset_map": (lambda text: OffsetMap(text, normalize_text(text)), ["a. ", "\x00a", "a\n\n"]),
    "word_breaks": (word_breaks, ["a, ", "and a "]),
    "planning": (_planned, ["a. ", "Dr. ", "(a) "]),
    "ssml": (_ssml, ["<s>a</s>", '<sub alias="b">a</sub>', '<mark name="m"/>a', "<p>a</p>", "a<break/>"]),
}
"""Each step, with the patterns it is fed."""


CASES = [
    pytest.param(step, pattern, id=f"{name}-{pattern[:20]!r}")
    for name, (step, patterns) in STEPS.items()
    for pattern in patterns
]


@pytest.mark.parametrize(("step", "pattern"), CASES)
def test_a_long_text_of_the_worst_pattern_takes_linear_time(step: Callable[[str], object], pattern: str) -> None:
    text = sized(pattern)
    cpu_bounded(lambda: step(text))


def test_the_bound_fails_a_quadratic_step() -> None:
    """The check can fail: the split as it was (a sentence grown part by part and split again for
    every part), fed what each step is fed, is stopped at the bound every step has instead of being
    waited for."""

    def quadratic(text: str) -> str:
        merged = ""
        for part in text.split(" "):
            merged = f"{merged} {part}"
            merged.rstrip().split()
        return merged

    with pytest.raises(pytest.fail.Exception, match="worse than linear"):
        cpu_bounded(lambda: quadratic(sized("a. ")))


def _resplit_stream(chunks: list[str]) -> list[str | None]:
    """What a stream gave when the whole open text was split again for every chunk (quadratic, and
    the reference): sentences out once the next has begun, the last kept."""
    text, out = "", list[str | None]()
    for chunk in chunks:
        text += chunk
        sentences = sentences_of(text)
        if len(sentences) < 2:
            out.append(None)
            continue
        visible = [at for at, ch in enumerate(text) if not ch.isspace()]
        out.append(" ".join(sentences[:-1]))
        text = text[visible[sum(len("".join(s.split())) for s in sentences[:-1]) - 1] + 1 :]
    return [*out, text.strip()]


def test_a_stream_in_any_chunks_gives_what_splitting_its_whole_open_text_gave() -> None:
    """The bounded window misses no sentence end and invents none, whatever the chunks: long words,
    runs of spaces and periods, abbreviations cut across chunks, full stops, quotes, line breaks."""
    tokens = [
        "a",
        "A",
        "Dr",
        "e.g",
        "approx",
        ".",
        "....",
        "!",
        "?",
        " ",
        "     ",
        "\n",
        '"',
        ")",
        "。",
        "い",
        "x" * 40,
    ]
    generator = random.Random(34)
    for _ in range(3000):
        text = "".join(generator.choice(tokens) for _ in range(generator.randint(0, 120)))
        cuts = sorted(generator.sample(range(len(text) + 1), min(len(text) + 1, generator.randint(0, 40))))
        chunks = [text[start:end] for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        buffer = SentenceBuffer(MILLION)
        assert [*(buffer.add(chunk) for chunk in chunks), buffer.finish()] == _resplit_stream(chunks), chunks
