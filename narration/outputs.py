"""What ``ttsq narrate`` writes beside the chapters and shows while it runs: the playlist, the
audiobook's WebVTT, the live progress line, the table of failures and the command that resumes."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from narration.planning import NarrateOptions, Planned
from narration.state import Outcome
from tts_core.marks.speech_marks import Mark
from tts_core.marks.subtitles import Cue, build_cues, to_webvtt


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

    def __init__(
        self, title: str, planned: Iterable[Planned], outcomes: Callable[[], Iterable[Outcome]], console: Console
    ) -> None:
        self.outcomes = outcomes
        """The chapters' outcomes as they are now."""
        self.characters = {p.ref: len(p.chapter.text) for p in planned}
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
        self.task = self.progress.add_task(title, total=sum(self.characters.values()), chapters="", audio="")
        self.update()

    def update(self) -> None:
        outcomes = list(self.outcomes())
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
    if options.loudness is not None:
        argv += ["--loudness", options.loudness]
    for name in options.lexicons:
        argv += ["--lexicon", name]
    if api_url:
        argv += ["--api-url", api_url]
    if m4b:
        argv.append("--m4b")
    return shlex.join(argv)
