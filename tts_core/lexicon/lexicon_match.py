"""Find a lexicon's graphemes in text: whole words, in any case unless an entry says otherwise,
across line breaks and runs of spaces, the first lexicon's entry winning.

Text and graphemes are cut alike into tokens: a word (letters, digits, marks), one other character
with its marks, or a run of whitespace, which matches a grapheme's space. A lexicon is indexed
once (:class:`GraphemeIndex`: its graphemes in a dict by their tokens' keys joined, and per first
word the lengths of the keys that start with it): some 40 ms of CPU for the largest allowed, where
a regular expression of its graphemes took 2 to 13 s to compile. An index is shared by every
matcher that uses the lexicon, whatever else a job asks for. Finding is linear in the text: a token
that starts no grapheme costs one dict lookup, one that does one slice and lookup per distinct
length of the graphemes starting with it (at most ``LexiconLimits.max_grapheme_chars`` of them: a
lexicon built to make every place cost that, against text built for it, was measured at 8 µs of
CPU a character, 24 µs in Japanese, where typical text costs 0.2 µs).

At a place the first lexicon with a grapheme there wins (as Polly applies several), its entries
matched in case before those in any case; within a lexicon the longest grapheme wins ("New York
City" before "New York"). Languages written without spaces (:data:`SPACELESS_LANGUAGES`) match
graphemes anywhere, from any character, rather than as whole words.

Case: both sides are compared in their canonical composition (NFC), so a grapheme matches its own
spelling composed or decomposed. A case-insensitive grapheme matches text with the same full Unicode
case folding: "Straße" matches "STRASSE" and "strasse", "ﬁle" matches "FILE", "Σοφός"
matches "ΣΟΦΌΣ"; a dotted capital İ folds to i (as Turkish lowercases it), so "İstanbul" matches
"ISTANBUL" and "istanbul". Widths are not folded: full-width letters match their other case in
full width, not ASCII.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

import regex

from tts_core.lexicon.lexicon import Lexicon, LexiconEntry

SPACELESS_LANGUAGES: Final = frozenset({"ja", "zh", "th"})
"""Languages written without spaces between words: graphemes match anywhere, not as whole words."""

_WORD_TOKENS: Final = regex.compile(r"\w+|\s+|\X")
"""Whole-word tokens: words (``regex``'s ``\\w`` holds letters, marks, digits and connectors), runs of
whitespace, and any other character with the marks on it (a grapheme cluster)."""
_CHARACTER_TOKENS: Final = regex.compile(r"\s+|\X")
"""Tokens of text without spaces between words: each grapheme cluster, and runs of whitespace."""
_ASCII_WORD_TOKENS: Final = re.compile(r"\w+|\s+|.", re.ASCII | re.DOTALL)
_ASCII_CHARACTER_TOKENS: Final = re.compile(r"\s+|.", re.ASCII | re.DOTALL)
"""The same tokens of ASCII text (``regex`` and ``re`` agree on its word and space characters)."""
_ASCII_SPACES: Final = re.compile(r"[\t\n\v\f\r]\s*| \s+", re.ASCII)
"""Runs of whitespace other than one space (most are one space, and replacing them costs)."""
_WORD_START: Final = regex.compile(r"\w")
_WHITESPACE: Final = regex.compile(r"\s+")
_SPACE: Final = " "
"""Every run of whitespace, in text or a grapheme, as a key."""
_DOTTED_I: Final = "i\u0307"
"""What full case folding makes of İ: i and a combining dot above, which Turkish writes as i."""


@dataclass(frozen=True)
class Match:
    """Where a grapheme was found (offsets end exclusive) and the entry that says how it is spoken."""

    start: int
    end: int
    entry: LexiconEntry


@dataclass(frozen=True)
class _Table:
    """A lexicon's graphemes of one case sensitivity."""

    case_sensitive: bool
    entries: dict[str, LexiconEntry]
    """By key (the grapheme's tokens' keys joined); the first entry of a key kept."""
    starts: dict[str, tuple[int, ...]]
    """By the key of a grapheme's first word (whole words) or character (else): the lengths of the
    keys that start with it, longest first."""


class GraphemeIndex:
    """A lexicon's spoken-by-text graphemes (alias or IPA; readings go to the G2P's dictionary)
    indexed for :class:`LexiconMatcher`: built once per lexicon, shared by the matchers using it."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.lexicon = lexicon
        self.whole_words = lexicon.primary_language not in SPACELESS_LANGUAGES
        """False for a spaceless language: graphemes match inside words."""
        self.tables = _tables(lexicon, self.whole_words)
        """Entries matched in case first, as a lexicon's are tried."""
        self.readings = tuple(entry for entry in lexicon.entries if entry.reading is not None)
        """Katakana entries, for the Japanese G2P's user dictionary."""
        self.graphemes = sum(len(entry.graphemes) for entry in lexicon.entries)
        """The lexicon's graphemes, its readings' too: what its memory grows with (some 500 bytes
        each, lexicon and index), for a cache of indexes to count."""

    @classmethod
    def of(cls, lexicon: Lexicon | GraphemeIndex) -> GraphemeIndex:
        """The lexicon's index: as given if already indexed."""
        return lexicon if isinstance(lexicon, GraphemeIndex) else cls(lexicon)


class LexiconMatcher:
    """The graphemes of lexicons applied in order; :meth:`find` lists their matches in a text."""

    def __init__(self, lexicons: Sequence[Lexicon | GraphemeIndex]) -> None:
        """Lexicons are indexed here unless given indexed; all must share :attr:`GraphemeIndex.whole_words`
        (a voice's lexicons share its language)."""
        indexes = [GraphemeIndex.of(lexicon) for lexicon in lexicons]
        modes = {index.whole_words for index in indexes if index.tables}
        if len(modes) > 1:
            raise ValueError("lexicons of languages with and without spaces between words cannot be matched together")
        self._whole_words = modes.pop() if modes else True
        self._tables = tuple(table for index in indexes for table in index.tables)

    def __bool__(self) -> bool:
        return bool(self._tables)

    def find(self, text: str) -> Iterator[Match]:
        """The matches in ``text``, left to right, none overlapping."""
        if not self._tables:
            return
        tokens = _Tokens(text, self._whole_words)
        candidates = sorted({n for table in self._tables for n in tokens.starting(table)})
        resume = 0
        for start in candidates:
            if start >= resume and tokens.may_start(start):
                found = self._longest(tokens, start)
                if found is not None:
                    resume, entry = found
                    yield Match(tokens.offsets[start], tokens.offsets[resume], entry)

    def _longest(self, tokens: _Tokens, start: int) -> tuple[int, LexiconEntry] | None:
        """Where the first table's longest grapheme at token ``start`` ends, and its entry. Each
        length of a grapheme starting with the token costs one slice and one lookup; only a key found
        is checked to end at a token (not inside one) and at a word's end."""
        for table in self._tables:
            keyed = tokens.keyed(table.case_sensitive)
            begin = keyed.at[start]
            for length in table.starts.get(tokens.first(keyed.keys[start]), ()):
                entry = table.entries.get(keyed.joined[begin : begin + length])
                if entry is not None:
                    stop = keyed.stop(start, begin + length)
                    if stop is not None and tokens.may_stop(stop):
                        return stop, entry
        return None


@dataclass(frozen=True)
class _Keyed:
    """A text's token keys for one case sensitivity, joined, with where each token's key starts."""

    keys: list[str]
    joined: str
    at: list[int]
    """Where each token's key starts in :attr:`joined`, and its end."""

    def stop(self, start: int, end: int) -> int | None:
        """The token whose key starts at ``end`` of :attr:`joined`, after token ``start``; None where
        ``end`` falls inside a token's key or past the text."""
        stop = bisect.bisect_left(self.at, end, start + 1)
        return stop if stop < len(self.at) and self.at[stop] == end else None


class _Tokens:
    """A text cut into tokens, with their keys for each case sensitivity (computed when first asked)."""

    def __init__(self, text: str, whole_words: bool) -> None:
        self.text = text
        self.whole_words = whole_words
        self.parts = _tokens(text, whole_words)
        self.offsets = list(accumulate(map(len, self.parts), initial=0))
        """Where each token starts in the text, and the text's end."""
        self._keyed: dict[bool, _Keyed] = {}

    def keyed(self, case_sensitive: bool) -> _Keyed:
        """Each token's key (:func:`_token_key`); ASCII text keeps its tokens' bounds when spaced and
        lowercased, so it is keyed whole, in C."""
        keyed = self._keyed.get(case_sensitive)
        if keyed is None:
            if self.text.isascii():
                keys = _tokens(_ascii_key(self.text, case_sensitive), self.whole_words)
            else:
                keys = [_token_key(part, case_sensitive) for part in self.parts]
            keyed = _Keyed(keys, "".join(keys), list(accumulate(map(len, keys), initial=0)))
            self._keyed[case_sensitive] = keyed
        return keyed

    def first(self, key: str) -> str:
        """What a token's key is looked up by in :attr:`_Table.starts`: in text without spaces between
        words its first character, so that a grapheme matches text of the same folding however
        its characters fold ("ﬁ" and "FI")."""
        return key if self.whole_words else key[:1]

    def starting(self, table: _Table) -> list[int]:
        """The tokens whose key starts some grapheme of ``table``."""
        keys = self.keyed(table.case_sensitive).keys
        if self.whole_words:
            return [n for n, key in enumerate(keys) if key in table.starts]
        return [n for n, key in enumerate(keys) if key[:1] in table.starts]

    def may_start(self, token: int) -> bool:
        """Whether a match may start at ``token``: as whole words, not right after a word character."""
        return not self.whole_words or token == 0 or not _is_word(self.parts[token - 1])

    def may_stop(self, stop: int) -> bool:
        """Whether a match may end before token ``stop``: as whole words, not right before a word character."""
        return not self.whole_words or stop == len(self.parts) or not _is_word(self.parts[stop])


def _tables(lexicon: Lexicon, whole_words: bool) -> tuple[_Table, ...]:
    """The lexicon's case-sensitive graphemes, then its others; a table only if it has some."""
    tables = {case_sensitive: _Table(case_sensitive, {}, {}) for case_sensitive in (True, False)}
    lengths: dict[bool, dict[str, set[int]]] = {True: {}, False: {}}
    for entry in lexicon.entries:
        if entry.reading is not None:
            continue
        table = tables[entry.case_sensitive]
        for grapheme in entry.graphemes:
            keyed = _grapheme_key(grapheme.strip(), entry.case_sensitive, whole_words)
            if keyed is not None:
                first, key = keyed
                table.entries.setdefault(key, entry)
                lengths[entry.case_sensitive].setdefault(first, set()).add(len(key))
    for case_sensitive, table in tables.items():
        table.starts.update((key, tuple(sorted(n, reverse=True))) for key, n in lengths[case_sensitive].items())
    return tuple(table for table in tables.values() if table.entries)


def _grapheme_key(grapheme: str, case_sensitive: bool, whole_words: bool) -> tuple[str, str] | None:
    """What a grapheme is found by (:meth:`_Tokens.first` of its first token's key) and its whole
    key (its tokens' keys joined, as a text's are); None for a grapheme of nothing."""
    if not grapheme:
        return None
    if grapheme.isascii():
        key = _ascii_key(grapheme, case_sensitive)
        first = _ASCII_WORD_TOKENS.match(key) if whole_words else None
        return (key[:1] if first is None else first.group()), key
    keys = [_token_key(part, case_sensitive) for part in _tokens(grapheme, whole_words)]
    return (keys[0] if whole_words else keys[0][:1]), "".join(keys)


def _tokens(text: str, whole_words: bool) -> list[str]:
    """``text`` cut into tokens; ASCII by ``re``, the same tokens two to three times as fast."""
    if text.isascii():
        return (_ASCII_WORD_TOKENS if whole_words else _ASCII_CHARACTER_TOKENS).findall(text)
    return (_WORD_TOKENS if whole_words else _CHARACTER_TOKENS).findall(text)


def _ascii_key(text: str, case_sensitive: bool) -> str:
    """The keys of an ASCII text's tokens, joined: :func:`_token_key` of each, all at once."""
    spaced = _ASCII_SPACES.sub(_SPACE, text)
    return spaced if case_sensitive else spaced.lower()


TOKEN_KEYS_KEPT: Final = 16_384
"""Keys of short non-ASCII tokens a process remembers (a text's words, and a Japanese text's
characters, repeat): at most :data:`TOKEN_KEY_CHARS` characters each, some 4 MiB in all."""
TOKEN_KEY_CHARS: Final = 32
"""Tokens longer than this are keyed afresh: a text's one long word kept would hold its memory."""


def _token_key(part: str, case_sensitive: bool) -> str:
    """How a token is compared: whitespace as one space; NFC; full case folding unless case matters."""
    return _remembered_key(part, case_sensitive) if len(part) <= TOKEN_KEY_CHARS else _key(part, case_sensitive)


def _key(part: str, case_sensitive: bool) -> str:
    if _WHITESPACE.match(part):
        return _SPACE
    composed = unicodedata.normalize("NFC", part)
    if case_sensitive:
        return composed
    return unicodedata.normalize("NFC", composed.casefold()).replace(_DOTTED_I, "i")


_remembered_key: Final = functools.lru_cache(maxsize=TOKEN_KEYS_KEPT)(_key)


def _is_word(part: str) -> bool:
    return _WORD_START.match(part) is not None
