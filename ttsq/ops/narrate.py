"""``ttsq narrate``: a book's chapters as one batch, followed live, each chapter downloaded as soon
as it succeeds, resumable after Ctrl-C or a failure.

With marks (``--marks``, sentence by default), each chapter's WebVTT and SRT subtitles and its
``marks.json`` are downloaded beside its audio.

Each chapter's ``ref`` is a key derived from its text and the synthesis options (marks included),
so a rerun knows which files on disk are still right. ``DIR/.narrate.json`` keeps the batch id and what each
chapter became; the batch's ``Idempotency-Key`` is derived from its request body, so a rerun (within
the server's 24 h) is answered with the same batch instead of a new one.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from tts_core.marks import Mark, MarkType
from tts_core.subtitles import Cue, build_cues, to_webvtt
from ttsq.jobs import JobStatus
from ttsq.ops.books import Book, Chapter, read_book, safe_name
from ttsq.ops.client import BatchGone, ClientError, TTSQClient

STATE_FILE: Final = ".narrate.json"
"""In the output folder: the batch id and each chapter's ref, file, job and outcome."""

POLL_S: Final = 1.0
"""Seconds between two reads of the batch."""

REF_CHARS: Final = 16
"""Hex digits of a chapter's ref (64 bits of sha256: no two chapters of a book collide)."""

MARKS: Final[dict[str, tuple[MarkType, ...]]] = {"none": (), "sentence": ("sentence",), "word": ("sentence", "word")}
"""``--marks`` choices and the job ``marks`` each asks for: word marks come with sentence marks,
which the subtitles are cut from."""

SIDE_FILES: Final = {"subtitles": ".vtt", "srt": ".srt", "marks": ".marks.json"}
"""What a chapter with marks gets beside its audio: the result's ``<kind>_url``, saved as
``NN-title<suffix>``."""

EXIT_FAILED: Final = 1
EXIT_INTERRUPTED: Final = 130
"""128 + SIGINT, as a shell reports a command stopped by Ctrl-C."""


@dataclass(frozen=True)
class NarrateOptions:
    """What the audio of every chapter is made with; part of each chapter's ref."""

    voice: str | None
    format: str
    speed: float | None
    by: str = "chapter"
    """``chapter``: one audio file per chapter; ``file``: the whole book as one item and one file."""
    marks: str = "sentence"
    """A key of ``MARKS``: which timing marks, and so which subtitle files, each chapter gets."""


@dataclass(frozen=True)
class Planned:
    """A chapter as narrated: its ref, the file its audio goes to and those its marks go to."""

    chapter: Chapter
    ref: str
    file: str
    side: dict[str, str]
    """Files by ``SIDE_FILES`` kind; empty without marks."""


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


@dataclass
class State:
    """``DIR/.narrate.json``."""

    book: str
    batch_id: str | None = None
    chapters: dict[str, Outcome] = field(default_factory=dict)
    """Outcomes by ref."""

    @classmethod
    def load(cls, folder: Path, book: str) -> State:
        path = folder / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            outcomes = {entry["ref"]: Outcome(**entry) for entry in raw["chapters"]}
            return cls(book=book, batch_id=raw.get("batch_id"), chapters=outcomes)
        except (OSError, ValueError, KeyError, TypeError):
            return cls(book=book)

    def save(self, folder: Path) -> None:
        body = {"book": self.book, "batch_id": self.batch_id, "chapters": [asdict(o) for o in self.chapters.values()]}
        write_atomic(folder / STATE_FILE, json.dumps(body, indent=1, ensure_ascii=False))


def chapter_ref(text: str, options: NarrateOptions) -> str:
    """A key that changes whenever the chapter's files would: its text, voice, format, speed and
    marks. Marks join the key only when asked for, so a ``--marks none`` run keeps the refs (and
    the files) of runs made before marks existed."""
    parts: list[Any] = [text, options.voice, options.format, options.speed]
    if MARKS[options.marks]:
        parts.append(MARKS[options.marks])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:REF_CHARS]


def plan(book: Book, options: NarrateOptions) -> list[Planned]:
    """The chapters to narrate (the whole book as one with ``by="file"``), each with ref and file."""
    chapters = book.chapters
    if options.by == "file":
        chapters = [Chapter(1, book.title, "\n\n".join(c.text for c in book.chapters))]
    planned = []
    for chapter in chapters:
        stem = safe_name(chapter.index, chapter.title)
        side = {kind: stem + suffix for kind, suffix in SIDE_FILES.items()} if MARKS[options.marks] else {}
        planned.append(Planned(chapter, chapter_ref(chapter.text, options), f"{stem}.{options.format}", side))
    return planned


def batch_body(planned: Iterable[Planned], options: NarrateOptions) -> dict[str, Any]:
    marks = list(MARKS[options.marks]) or None
    defaults = {"voice": options.voice, "format": options.format, "speed": options.speed, "marks": marks}
    items = [
        {"text": p.chapter.text, "ref": p.ref, "metadata": {"title": p.chapter.title, "index": p.chapter.index}}
        for p in planned
    ]
    return {"items": items, "defaults": {k: v for k, v in defaults.items() if v is not None}}


def idempotency_key(body: dict[str, Any], replacing: str | None) -> str:
    """Derived from the request body, and from the batch it replaces (a rerun after that one
    failed or expired must not be answered with it again)."""
    digest = hashlib.sha256(json.dumps([body, replacing], sort_keys=True).encode()).hexdigest()
    return f"ttsq-narrate-{digest[:40]}"


def write_atomic(path: Path, text: str) -> None:
    """Write the text under a temporary name, then rename: the file under its name is always whole."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def _kept(outcome: Outcome | None, planned: Planned, folder: Path) -> bool:
    """A chapter finished by an earlier run: succeeded, its audio there with the size it had, and
    every subtitle and marks file it should have there too."""
    if outcome is None or outcome.status != JobStatus.SUCCEEDED or outcome.bytes is None:
        return False
    path = folder / outcome.file
    if not path.is_file() or path.stat().st_size != outcome.bytes:
        return False
    return outcome.side == planned.side and all((folder / name).is_file() for name in outcome.side.values())


class Narration:
    """One run of ``ttsq narrate``: plan, reuse, submit or rejoin, follow, download, write."""

    def __init__(self, book: Book, folder: Path, options: NarrateOptions, client: TTSQClient) -> None:
        self.book = book
        self.folder = folder
        self.options = options
        self.client = client
        self.planned = plan(book, options)
        self.state = State.load(folder, book.title)
        kept = {
            p.ref: self.state.chapters[p.ref] for p in self.planned if _kept(self.state.chapters.get(p.ref), p, folder)
        }
        self.state.chapters = {p.ref: kept.get(p.ref) or self._fresh(p) for p in self.planned}
        self.reused = len(kept)

    @staticmethod
    def _fresh(p: Planned) -> Outcome:
        return Outcome(index=p.chapter.index, title=p.chapter.title, ref=p.ref, file=p.file, side=dict(p.side))

    @property
    def missing(self) -> list[Planned]:
        return [p for p in self.planned if self.state.chapters[p.ref].status != JobStatus.SUCCEEDED]

    def start(self) -> None:
        """Rejoin the saved batch if it still has every missing chapter on its way; else submit a
        batch of the missing chapters. The batch id is saved before anything else happens."""
        missing = self.missing
        if not missing:
            return
        if self.state.batch_id is None or not self._rejoin(missing):
            body = batch_body(missing, self.options)
            self.state.batch_id = self.client.submit_batch(body, idempotency_key(body, self.state.batch_id))["id"]
        for p in missing:
            self.state.chapters[p.ref] = self._fresh(p)
        self.state.save(self.folder)

    def _rejoin(self, missing: list[Planned]) -> bool:
        assert self.state.batch_id is not None
        try:
            batch = self.client.get_batch(self.state.batch_id)
        except BatchGone:
            return False
        statuses = {item["ref"]: item["status"] for item in batch["items"]}
        over = {JobStatus.FAILED.value, JobStatus.CANCELED.value, None}
        return all(p.ref in statuses and statuses[p.ref] not in over for p in missing)

    def follow(self, on_change: Callable[[], None]) -> None:
        """Poll the batch every ``POLL_S`` until each missing chapter is finished, downloading each
        one the moment it succeeds."""
        while self.state.batch_id is not None and any(o.status == "pending" for o in self.state.chapters.values()):
            batch = self.client.get_batch(self.state.batch_id)
            changed = False
            for item in batch["items"]:
                outcome = self.state.chapters.get(item["ref"])
                if outcome is not None and outcome.status == "pending" and item["status"] is not None:
                    changed |= self._settle(outcome, item)
            if changed:
                self.state.save(self.folder)
            on_change()
            if any(o.status == "pending" for o in self.state.chapters.values()):
                time.sleep(POLL_S)

    def _settle(self, outcome: Outcome, item: dict[str, Any]) -> bool:
        status = JobStatus(item["status"])
        outcome.job_id = item["job_id"]
        if not status.terminal:
            return False
        if status is JobStatus.SUCCEEDED:
            for kind, name in outcome.side.items():
                url = item["result"].get(f"{kind}_url")
                if url is None:
                    raise ClientError(f"job {item['job_id']} succeeded without the {kind} it was asked for")
                self.client.fetch(url, self.folder / name)
            outcome.bytes = self.client.download(item["job_id"], self.folder / outcome.file)
            outcome.duration_s = item["result"]["duration_s"]
        else:
            error = item.get("error") or {}
            outcome.error = f"{error.get('code', status.value)}: {error.get('message', '')}".rstrip(": ")
        outcome.status = status.value
        return True

    @property
    def succeeded(self) -> list[Outcome]:
        return [o for o in self.state.chapters.values() if o.status == JobStatus.SUCCEEDED]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.state.chapters.values() if o.status not in (JobStatus.SUCCEEDED, "pending")]

    def write_outputs(self) -> None:
        """``manifest.json`` and ``<book>.m3u`` (the chapters that have audio)."""
        manifest = {
            "book": self.book.title,
            "batch_id": self.state.batch_id,
            "format": self.options.format,
            "voice": self.options.voice,
            "marks": list(MARKS[self.options.marks]),
            "chapters": [
                {
                    "index": o.index,
                    "title": o.title,
                    "file": o.file if o.status == JobStatus.SUCCEEDED else None,
                    **{
                        f"{kind}_file": o.side.get(kind) if o.status == JobStatus.SUCCEEDED else None
                        for kind in SIDE_FILES
                    },
                    "ref": o.ref,
                    "job_id": o.job_id,
                    "duration_s": o.duration_s,
                    "status": o.status,
                    "error": o.error,
                }
                for o in self.state.chapters.values()
            ],
        }
        write_atomic(self.folder / "manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        write_atomic(self.folder / f"{self.book_name}.m3u", m3u(self.book.title, self.succeeded))

    @property
    def book_name(self) -> str:
        """The book's file name stem: its ``safe_name`` without the number."""
        return safe_name(0, self.book.title).removeprefix("00-") or "book"


def m3u(title: str, outcomes: Iterable[Outcome]) -> str:
    """An extended M3U playlist: each file with its duration (whole seconds) and title."""
    lines = ["#EXTM3U", f"#PLAYLIST:{title}"]
    for o in outcomes:
        lines += [f"#EXTINF:{round(o.duration_s or 0)},{o.title}", o.file]
    return "\n".join(lines) + "\n"


def book_webvtt(chapters: Iterable[tuple[list[Mark], tuple[int, int]]]) -> str:
    """One WebVTT file for the audiobook: each chapter's cues (from its marks and its span in the
    book, in ms) moved to where the chapter starts, and cut at its end (a chapter's decoded audio
    may be a few ms shorter than the duration its marks were timed against)."""
    cues = [
        Cue(start + cue.start_ms, min(start + cue.end_ms, end), cue.lines)
        for marks, (start, end) in chapters
        for cue in build_cues(marks)
        if start + cue.start_ms < end
    ]
    return to_webvtt(cues)


class Display:
    """The live progress line: chapters done of total, percent of characters, minutes of audio, ETA."""

    def __init__(self, narration: Narration, console: Console) -> None:
        self.narration = narration
        self.characters = {p.ref: len(p.chapter.text) for p in narration.planned}
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[chapters]} chapters"),
            TextColumn("{task.fields[audio]} min of audio"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task(
            narration.book.title, total=sum(self.characters.values()), chapters="", audio=""
        )
        self.update()

    def update(self) -> None:
        outcomes = self.narration.state.chapters.values()
        finished = [o for o in outcomes if o.status != "pending"]
        audio_min = sum(o.duration_s or 0 for o in outcomes) / 60
        self.progress.update(
            self.task,
            completed=sum(self.characters[o.ref] for o in finished),
            chapters=f"{len(finished)}/{len(self.characters)}",
            audio=f"{audio_min:.1f}",
        )


def failure_table(outcomes: Iterable[Outcome]) -> Table:
    table = Table(title="Chapters without audio")
    for column in ("#", "title", "status", "error"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(str(o.index), o.title, o.status, o.error or "")
    return table


def resume_command(book: Path, folder: Path, options: NarrateOptions, api_url: str | None, m4b: bool) -> str:
    argv = ["ttsq", "narrate", str(book), "--out", str(folder), "--format", options.format, "--by", options.by]
    argv += ["--marks", options.marks]
    if options.voice:
        argv += ["--voice", options.voice]
    if options.speed is not None:
        argv += ["--speed", str(options.speed)]
    if api_url:
        argv += ["--api-url", api_url]
    if m4b:
        argv.append("--m4b")
    return shlex.join(argv)


def narrate(book_path: Path, folder: Path, options: NarrateOptions, client: TTSQClient, console: Console) -> Narration:
    """Read, submit (or rejoin), follow with a live display, download, write the manifest and
    playlist. Raises ``BookError``, ``ClientError``, ``OSError``; ``KeyboardInterrupt`` leaves the
    state saved and the batch running."""
    book = read_book(book_path)
    folder.mkdir(parents=True, exist_ok=True)
    narration = Narration(book, folder, options, client)
    if narration.reused:
        console.print(f"{narration.reused} chapter(s) already in {folder}, kept")
    if narration.missing:
        narration.start()
        console.print(f"batch {narration.state.batch_id}: {len(narration.missing)} chapter(s) to narrate")
    display = Display(narration, console)
    with display.progress:
        try:
            narration.follow(display.update)
        finally:
            narration.state.save(folder)
    narration.write_outputs()
    return narration
