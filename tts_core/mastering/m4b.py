"""One audiobook file from a book's chapter files: AAC in an MP4 container (``.m4b``) with a chapter
mark where each chapter starts, through PyAV (which bundles FFmpeg: no ``ffmpeg`` binary). Here, in
the audio library, so that ``ttsq narrate --m4b`` on the reader's machine and a batch's ``m4b``
bundle in the service worker write the same file from the same code.

Chapter starts are counted in samples of the decoded audio, not taken from the jobs' reported
durations, so the marks fall exactly where each chapter's audio begins in the file. Nothing is left
half-written: a failure removes the temporary file, and an undecodable chapter file is named.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Final

import av
from av.audio.frame import AudioFrame

if TYPE_CHECKING:  # only in the stubs: the compiled module has no such name
    from av.container.core import Chapter

AAC_BITRATE: Final = 64_000
"""Bits per second of the AAC track: plenty for one mono voice at 22.05 kHz, about 29 MB an hour."""


@dataclass(frozen=True)
class ChapterAudio:
    """One chapter's audio file and the title its mark shows."""

    path: Path
    title: str


@dataclass(frozen=True)
class Audiobook:
    """What ``write_m4b`` wrote: its length, and where each chapter starts and ends in it."""

    duration_s: float
    spans_ms: list[tuple[int, int]]
    """Each chapter's start and end, in milliseconds of the file, in order."""


def write_m4b(chapters: Sequence[ChapterAudio], destination: Path, title: str) -> Audiobook:
    """Decode each chapter in order, encode them as one AAC track with chapter marks into
    ``destination`` (written under a temporary name, then renamed; removed if anything fails). A
    chapter file that cannot be decoded raises ``ValueError`` naming it."""
    if not chapters:
        raise ValueError("an audiobook needs at least one chapter")
    partial = destination.with_name(f".{destination.name}.partial")
    try:
        return _write(chapters, partial, destination, title)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _write(chapters: Sequence[ChapterAudio], partial: Path, destination: Path, title: str) -> Audiobook:
    rate = _sample_rate(chapters[0].path)
    with av.open(str(partial), "w", format="ipod") as output:
        output.metadata["title"] = title
        stream = output.add_stream("aac", rate=rate, layout="mono")
        stream.bit_rate = AAC_BITRATE
        fifo = av.AudioFifo()  # the AAC encoder takes frames of exactly frame_size samples
        marks: list[Chapter] = []
        samples = 0
        for number, chapter in enumerate(chapters, start=1):
            start = samples
            for frame in _frames(chapter.path, rate):
                frame.pts = None
                samples += frame.samples
                fifo.write(frame)
                for chunk in fifo.read_many(stream.codec_context.frame_size):
                    output.mux(stream.encode(chunk))
            meta = {"title": chapter.title}
            marks.append(
                {"id": number, "start": start, "end": samples, "time_base": Fraction(1, rate), "metadata": meta}
            )
        if rest := fifo.read():
            output.mux(stream.encode(rest))
        output.mux(stream.encode(None))
        output.set_chapters(marks)
    partial.replace(destination)
    spans = [(round(m["start"] * 1000 / rate), round(m["end"] * 1000 / rate)) for m in marks]
    return Audiobook(samples / rate, spans)


def _sample_rate(path: Path) -> int:
    try:
        with av.open(str(path)) as source:
            return int(source.streams.audio[0].sample_rate)
    except (av.FFmpegError, IndexError) as e:
        raise ValueError(f"{path.name}: not audio that can be decoded ({e or 'no audio stream'})") from e


def _frames(path: Path, rate: int) -> Iterator[AudioFrame]:
    """The file's audio as mono float frames at ``rate`` (what the AAC encoder takes)."""
    resampler = av.AudioResampler(format="fltp", layout="mono", rate=rate)
    try:
        with av.open(str(path)) as source:
            for frame in source.decode(audio=0):
                yield from resampler.resample(frame)
    except av.FFmpegError as e:
        raise ValueError(f"{path.name}: not audio that can be decoded ({e})") from e
    yield from resampler.resample(None)
