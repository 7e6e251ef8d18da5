"""Reading XML that users send (SSML, PLS lexicons) without trusting it.

The parser is ``defusedxml``'s SAX reader with DTDs forbidden: a ``<!DOCTYPE`` or ``<!ENTITY`` is
refused before anything in it is read, so nothing is expanded (no entity bombs) or fetched (no
external entities). Every refusal carries the line and column (1-based, columns in characters) it
was found at; each caller turns them into its own error class.
"""

from __future__ import annotations

import re
import xml.sax
from collections.abc import Callable
from typing import Final
from xml.sax.handler import ContentHandler
from xml.sax.xmlreader import Locator

import defusedxml.sax
from defusedxml import DefusedXmlException

DECLARATION: Final = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)
"""A DTD or entity declaration: found in the bytes to say exactly where it starts (in encodings
that keep ASCII as ASCII; in others the parser's own refusal stands behind it)."""

NO_DECLARATIONS: Final = "DTDs and entity declarations are not allowed"

Refusal = Callable[[str, int, int], Exception]
"""Builds the caller's error from a message, a line and a column."""


class LocatedHandler(ContentHandler):
    """A SAX handler that knows where the parser is, for messages that say where."""

    def __init__(self) -> None:
        super().__init__()
        self._locator: Locator | None = None

    def setDocumentLocator(self, locator: Locator) -> None:
        self._locator = locator

    def where(self) -> tuple[int, int]:
        """Line and column (1-based) of the event being handled: a start tag's ``<``."""
        if self._locator is None:
            return 1, 1
        return self._locator.getLineNumber() or 1, (self._locator.getColumnNumber() or 0) + 1


def position(document: bytes, offset: int) -> tuple[int, int]:
    """Line and column (1-based, in characters) of a byte offset of a UTF-8 document."""
    line_start = document.rfind(b"\n", 0, offset) + 1
    column = len(document[line_start:offset].decode("utf-8", errors="replace")) + 1
    return document.count(b"\n", 0, offset) + 1, column


def parse_safely(document: bytes, handler: LocatedHandler, refuse: Refusal) -> None:
    """Feed ``document`` to ``handler``; a DTD, an entity declaration, a document that is not
    well-formed or an encoding the parser cannot read is refused through ``refuse``. What the
    handler raises passes through."""
    if (declaration := DECLARATION.search(document)) is not None:
        raise refuse(NO_DECLARATIONS, *position(document, declaration.start()))
    try:
        defusedxml.sax.parseString(document, handler, forbid_dtd=True)
    except xml.sax.SAXParseException as e:
        raise refuse(str(e.getMessage()), e.getLineNumber() or 1, (e.getColumnNumber() or 0) + 1) from None
    except DefusedXmlException:
        raise refuse(NO_DECLARATIONS, *handler.where()) from None
    except ValueError as e:  # pyexpat: an XML declaration naming a multi-byte encoding it cannot read
        raise refuse(f"cannot read the document: {e}", *handler.where()) from None
