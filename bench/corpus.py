"""The fixed benchmark corpus (public domain, see corpus/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"


def short_messages() -> list[str]:
    """One- to two-second messages, one per line."""
    return [line.strip() for line in (CORPUS / "short.txt").read_text().splitlines() if line.strip()]


def paragraphs() -> list[str]:
    """Long paragraphs separated by blank lines."""
    return [p.strip() for p in (CORPUS / "paragraphs.txt").read_text().split("\n\n") if p.strip()]


def ja_short() -> list[str]:
    """Short Japanese messages, one per line."""
    return [line.strip() for line in (CORPUS / "ja_short.txt").read_text().splitlines() if line.strip()]


def ja_paragraphs() -> list[str]:
    """Japanese prose paragraphs separated by blank lines."""
    return [p.strip() for p in (CORPUS / "ja_paragraphs.txt").read_text().split("\n\n") if p.strip()]


def narration() -> str:
    """About twenty minutes of continuous narration."""
    return (CORPUS / "narration.txt").read_text().strip()


def book_text(chars: int) -> str:
    """Pride and Prejudice chapters repeated to ``chars`` characters, cut after a whole word (the long
    job's text)."""
    chapters = (CORPUS / "pride_and_prejudice.txt").read_text().strip()
    text = "\n\n".join([chapters] * (chars // len(chapters) + 1))[: chars + 1]
    return text[: text.rstrip().rfind(" ")].rstrip() if len(text) > chars else text
