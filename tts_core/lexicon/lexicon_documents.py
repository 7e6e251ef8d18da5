"""Pronunciation lexicons as tenants upload them: W3C PLS 1.0 documents and ttsq's JSON form.

PLS (https://www.w3.org/TR/pronunciation-lexicon/): ``<lexicon version="1.0" xmlns="…"
alphabet="ipa" xml:lang="en-US">`` holding ``<meta>``, ``<metadata>`` (ignored) and ``<lexeme>``
elements; a lexeme has one or more ``<grapheme>``, then ``<phoneme>`` and ``<alias>``
pronunciations (the first with ``prefer="true"`` wins, else the first), and ``<example>``
(ignored). Phonemes are IPA, or Japanese readings in ttsq's ``x-katakana`` alphabet (``ナツ'メ``:
the accent mark after the nucleus mora; ``'ナツメ``: flat). A lexeme's ``role`` is accepted and
ignored (the first lexeme of a grapheme wins), but for ttsq's own role ``ttsq:case-sensitive``, the
PLS form of a JSON entry's ``case_sensitive``. Everything else is refused, with the line and column
it is at. ``tts_core.lexicon.pls_writer`` writes what this reads.

The XML is read by ``tts_core.text.safe_xml`` (no DTDs, no entities); the JSON form and the checks
every entry passes live in ``tts_core.lexicon.lexicon_entries``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from xml.sax.xmlreader import AttributesImpl

from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import PHONEME_ALPHABETS, Lexicon, LexiconEntry
from tts_core.lexicon.lexicon_entries import (
    DEFAULT_LIMITS,
    LexiconLimits,
    check_entry,
    check_language,
    entry_place,
    normalise_space,
    parse_json_lexicon,
    split_accent,
)
from tts_core.text.safe_xml import LocatedHandler, parse_safely

__all__ = [
    "CASE_SENSITIVE_ROLE",
    "DEFAULT_LIMITS",
    "KATAKANA_ALPHABET",
    "PLS_NAMESPACE",
    "TTSQ_NAMESPACE",
    "LexiconLimits",
    "check_entry",
    "parse_json_lexicon",
    "parse_pls",
]

PLS_NAMESPACE: Final = "http://www.w3.org/2005/01/pronunciation-lexicon"
KATAKANA_ALPHABET: Final = "x-katakana"
"""ttsq's alphabet for Japanese readings: katakana, with at most one accent mark."""
ALPHABETS: Final = (*PHONEME_ALPHABETS, KATAKANA_ALPHABET)
TTSQ_NAMESPACE: Final = "urn:ttsq:pls"
"""The namespace of ttsq's own PLS role, bound to the prefix ``ttsq`` where it is written."""
CASE_SENSITIVE_ROLE: Final = "ttsq:case-sensitive"
"""A lexeme role token: its graphemes match only as written (PLS has no case rule of its own).
Read as written, prefix included: the parser does not resolve namespace prefixes."""
_PARENTS: Final[dict[str, str | None]] = {
    "lexicon": None,
    "meta": "lexicon",
    "metadata": "lexicon",
    "lexeme": "lexicon",
    "grapheme": "lexeme",
    "phoneme": "lexeme",
    "alias": "lexeme",
    "example": "lexeme",
}
_ATTRIBUTES: Final[dict[str, frozenset[str]]] = {
    "lexicon": frozenset({"version", "xmlns", "alphabet", "xml:lang", "xml:base", "xsi:schemaLocation"}),
    "meta": frozenset({"name", "content", "http-equiv"}),
    "metadata": frozenset(),
    "lexeme": frozenset({"role", "xml:id"}),
    "grapheme": frozenset(),
    "phoneme": frozenset({"alphabet", "prefer"}),
    "alias": frozenset({"prefer"}),
    "example": frozenset(),
}
_TEXT_ELEMENTS: Final = frozenset({"grapheme", "phoneme", "alias", "example"})


@dataclass
class _Pronunciation:
    kind: str
    """``alias``, ``phoneme`` or ``reading`` (a phoneme in ``x-katakana``)."""
    prefer: bool
    text: str = ""


@dataclass
class _Lexeme:
    place: str
    """``line 4, column 3: lexeme 2``, until its first grapheme is known."""
    case_sensitive: bool = False
    graphemes: list[str] = field(default_factory=list)
    pronunciations: list[_Pronunciation] = field(default_factory=list)


class _Handler(LocatedHandler):
    def __init__(self, limits: LexiconLimits) -> None:
        super().__init__()
        self._limits = limits
        self._open: list[str] = []
        self._skipping = 0
        """Depth inside ``<metadata>``, whose content is anyone's."""
        self._text: list[str] = []
        self._lexeme: _Lexeme | None = None
        self._lexemes = 0
        self.language = ""
        self._alphabet = ""
        self.entries: list[LexiconEntry] = []

    def fail(self, message: str) -> InvalidLexicon:
        return _refusal(message, *self.where())

    def startElement(self, name: str, attrs: AttributesImpl) -> None:
        if self._skipping:
            self._skipping += 1
            return
        attributes = dict(attrs.items())
        self._check(name, attributes)
        self._open.append(name)
        self._text = []
        if name == "lexicon":
            self._start_lexicon(attributes)
        elif name == "metadata":
            self._skipping = 1
        elif name == "lexeme":
            self._start_lexeme(attributes)
        elif name in {"phoneme", "alias"}:
            self._start_pronunciation(name, attributes)
        elif name == "grapheme" and self._lexeme is not None and self._lexeme.pronunciations:
            raise self.fail("<grapheme> must come before the lexeme's pronunciations")

    def _check(self, name: str, attributes: dict[str, str]) -> None:
        parent = self._open[-1] if self._open else None
        if name not in _PARENTS:
            raise self.fail(f"<{name}> is not a PLS element (PLS has: {', '.join(_PARENTS)})")
        if _PARENTS[name] != parent:
            raise self.fail(f"<{name}> cannot be inside <{parent}>" if parent else "the root element must be <lexicon>")
        unknown = sorted(a for a in attributes if a not in _ATTRIBUTES[name] and not a.startswith("xmlns:"))
        if unknown:
            raise self.fail(f"<{name}> does not support the attribute {unknown[0]!r}")

    def _start_lexicon(self, attributes: dict[str, str]) -> None:
        for attribute, wanted in (("xmlns", PLS_NAMESPACE), ("version", "1.0")):
            if attributes.get(attribute) != wanted:
                got = f"got {attributes[attribute]!r}" if attribute in attributes else "it is missing"
                raise self.fail(f'<lexicon> needs {attribute}="{wanted}"; {got}')
        for attribute in ("alphabet", "xml:lang"):
            if attribute not in attributes:
                raise self.fail(f"<lexicon> needs the {attribute} attribute")
        self._alphabet = self._known_alphabet(attributes["alphabet"])
        self.language = attributes["xml:lang"]
        line, column = self.where()
        check_language(self.language, f"line {line}, column {column}: <lexicon> xml:lang")

    def _known_alphabet(self, alphabet: str) -> str:
        if alphabet not in ALPHABETS:
            raise self.fail(f"alphabet {alphabet!r} is not supported (supported: {', '.join(ALPHABETS)})")
        return alphabet

    def _start_lexeme(self, attributes: dict[str, str]) -> None:
        self._lexemes += 1
        if self._lexemes > self._limits.max_entries:
            raise self.fail(f"more than {self._limits.max_entries} lexemes")
        line, column = self.where()
        case_sensitive = CASE_SENSITIVE_ROLE in attributes.get("role", "").split()
        self._lexeme = _Lexeme(f"line {line}, column {column}: lexeme {self._lexemes}", case_sensitive)

    def _start_pronunciation(self, name: str, attributes: dict[str, str]) -> None:
        prefer = attributes.get("prefer", "false")
        if prefer not in {"true", "false"}:
            raise self.fail(f'<{name}> prefer must be "true" or "false"; got {prefer!r}')
        kind = name
        if name == "phoneme":
            alphabet = self._known_alphabet(attributes.get("alphabet", self._alphabet))
            kind = "reading" if alphabet == KATAKANA_ALPHABET else "phoneme"
        assert self._lexeme is not None  # _check: only inside a lexeme
        self._lexeme.pronunciations.append(_Pronunciation(kind, prefer == "true"))

    def characters(self, content: str) -> None:
        if self._skipping:
            return
        if self._open and self._open[-1] in _TEXT_ELEMENTS:
            self._text.append(content)
        elif content.strip():
            raise self.fail(f"text {content.strip()[:40]!r} is not allowed in <{self._open[-1]}>")

    def endElement(self, name: str) -> None:
        if self._skipping > 1:
            self._skipping -= 1
            return
        self._skipping = 0
        self._open.pop()
        lexeme = self._lexeme
        if lexeme is None:
            return
        text = normalise_space("".join(self._text))
        if name == "grapheme":
            lexeme.graphemes.append(text)
        elif name in {"phoneme", "alias"}:
            lexeme.pronunciations[-1].text = text
        elif name == "lexeme":
            self.entries.append(self._entry(lexeme))
            self._lexeme = None

    def _entry(self, lexeme: _Lexeme) -> LexiconEntry:
        """The lexeme's preferred pronunciation as an entry; every pronunciation is checked."""
        where = entry_place(lexeme.place, lexeme.graphemes)
        if not lexeme.graphemes:
            raise InvalidLexicon(f"{where}: has no <grapheme>")
        if not lexeme.pronunciations:
            raise InvalidLexicon(f"{where}: has no pronunciation (<phoneme> or <alias>)")
        entries = [self._pronounced(lexeme, p, where) for p in lexeme.pronunciations]
        for entry in entries:
            check_entry(entry, self.language, where, self._limits)
        preferred = [e for e, p in zip(entries, lexeme.pronunciations, strict=True) if p.prefer]
        return (preferred or entries)[0]

    @staticmethod
    def _pronounced(lexeme: _Lexeme, pronunciation: _Pronunciation, where: str) -> LexiconEntry:
        graphemes, case_sensitive = tuple(lexeme.graphemes), lexeme.case_sensitive
        if pronunciation.kind == "reading":
            reading, accent = split_accent(pronunciation.text, where)
            return LexiconEntry(graphemes, reading=reading, accent=accent, case_sensitive=case_sensitive)
        if pronunciation.kind == "alias":
            return LexiconEntry(graphemes, alias=pronunciation.text, case_sensitive=case_sensitive)
        return LexiconEntry(graphemes, phoneme=pronunciation.text, case_sensitive=case_sensitive)


def _refusal(message: str, line: int, column: int) -> InvalidLexicon:
    return InvalidLexicon(f"line {line}, column {column}: {message}")


def parse_pls(document: bytes, limits: LexiconLimits = DEFAULT_LIMITS) -> Lexicon:
    """A lexicon from a W3C PLS 1.0 document as uploaded; :class:`InvalidLexicon` (naming the line
    and column, and the lexeme) if it is too large, unsafe, malformed or holds an unusable entry."""
    if len(document) > limits.max_bytes:
        raise InvalidLexicon(f"the lexicon has {len(document)} bytes; at most {limits.max_bytes}")
    handler = _Handler(limits)
    parse_safely(document, handler, _refusal)
    return Lexicon(handler.language, tuple(handler.entries))
