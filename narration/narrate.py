"""``ttsq narrate``: a book's chapters as one batch, followed live, each chapter downloaded as soon
as it succeeds, resumable after Ctrl-C or a failure.

With marks (``--marks``, sentence by default), each chapter's WebVTT and SRT subtitles and its
``marks.json`` are downloaded beside its audio.

Each chapter's ``ref`` is a key derived from its text and the synthesis options (marks included).
``DIR/.narrate.json`` keeps the batch id and what each chapter became, with the SHA-256 of its text and
of every file downloaded for it; a rerun keeps a finished chapter only if its text is the one narrated
and each file still has the SHA-256 it had when downloaded (anything else: a message naming the file,
and the chapter is narrated again). The batch's ``Idempotency-Key`` is derived from its request body,
so a rerun (within the server's 24 h) is answered with the same batch instead of a new one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from rich.console import Console

from narration.api_contract import JobStatus
from narration.books import read_book
from narration.client import BatchGone, ClientError, TTSQClient
from narration.interrupts import Checkpoints
from narration.outputs import Display, m3u
from narration.planning import (
    MARKS,
    SIDE_FILES,
    NarrateOptions,
    Planned,
    batch_body,
    idempotency_key,
    naming_chapters,
    plan,
)
from narration.state import Outcome, State, file_sha256, write_atomic
from tts_core.books.common import Book
from tts_core.text.file_names import book_name

POLL_S: Final = 1.0
"""Seconds between two reads of the batch."""

EXIT_FAILED: Final = 1
EXIT_INTERRUPTED: Final = 130
"""128 + SIGINT, as a shell reports a command stopped by Ctrl-C."""


def _stale(outcome: Outcome, planned: Planned, folder: Path) -> str | None:
    """Why a chapter an earlier run finished cannot be kept, or ``None``: its text is the one
    narrated, it has the files this run makes (perhaps under other names) and each has the SHA-256
    it had when downloaded."""
    if outcome.text_sha256 is None or not outcome.sha256:
        return "no checksum of it was recorded (narrated by an older ttsq)"
    if outcome.text_sha256 != planned.text_sha256:
        return "its text is not the text that was narrated"
    if outcome.side.keys() != planned.side.keys() or any(Path(n).name != n for n in outcome.files):
        return "its files are not the ones this run makes"
    for name in outcome.files:
        path = folder / name
        if name not in outcome.sha256:
            return f"{name} has no checksum recorded"
        if not path.is_file():
            return f"{name} is missing"
        if file_sha256(path) != outcome.sha256[name]:
            size = path.stat().st_size
            return f"{name} has changed since it was downloaded ({size} bytes, SHA-256 differs)"
    return None


def _renames(outcome: Outcome, planned: Planned) -> list[tuple[str, str]]:
    """``(old, new)`` names of a kept chapter's files that this run names otherwise (a chapter added
    before it, a new title)."""
    pairs = [(outcome.file, planned.file), *((outcome.side[k], planned.side[k]) for k in planned.side)]
    return [(old, new) for old, new in pairs if old != new]


def _move(folder: Path, renames: list[tuple[str, str]]) -> None:
    """Rename files through temporary names, so that two files taking each other's names both arrive."""
    for old, _ in renames:
        (folder / old).replace(folder / f".{old}.moving")
    for old, new in renames:
        (folder / f".{old}.moving").replace(folder / new)


class Narration:
    """One run of ``ttsq narrate``: plan, reuse, submit or rejoin, follow, download, write."""

    def __init__(self, book: Book, folder: Path, options: NarrateOptions, client: TTSQClient) -> None:
        self.book = book
        self.folder = folder
        self.options = options
        self.client = client
        self.planned = plan(book, options)
        self.state = State.load(folder, book.title)
        self.notes: list[str] = []
        """What a rerun found on disk that it could not keep, or moved, one line each."""
        self._ended_unseen: str | None = None
        """The job whose long poll last answered that it had ended (see :meth:`_until_next_read`)."""
        if self.state.problem:
            self.notes.append(f"{self.state.problem}; every chapter is narrated again")
        kept = self._keep()
        self.state.chapters = {p.ref: kept.get(p.ref) or self._fresh(p) for p in self.planned}
        self.reused = len(kept)

    def _keep(self) -> dict[str, Outcome]:
        """The chapters an earlier run finished whose files are as downloaded, moved to this run's
        names (and numbers and titles); a note for each one that is not kept, and why."""
        earlier = self.state.chapters
        kept: dict[str, Outcome] = {}
        renames: list[tuple[str, str]] = []
        for p in self.planned:
            outcome = earlier.get(p.ref)
            if outcome is None or outcome.status != JobStatus.SUCCEEDED:
                self._note_changed_text(p, earlier.values())
            elif (problem := _stale(outcome, p, self.folder)) is not None:
                self.notes.append(f"{p.chapter.label}: {problem}; narrating it again")
            else:
                kept[p.ref] = outcome
                renames += _renames(outcome, p)
        if renames:
            _move(self.folder, renames)
            self.notes += [f"{old} renamed to {new}" for old, new in renames]
        for p in self.planned:
            if p.ref in kept:
                kept[p.ref] = _renamed(kept[p.ref], p)
        if renames:
            self.state.chapters = {**earlier, **kept}
            self.state.save(self.folder)
        return kept

    def _note_changed_text(self, p: Planned, earlier: Iterable[Outcome]) -> None:
        """A note if an earlier run narrated this chapter (its source file, or its audio file) from
        another text."""
        for outcome in earlier:
            same = outcome.source == p.chapter.source if p.chapter.source else outcome.file == p.file
            if same and outcome.status == JobStatus.SUCCEEDED and outcome.text_sha256 not in (None, p.text_sha256):
                self.notes.append(f"{p.chapter.label}: its text changed since it was narrated; narrating it again")
                return

    @staticmethod
    def _fresh(p: Planned) -> Outcome:
        return Outcome(
            index=p.chapter.index,
            title=p.chapter.title,
            ref=p.ref,
            file=p.file,
            side=dict(p.side),
            source=p.chapter.source,
            text_sha256=p.text_sha256,
        )

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
            try:
                self.state.batch_id = self._submit(batch_body(missing, self.options))
            except ClientError as e:
                raise naming_chapters(e, missing) from e
        for p in missing:
            self.state.chapters[p.ref] = self._fresh(p)
        self.state.save(self.folder)

    def _submit(self, body: dict[str, Any]) -> str:
        """The batch's id. A key whose batch the server no longer has (its job TTL shorter than its
        idempotency keys' 24 h) is answered 404: then a new batch, under a key derived from that one."""
        key = idempotency_key(body, self.state.batch_id)
        try:
            return str(self.client.submit_batch(body, key)["id"])
        except ClientError as e:
            if e.code != "batch_not_found":
                raise
        return str(self.client.submit_batch(body, idempotency_key(body, key))["id"])

    def _rejoin(self, missing: list[Planned]) -> bool:
        assert self.state.batch_id is not None
        try:
            batch = self.client.get_batch(self.state.batch_id)
        except BatchGone:
            return False
        statuses = {item["ref"]: item["status"] for item in batch["items"]}
        over = {JobStatus.FAILED.value, JobStatus.CANCELED.value, None}
        return all(p.ref in statuses and statuses[p.ref] not in over for p in missing)

    def follow(self, on_change: Callable[[], None], checkpoints: Checkpoints | None = None) -> None:
        """Poll the batch every ``POLL_S`` until each missing chapter is finished, downloading each
        one the moment it succeeds; a Ctrl-C taken by ``checkpoints`` stops it between polls."""
        pause = time.sleep if checkpoints is None else checkpoints.sleep
        while self.state.batch_id is not None and any(o.status == "pending" for o in self.state.chapters.values()):
            if checkpoints is not None:
                checkpoints.check()
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
                self._until_next_read(pause)

    def _until_next_read(self, pause: Callable[[float], None]) -> None:
        """Wait up to ``POLL_S`` for the next read of the batch: on the first pending chapter's job with
        the API's long poll, which answers the moment that job ends, so a chapter is downloaded then,
        not up to a poll later. A job the batch still shows pending after its long poll said it had
        ended (or one the API no longer has) is waited for by the plain pause."""
        job_id = next((o.job_id for o in self.state.chapters.values() if o.status == "pending" and o.job_id), None)
        if job_id is None or job_id == self._ended_unseen:
            pause(POLL_S)
            return
        try:
            job = self.client.get(job_id, POLL_S)
        except ClientError:
            pause(POLL_S)
            return
        self._ended_unseen = job_id if JobStatus(job["status"]).terminal else None

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
            outcome.sha256 = {name: file_sha256(self.folder / name) for name in outcome.files}
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
                    "text_sha256": o.text_sha256,
                    "sha256": o.sha256 if o.status == JobStatus.SUCCEEDED else {},
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
        """The book's file name stem (its playlist, its .m4b)."""
        return book_name(self.book.title)


def _renamed(outcome: Outcome, planned: Planned) -> Outcome:
    """A kept chapter's outcome under this run's number, title and file names."""
    names = dict(_renames(outcome, planned))
    return Outcome(
        **{
            **asdict(outcome),
            "index": planned.chapter.index,
            "title": planned.chapter.title,
            "file": planned.file,
            "side": dict(planned.side),
            "source": planned.chapter.source,
            "sha256": {names.get(name, name): digest for name, digest in outcome.sha256.items()},
        }
    )


def narrate(book_path: Path, folder: Path, options: NarrateOptions, client: TTSQClient, console: Console) -> Narration:
    """Read, submit (or rejoin), follow with a live display, download, write the manifest and
    playlist. Raises ``InvalidBook``, ``ClientError``, ``OSError``; ``KeyboardInterrupt`` leaves the
    state saved and the batch running."""
    book = read_book(book_path)
    for line in book.left_out:
        console.print(f"left out: {line}", markup=False, highlight=False, soft_wrap=True)
    folder.mkdir(parents=True, exist_ok=True)
    narration = Narration(book, folder, options, client)
    for line in narration.notes:
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # paths whole, never folded
    if narration.reused:
        console.print(f"{narration.reused} chapter(s) already in {folder}, kept", soft_wrap=True)
    with Checkpoints() as checkpoints:  # Ctrl-C from here on stops between polls (narration.interrupts)
        if narration.missing:
            narration.start()
            console.print(f"batch {narration.state.batch_id}: {len(narration.missing)} chapter(s) to narrate")
        display = Display(book.title, narration.planned, narration.state.chapters.values, console)
        with display.progress:
            try:
                narration.follow(display.update, checkpoints)
            finally:
                narration.state.save(folder)
    narration.write_outputs()
    return narration
