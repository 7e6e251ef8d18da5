"""A documented subset of SSML, parsed into plain pieces the planner turns into timed utterances.

Subset: ``<speak>`` (``xml:lang``), ``<p>``, ``<s>``, ``<break time="…"|strength="…"/>``,
``<prosody rate="…" volume="…">``, ``<say-as interpret-as="characters|cardinal|ordinal|date|telephone">``,
``<sub alias="…">``, ``<phoneme alphabet="ipa" ph="…">`` and ``<mark name="…"/>``. Anything else is
refused, naming it.

Each piece of speech keeps the span of the source it was read from, and each ``<mark>`` its
element's span (offsets in characters of the submitted SSML), for timing marks; a ``<mark>`` ends
the text before it, so that its time is where the speech after it starts.

The XML parser is ``defusedxml``'s SAX reader (``tts_core.text.safe_xml``): DTDs, entity declarations
(so no entity expansion bombs) and external references are refused before anything is expanded.
Every error is an :class:`InvalidSsml` with the line and column it was found at.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Final, Literal
from xml.sax.xmlreader import AttributesImpl

from tts_core.base.audio import gain_of
from tts_core.base.errors import InvalidSsml
from tts_core.text import spoken_numbers
from tts_core.text.safe_xml import LocatedHandler, parse_safely

MAX_BREAK_S: Final = 10.0

MAX_PHONEME_CHARS: Final = 1000
"""Longest ``ph`` of one ``<phoneme>``: a word's or a name's pronunciation is tens of symbols. The
spoken text a job is limited by is the element's own text (one letter can carry a ``ph``), so the
pronunciation needs a bound of its own; the planner also cuts a long one to the id budget."""
MAX_MARK_NAME_CHARS: Final = 256
"""Longest ``<mark name>``: a name is a label for the client's code, and each is stored with the job."""
RATE_RANGE: Final = (0.5, 2.0)
BREAK_STRENGTHS: Final = {"none": 0.0, "x-weak": 0.1, "weak": 0.2, "medium": 0.4, "strong": 0.7, "x-strong": 1.0}
RATE_WORDS: Final = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "fast": 1.25, "x-fast": 1.5}
VOLUME_WORDS: Final = {
    "silent": float("-inf"), "x-soft": -12.0, "soft": -6.0, "medium": 0.0, "loud": 6.0, "x-loud": 12.0,
}  # fmt: skip
"""``<prosody volume>`` words as changes in dB from the voice's own level (silent: no sound, its time kept)."""
VOLUME_RANGE_DB: Final = (-40.0, 12.0)
"""Nested volumes add up within these bounds; above 0 dB a loud voice's peaks may clip."""

SAY_AS: Final = ("characters", "cardinal", "ordinal", "date", "telephone")
DATE_FORMATS: Final = ("mdy", "dmy", "ymd", "md", "dm", "ym", "my", "y", "m", "d")
_INLINE: Final = frozenset({"break", "prosody", "say-as", "sub", "phoneme", "mark"})
_PARENTS: Final[dict[str, frozenset[str]]] = {
    "p": frozenset({"speak"}),
    "s": frozenset({"speak", "p"}),
    **{name: frozenset({"speak", "p", "s", "prosody"}) for name in _INLINE},
}
_ATTRIBUTES: Final[dict[str, frozenset[str]]] = {
    "speak": frozenset({"version", "xmlns", "xml:lang", "xmlns:xsi", "xsi:schemaLocation"}),
    "p": frozenset(),
    "s": frozenset(),
    "break": frozenset({"time", "strength"}),
    "prosody": frozenset({"rate", "volume"}),
    "say-as": frozenset({"interpret-as", "format"}),
    "sub": frozenset({"alias"}),
    "phoneme": frozenset({"alphabet", "ph"}),
    "mark": frozenset({"name"}),
}
_TIME: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s)")
_PERCENT: Final = re.compile(r"([+-]?)(\d+(?:\.\d+)?)%")
_DECIBELS: Final = re.compile(r"([+-]?\d+(?:\.\d+)?)dB")
_SPACES: Final = re.compile(r"\s+")


@dataclass(frozen=True)
class Speech:
    """Text to speak at a rate (times the job's speed), or IPA to speak as given (``<phoneme>``), at
    a gain (``<prosody volume>``: a factor on the samples, 0 for ``silent``)."""

    text: str
    rate: float = 1.0
    ipa: str | None = None
    gain: float = 1.0
    source: tuple[int, int] | None = field(default=None, compare=False)
    """Offsets in the SSML source of what it was read from: its text, or the whole element it came
    from (``<say-as>``, ``<sub>``, ``<phoneme>``); runs joined into one piece span them all. Where it
    came from, not what is said: pieces compare equal without it."""


@dataclass(frozen=True)
class Break:
    """Exactly this much silence."""

    seconds: float


@dataclass(frozen=True)
class Boundary:
    """The end of an ``<s>`` (a sentence pause) or a ``<p>`` (a paragraph pause)."""

    kind: Literal["sentence", "paragraph"]


@dataclass(frozen=True)
class MarkElement:
    """A ``<mark name="…"/>``: its name and the element's offsets in the SSML source."""

    name: str
    start: int
    end: int


Piece = Speech | Break | Boundary | MarkElement


@dataclass(frozen=True)
class SsmlDocument:
    lang: str | None
    pieces: tuple[Piece, ...]

    @property
    def spoken_text(self) -> str:
        """What the voice reads, without markup: what characters are counted on."""
        return " ".join(p.text for p in self.pieces if isinstance(p, Speech))


@dataclass
class _Open:
    name: str
    rate: float
    volume_db: float
    """The volume inside the element, in dB from the voice's own; -inf for ``silent``."""
    line: int
    column: int
    attributes: dict[str, str]
    offset: int
    """Where its start tag begins in the source."""
    text: list[str] = field(default_factory=list)


class _Handler(LocatedHandler):
    def __init__(self, default_lang: str, source: str) -> None:
        super().__init__()
        self.lang: str | None = None
        self._default_lang = default_lang
        self._source = source
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", source))]
        self._open: list[_Open] = []
        self._pieces: list[Piece] = []
        self._run: list[Speech] = []
        """Speech of one rate and gain in a row, not yet in ``_pieces``: joined into one piece once,
        when something else comes (joining each run to the text before it was quadratic)."""
        self._after_speech = False
        """Whether the last piece (marks aside) is speech: an ``<s>`` or ``<p>`` then ends it."""
        self._buffer: list[str] = []
        self._buffer_spans: list[tuple[int, int]] = []
        """Source offsets of the text in ``_buffer`` that is not space."""

    def _offset(self) -> int:
        """Where the parser is, in characters of the source (expat counts columns in characters)."""
        line, column = self.where()
        return min(self._line_starts[min(line, len(self._line_starts)) - 1] + column - 1, len(self._source))

    def _element_end(self, element: _Open) -> int:
        """At an end tag: where the element ends in the source, past its ``/>`` if its start tag
        closes it, else past its end tag (where the parser now is)."""
        tag_end = _tag_end(self._source, element.offset)
        if self._source[tag_end - 2 : tag_end] == "/>":
            return tag_end
        close = self._source.find(">", self._offset())
        return close + 1 if close >= 0 else tag_end

    def fail(self, message: str) -> InvalidSsml:
        return InvalidSsml(message, *self.where())

    @property
    def _joint(self) -> str:
        """Japanese and Chinese runs join without a space (a space would be read as a pause)."""
        return "" if (self.lang or self._default_lang).lower()[:2] in {"ja", "zh"} else " "

    @property
    def _rate(self) -> float:
        return self._open[-1].rate if self._open else 1.0

    @property
    def _volume_db(self) -> float:
        return self._open[-1].volume_db if self._open else 0.0

    def startElement(self, name: str, attrs: AttributesImpl) -> None:
        attributes = dict(attrs.items())
        self._check(name, attributes)
        if self._open and self._open[-1].name in {"say-as", "sub", "phoneme"}:
            raise self.fail(f"<{self._open[-1].name}> holds text only, not <{name}>")
        if self._open and self._open[-1].name == "mark":
            raise self.fail(f"<mark> holds nothing, not <{name}>")
        rate, volume_db = self._rate, self._volume_db
        if name == "speak":
            self.lang = attributes.get("xml:lang")
        elif name == "break":
            self._flush()
            self._add(Break(self._break_seconds(attributes)))
        elif name == "prosody":
            self._flush()
            rate = self._prosody_rate(attributes, rate)
            volume_db = self._prosody_volume(attributes, volume_db)
        elif name in {"p", "s"}:
            self._flush()
            if self._after_speech:  # text before it ends there
                self._add(Boundary("paragraph" if name == "p" else "sentence"))
        elif name == "mark":
            self._flush()
        line, column = self.where()
        self._open.append(_Open(name, rate, volume_db, line, column, attributes, self._offset()))

    def endElement(self, name: str) -> None:
        element = self._open.pop()
        if name == "mark":
            self._mark(element)
        elif name in {"say-as", "sub", "phoneme"}:
            self._flush()
            self._special(element)
        elif name in {"p", "s", "prosody"}:
            self._flush(element)
            if name != "prosody":
                self._add(Boundary("paragraph" if name == "p" else "sentence"))
        elif name == "speak":
            self._flush(element)
            self._end_run()

    def characters(self, content: str) -> None:
        if not self._open:
            return
        if self._open[-1].name == "mark":
            if content.strip():
                raise self.fail("<mark> holds no text")
        elif self._open[-1].name in {"say-as", "sub", "phoneme"}:
            self._open[-1].text.append(content)
        else:
            self._buffer.append(content)
            self._note_source(content)

    def _note_source(self, content: str) -> None:
        """Where the chunk's non-space text lies in the source (an entity's chunk: the reference)."""
        at = self._offset()
        if self._source.startswith(content, at):
            first = len(content) - len(content.lstrip())
            last = len(content.rstrip())
            if last > first:
                self._buffer_spans.append((at + first, at + last))
        elif content.strip():
            close = self._source.find(";", at)
            self._buffer_spans.append((at, close + 1 if close >= 0 else at + 1))

    def _flush(self, element: _Open | None = None) -> None:
        """Text gathered so far, spoken as ``element`` (the one closing) says, else as the innermost."""
        text = _SPACES.sub(" ", "".join(self._buffer)).strip()
        spans, self._buffer_spans = self._buffer_spans, []
        self._buffer.clear()
        if text:
            rate, volume_db = (self._rate, self._volume_db) if element is None else (element.rate, element.volume_db)
            source = (spans[0][0], spans[-1][1]) if spans else None
            self._speak(Speech(text, rate, gain=gain_of(volume_db), source=source))

    def _speak(self, piece: Speech) -> None:
        """Add speech, to be merged with the run before it if it has the same rate and gain (one text
        for the front end)."""
        last = self._run[-1] if self._run else None
        if not (
            last is not None
            and last.ipa is None
            and piece.ipa is None
            and (last.rate, last.gain) == (piece.rate, piece.gain)
        ):
            self._end_run()
        self._run.append(piece)
        self._after_speech = True

    def _add(self, piece: Break | Boundary | MarkElement) -> None:
        self._end_run()
        self._pieces.append(piece)
        if not isinstance(piece, MarkElement):
            self._after_speech = False

    def _end_run(self) -> None:
        """The run of speech as one piece, its text joined and its source spanning all of it."""
        if len(self._run) > 1:
            first = self._run[0]
            source = functools.reduce(_joined, (piece.source for piece in self._run[1:]), first.source)
            text = self._joint.join(piece.text for piece in self._run)
            self._pieces.append(Speech(text, first.rate, gain=first.gain, source=source))
        else:
            self._pieces.extend(self._run)
        self._run = []

    def _mark(self, element: _Open) -> None:
        name = element.attributes.get("name", "")
        if not name.strip():
            raise InvalidSsml("<mark> needs a non-empty name", element.line, element.column)
        if len(name) > MAX_MARK_NAME_CHARS:
            message = f"<mark> name has {len(name)} characters; at most {MAX_MARK_NAME_CHARS}"
            raise InvalidSsml(message, element.line, element.column)
        self._add(MarkElement(name, element.offset, self._element_end(element)))

    def _special(self, element: _Open) -> None:
        inner = _SPACES.sub(" ", "".join(element.text)).strip()
        source = (element.offset, self._element_end(element))
        if element.name == "sub":
            alias = element.attributes.get("alias", "").strip()
            if not alias:
                raise InvalidSsml("<sub> needs a non-empty alias", element.line, element.column)
            self._speak(Speech(alias, element.rate, gain=gain_of(element.volume_db), source=source))
        elif element.name == "phoneme":
            ph = element.attributes.get("ph", "").strip()
            if element.attributes.get("alphabet") != "ipa" or not ph:
                raise InvalidSsml('<phoneme> needs alphabet="ipa" and a non-empty ph', element.line, element.column)
            if len(ph) > MAX_PHONEME_CHARS:
                message = f"<phoneme> ph has {len(ph)} characters; at most {MAX_PHONEME_CHARS}"
                raise InvalidSsml(message, element.line, element.column)
            self._speak(Speech(inner or ph, element.rate, ipa=ph, gain=gain_of(element.volume_db), source=source))
        else:
            spoken = self._say_as(element, inner)
            if spoken:
                self._speak(Speech(spoken, element.rate, gain=gain_of(element.volume_db), source=source))

    def _say_as(self, element: _Open, inner: str) -> str:
        kind = element.attributes.get("interpret-as", "")
        lang = (self.lang or self._default_lang).split("-")[0].split("_")[0].lower()
        expand = _SAY_AS_EXPANDERS.get(kind)
        if expand is None:
            raise InvalidSsml(
                f"say-as interpret-as must be one of {', '.join(SAY_AS)}; got {kind!r}", element.line, element.column
            )
        try:
            return expand(inner, lang, element.attributes.get("format", "ymd" if lang == "ja" else "mdy"))
        except (ValueError, OverflowError, NotImplementedError) as e:
            raise InvalidSsml(f"say-as {kind}: {e}", element.line, element.column) from None

    def _check(self, name: str, attributes: dict[str, str]) -> None:
        if name not in _ATTRIBUTES:
            raise self.fail(f"<{name}> is not supported (supported: {', '.join(_ATTRIBUTES)})")
        parent = self._open[-1].name if self._open else None
        if name == "speak" and parent is not None:
            raise self.fail("<speak> must be the root element")
        if name != "speak" and (parent is None or parent not in _PARENTS[name]):
            raise self.fail(f"<{name}> cannot be inside <{parent}>" if parent else "the root element must be <speak>")
        unknown = sorted(set(attributes) - _ATTRIBUTES[name])
        if unknown:
            raise self.fail(f"<{name}> does not support the attribute {unknown[0]!r}")

    def _break_seconds(self, attributes: dict[str, str]) -> float:
        if "time" in attributes:
            match = _TIME.fullmatch(attributes["time"].strip())
            if match is None:
                raise self.fail(f"break time must look like 500ms or 2s; got {attributes['time']!r}")
            seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
            if seconds > MAX_BREAK_S:
                raise self.fail(f"break time is at most {MAX_BREAK_S:g}s; got {attributes['time']!r}")
            return seconds
        strength = attributes.get("strength", "medium")
        if strength not in BREAK_STRENGTHS:
            raise self.fail(f"break strength must be one of {', '.join(BREAK_STRENGTHS)}; got {strength!r}")
        return BREAK_STRENGTHS[strength]

    def _prosody_rate(self, attributes: dict[str, str], current: float) -> float:
        value = attributes.get("rate", "medium").strip()
        if value in RATE_WORDS:
            factor = RATE_WORDS[value]
        elif (match := _PERCENT.fullmatch(value)) is not None:
            sign, number = match.group(1), float(match.group(2)) / 100
            factor = 1 + number if sign == "+" else 1 - number if sign == "-" else number
        else:
            raise self.fail(f"prosody rate must be x-slow..x-fast or a percentage; got {value!r}")
        rate = current * factor
        if not RATE_RANGE[0] <= rate <= RATE_RANGE[1]:
            raise self.fail(f"prosody rate must stay within {RATE_RANGE[0]:g}x to {RATE_RANGE[1]:g}x; got {rate:g}x")
        return rate

    def _prosody_volume(self, attributes: dict[str, str], current_db: float) -> float:
        """The volume inside a ``<prosody>``: a word, or a change in dB, added to the enclosing one."""
        value = attributes.get("volume", "medium").strip()
        if value in VOLUME_WORDS:
            change = VOLUME_WORDS[value]
        elif (match := _DECIBELS.fullmatch(value)) is not None:
            change = float(match.group(1))
        else:
            words = ", ".join(VOLUME_WORDS)
            raise self.fail(f"prosody volume must be one of {words} or a change in dB such as -6dB; got {value!r}")
        volume_db = current_db + change
        if math.isinf(volume_db):
            return volume_db
        low, high = VOLUME_RANGE_DB
        if not low <= volume_db <= high:
            raise self.fail(f"prosody volume must stay within {low:g} dB to +{high:g} dB; got {volume_db:+g} dB")
        return volume_db

    @property
    def document(self) -> SsmlDocument:
        return SsmlDocument(self.lang, tuple(self._pieces))


def _tag_end(source: str, start: int) -> int:
    """Just past the ``>`` of the tag starting at ``start`` (a ``>`` inside a quoted value is text)."""
    quote = ""
    for at in range(start, len(source)):
        ch = source[at]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == ">":
            return at + 1
    return len(source)


def _joined(first: tuple[int, int] | None, second: tuple[int, int] | None) -> tuple[int, int] | None:
    if first is None or second is None:
        return first or second
    return min(first[0], second[0]), max(first[1], second[1])


def _characters(inner: str, lang: str, _: str) -> str:
    return " ".join(ch for ch in inner if not ch.isspace())


def _cardinal(inner: str, lang: str, _: str) -> str:
    return spoken_numbers.cardinal(spoken_numbers.whole_number(inner), lang)


def _ordinal(inner: str, lang: str, _: str) -> str:
    return spoken_numbers.ordinal(spoken_numbers.whole_number(inner), lang)


def _telephone(inner: str, lang: str, _: str) -> str:
    return spoken_numbers.telephone(inner, lang)


def _date(inner: str, lang: str, fmt: str) -> str:
    if fmt not in DATE_FORMATS:
        raise ValueError(f"format must be one of {', '.join(DATE_FORMATS)}; got {fmt!r}")
    numbers = [int(n) for n in re.split(r"[^0-9]+", inner) if n]
    if len(numbers) != len(fmt):
        raise ValueError(f"{inner!r} does not match format {fmt!r}")
    parts = dict(zip(fmt, numbers, strict=True))
    year, month, day = parts.get("y", 2000), parts.get("m", 1), parts.get("d", 1)
    date(year, month, day)  # raises ValueError for an impossible date
    if lang == "ja":
        return "".join(f"{parts[k]}{unit}" for k, unit in (("y", "年"), ("m", "月"), ("d", "日")) if k in parts)
    words: list[str] = []
    if "m" in parts:
        words.append(date(2000, month, 1).strftime("%B"))
    if "d" in parts:
        words.append(spoken_numbers.ordinal(day, lang))
    if "y" in parts:
        words.append(spoken_numbers.year(year, lang))
    return " ".join(words)


_SAY_AS_EXPANDERS: Final[dict[str, Callable[[str, str, str], str]]] = {
    "characters": _characters,
    "cardinal": _cardinal,
    "ordinal": _ordinal,
    "date": _date,
    "telephone": _telephone,
}


def parse_ssml(source: str, default_lang: str = "en") -> SsmlDocument:
    """The pieces of an SSML document; :class:`InvalidSsml` (with line and column) if it is not
    well-formed XML in the supported subset."""
    handler = _Handler(default_lang, source)
    parse_safely(source.encode("utf-8"), handler, InvalidSsml)
    document = handler.document
    if not document.spoken_text.strip():
        raise InvalidSsml("nothing to speak", 1, 1)
    return document
