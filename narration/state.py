"""``DIR/.narrate.json``: what each chapter became, with the SHA-256 of its text and of every file
downloaded for it, so a rerun keeps only what is still as it was downloaded."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from pydantic import TypeAdapter, ValidationError

STATE_FILE: Final = ".narrate.json"
"""In the output folder: the batch id and each chapter's ref, file, job and outcome."""


@dataclass
class Outcome:
    """What became of one chapter: kept in the state file and written to the manifest."""

    index: int
    title: str
    ref: str
    file: str
    job_id: str | None = None
    status: str = "pending"
    bytes: int | None = None
    duration_s: float | None = None
    error: str | None = None
    side: dict[str, str] = field(default_factory=dict)
    """The chapter's subtitle and marks files by ``SIDE_FILES`` kind."""
    source: str | None = None
    """The chapter's file, in a folder book."""
    text_sha256: str | None = None
    """SHA-256 of the chapter's text as sent."""
    sha256: dict[str, str] = field(default_factory=dict)
    """SHA-256 of each of its files as downloaded, by file name: what a rerun checks before keeping it."""

    @property
    def files(self) -> list[str]:
        """Its audio file, then its subtitle and marks files."""
        return [self.file, *self.side.values()]


_OUTCOMES: Final = TypeAdapter(list[Outcome])


@dataclass
class State:
    """``DIR/.narrate.json``."""

    book: str
    batch_id: str | None = None
    chapters: dict[str, Outcome] = field(default_factory=dict)
    """Outcomes by ref."""
    problem: str | None = None
    """Why the file could not be used, if it exists and could not (not saved)."""

    @classmethod
    def load(cls, folder: Path, book: str) -> State:
        """The saved state; an empty one if there is none, or (with ``problem`` saying why) if it
        cannot be read or is not what ``ttsq narrate`` writes: truncated, edited into another shape."""
        path = folder / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            if not isinstance(raw, dict):
                raise TypeError("not a JSON object")
            outcomes = _OUTCOMES.validate_python(raw["chapters"])
            batch_id = raw["batch_id"]
            if not isinstance(batch_id, str | None):
                raise TypeError(f"batch_id is {batch_id!r}")
        except FileNotFoundError:
            return cls(book=book)
        except ValidationError as e:
            first = e.errors()[0]
            where = "chapters" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
            return cls(book=book, problem=f"{path}: {where}: {first['msg']}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            reason = f"no {e}" if isinstance(e, KeyError) else str(e)
            return cls(book=book, problem=f"{path}: cannot be used ({reason})")
        return cls(book=book, batch_id=batch_id, chapters={o.ref: o for o in outcomes})

    def save(self, folder: Path) -> None:
        body = {"book": self.book, "batch_id": self.batch_id, "chapters": [asdict(o) for o in self.chapters.values()]}
        write_atomic(folder / STATE_FILE, json.dumps(body, indent=1, ensure_ascii=False))


def write_atomic(path: Path, text: str) -> None:
    """Write the text under a temporary name, then rename: the file under its name is always whole."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
