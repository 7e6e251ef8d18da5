"""A lexicon written as a W3C PLS 1.0 document, for a tenant who takes it elsewhere or edits it as
PLS: what ``tts_core.lexicon.lexicon_documents.parse_pls`` reads back as the same :class:`Lexicon`.

One ``<lexeme>`` per entry, in order, with its graphemes and its one pronunciation: an alias as
``<alias>``, IPA as ``<phoneme>`` (the document's alphabet), a reading as ``<phoneme
alphabet="x-katakana">`` with its accent as the mark after the accented mora (first for flat). PLS
has no rule on case; a case-sensitive entry's lexeme carries ttsq's role ``ttsq:case-sensitive``
(other PLS processors may apply such a lexeme only where the text asks for that role). Text is
escaped for XML; every character a checked entry may hold has an XML form
(``lexicon_entries.NOT_XML``).
"""

from __future__ import annotations

from typing import Final
from xml.sax.saxutils import escape, quoteattr

from tts_core.lexicon.lexicon import Lexicon, LexiconEntry, marked_reading
from tts_core.lexicon.lexicon_documents import CASE_SENSITIVE_ROLE, KATAKANA_ALPHABET, PLS_NAMESPACE, TTSQ_NAMESPACE

PLS_DECLARATION: Final = '<?xml version="1.0" encoding="UTF-8"?>\n'


def to_pls(lexicon: Lexicon) -> bytes:
    """The lexicon as a PLS 1.0 document in UTF-8."""
    namespaces = f"xmlns={quoteattr(PLS_NAMESPACE)}"
    if any(entry.case_sensitive for entry in lexicon.entries):
        namespaces += f" xmlns:ttsq={quoteattr(TTSQ_NAMESPACE)}"
    head = f'<lexicon version="1.0" {namespaces} alphabet="ipa" xml:lang={quoteattr(lexicon.language)}>\n'
    lexemes = "".join(_lexeme(entry) for entry in lexicon.entries)
    return (PLS_DECLARATION + head + lexemes + "</lexicon>\n").encode("utf-8")


def _lexeme(entry: LexiconEntry) -> str:
    role = f" role={quoteattr(CASE_SENSITIVE_ROLE)}" if entry.case_sensitive else ""
    graphemes = "".join(f"    <grapheme>{escape(g)}</grapheme>\n" for g in entry.graphemes)
    return f"  <lexeme{role}>\n{graphemes}    {_pronunciation(entry)}\n  </lexeme>\n"


def _pronunciation(entry: LexiconEntry) -> str:
    if entry.alias is not None:
        return f"<alias>{escape(entry.alias)}</alias>"
    if entry.reading is not None:
        reading = marked_reading(entry.reading, entry.accent)
        return f"<phoneme alphabet={quoteattr(KATAKANA_ALPHABET)}>{escape(reading)}</phoneme>"
    assert entry.phoneme is not None  # an entry has exactly one pronunciation (lexicon_entries.check_entry)
    return f"<phoneme>{escape(entry.phoneme)}</phoneme>"
