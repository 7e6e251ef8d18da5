"""``ttsq narrate`` as a user runs it, against the real API, worker, Redis and S3."""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
import redis
import soundfile
import webvtt

from cli.processes import ManagedProcess, free_port, wait_until
from narration.books import read_book
from narration.client import ClientError
from narration.planning import MARKS, SIDE_FILES, NarrateOptions, batch_body, naming_chapters, plan
from narration.state import STATE_FILE, Outcome, State
from tests.conftest import idempotency_claim, paused
from tests.test_cli import clean_env
from tests.test_marks import seconds
from tests.voices import BROKEN_VOICE_ID
from tts_core.base.errors import InvalidBook
from tts_core.books.common import Book, Chapter
from tts_core.mastering.m4b import ChapterAudio, write_m4b
from ttsq.constants import batch_key

BOOK = """# The Small Book

## The Door

A door opened onto the garden. Nobody came in.

## The Garden

The garden was quiet. A bird sang once.

## The End

And that was all.
"""
ROOT = Path(__file__).parents[1]
TTSQ = [sys.executable, "-m", "cli.main"]
"""This checkout's command (the installed ``ttsq`` script may belong to another checkout)."""
TITLES = ["The Door", "The Garden", "The End"]
FILES = ["01-the-door.mp3", "02-the-garden.mp3", "03-the-end.mp3"]
SIDE = [f"{name.removesuffix('.mp3')}{suffix}" for name in FILES for suffix in (".vtt", ".srt", ".marks.json")]
"""What the default ``--marks sentence`` downloads beside the audio."""


@pytest.fixture(autouse=True)
def _service_worker(webhook_worker: ManagedProcess) -> None:
    """Batches are finished by the service worker."""


def narrate(book: Path, out: Path, api_url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [*TTSQ, "narrate", str(book), "--out", str(out), "--api-url", api_url, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(), cwd=ROOT)


def batch_ids(client: httpx.Client) -> list[str]:
    return [b["id"] for b in client.get("/v1/batches", params={"limit": 200}).json()["batches"]]


def decoded_s(path: Path) -> float:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        return sum(frame.samples for frame in container.decode(stream)) / stream.sample_rate


def test_a_book_is_narrated_into_files_manifest_and_playlist_then_reused(
    api_url: str, client: httpx.Client, redis_client: redis.Redis, tmp_path: Path
) -> None:
    book = tmp_path / "small-book.md"
    book.write_text(BOOK)
    out = tmp_path / "out"
    run = narrate(book, out, api_url)
    assert run.returncode == 0, run.stderr
    assert f"{out}: 3 of 3 chapters" in run.stdout
    outputs = [*FILES, *SIDE, "manifest.json", "the-small-book.m3u", STATE_FILE]
    assert sorted(p.name for p in out.iterdir()) == sorted(outputs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["book"] == "The Small Book"
    assert manifest["marks"] == ["sentence"]
    assert manifest["batch_id"] in batch_ids(client)
    assert idempotency_claim(redis_client, manifest["batch_id"]) is not None  # submitted with an Idempotency-Key
    chapters = manifest["chapters"]
    assert [(c["index"], c["title"], c["file"], c["status"]) for c in chapters] == [
        (n, title, file, "succeeded") for n, (title, file) in enumerate(zip(TITLES, FILES, strict=True), 1)
    ]
    for chapter, source in zip(chapters, read_book(book).chapters, strict=True):
        job = client.get(f"/v1/jobs/{chapter['job_id']}").json()
        assert (job["batch_id"], job["ref"], job["format"]) == (manifest["batch_id"], chapter["ref"], "mp3")
        assert job["metadata"] == {"title": source.title, "index": source.index}
        assert chapter["duration_s"] == job["result"]["duration_s"] > 0.5
        assert soundfile.info(str(out / chapter["file"])).samplerate == 22050
        assert decoded_s(out / chapter["file"]) == pytest.approx(chapter["duration_s"], abs=0.1)
        stem = chapter["file"].removesuffix(".mp3")
        files = (chapter["subtitles_file"], chapter["srt_file"], chapter["marks_file"])
        assert files == (f"{stem}.vtt", f"{stem}.srt", f"{stem}.marks.json")
        captions = webvtt.from_buffer(io.StringIO((out / f"{stem}.vtt").read_text())).captions
        assert " ".join(c.text.replace("\n", " ") for c in captions).split() == source.text.split()
        assert seconds(captions[-1].end) <= min(chapter["duration_s"], decoded_s(out / chapter["file"])) + 0.05
        assert {m["type"] for m in json.loads((out / f"{stem}.marks.json").read_text())} == {"sentence"}
        assert (out / f"{stem}.srt").read_text().startswith("1\n00:00:0")
    playlist = (out / "the-small-book.m3u").read_text().splitlines()
    assert playlist[:2] == ["#EXTM3U", "#PLAYLIST:The Small Book"]
    expected = [[f"#EXTINF:{round(c['duration_s'])},{c['title']}", c["file"]] for c in chapters]
    assert playlist[2:] == [line for pair in expected for line in pair]

    # A rerun of the same book and options keeps every file and makes no batch or job; --m4b joins them.
    before = batch_ids(client)
    again = narrate(book, out, api_url, "--m4b")
    assert again.returncode == 0, again.stderr
    assert "3 chapter(s) already in" in again.stderr
    assert batch_ids(client) == before
    assert json.loads((out / "manifest.json").read_text()) == manifest
    audiobook = out / "the-small-book.m4b"
    total = sum(c["duration_s"] for c in chapters)
    with av.open(str(audiobook)) as container:
        assert container.streams.audio[0].codec_context.name == "aac"
        marks = container.chapters()
    assert [m["metadata"]["title"] for m in marks] == TITLES
    starts = [float(m["start"] * (m["time_base"] or 0)) for m in marks]
    assert starts[0] == 0
    for start, earlier in zip(starts[1:], range(1, 3), strict=True):
        assert start == pytest.approx(sum(c["duration_s"] for c in chapters[:earlier]), abs=0.1)
    assert decoded_s(audiobook) == pytest.approx(total, abs=0.5)
    # ... with one WebVTT file of it: each chapter's cues moved to where the chapter starts.
    book_captions = webvtt.from_buffer(io.StringIO((out / "the-small-book.vtt").read_text())).captions
    chapter_captions = [
        webvtt.from_buffer(io.StringIO((out / c["subtitles_file"]).read_text())).captions for c in chapters
    ]
    assert [c.text for c in book_captions] == [c.text for captions in chapter_captions for c in captions]
    firsts = [sum(len(captions) for captions in chapter_captions[:n]) for n in range(3)]
    for start, first, captions in zip(starts, firsts, chapter_captions, strict=True):
        assert seconds(book_captions[first].start) == pytest.approx(start + seconds(captions[0].start), abs=0.002)
    assert seconds(book_captions[-1].end) <= decoded_s(audiobook) + 0.05

    # Past the batch's TTL, a rerun submits a new batch of only the chapters not whole on disk: one
    # without its audio, one without its subtitles.
    redis_client.delete(batch_key(manifest["batch_id"]))
    (out / FILES[1]).unlink()
    (out / "03-the-end.vtt").unlink()
    kept = {name: (out / name).stat().st_mtime_ns for name in (FILES[0], "01-the-door.vtt")}
    third = narrate(book, out, api_url)
    assert third.returncode == 0, third.stderr
    [new_batch] = [b for b in batch_ids(client) if b not in before]
    assert client.get(f"/v1/batches/{new_batch}").json()["counts"]["total"] == 2
    rewritten = json.loads((out / "manifest.json").read_text())
    assert rewritten["batch_id"] == new_batch
    assert [c["ref"] for c in rewritten["chapters"]] == [c["ref"] for c in chapters]
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept
    assert decoded_s(out / FILES[1]) == pytest.approx(rewritten["chapters"][1]["duration_s"], abs=0.1)
    assert sorted(p.name for p in out.iterdir()) == sorted([*outputs, "the-small-book.m4b", "the-small-book.vtt"])


def test_other_marks_narrate_again_and_word_and_viseme_marks_are_downloaded(
    api_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    book = tmp_path / "tiny.md"
    book.write_text("# Tiny\n\n## One\n\nBob made a map.\n\n## Two\n\nThe birds sang all day.\n")
    out = tmp_path / "out"
    plain = narrate(book, out, api_url, "--marks", "none", "--format", "wav")
    assert plain.returncode == 0, plain.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["01-one.wav", "02-two.wav", STATE_FILE, "manifest.json", "tiny.m3u"]
    )
    chapters = json.loads((out / "manifest.json").read_text())["chapters"]
    assert [(c["subtitles_file"], c["srt_file"], c["marks_file"]) for c in chapters] == [(None, None, None)] * 2

    # The same book with viseme marks (words and phonemes with them) reuses nothing made without
    # them: a new batch asks for marks. ``--marks word`` asks for what it names in the test below.
    before = batch_ids(client)
    lips = narrate(book, out, api_url, "--marks", "viseme", "--format", "wav")
    assert lips.returncode == 0, lips.stderr
    assert "already in" not in lips.stderr
    [new_batch] = [b for b in batch_ids(client) if b not in before]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["batch_id"] == new_batch
    assert manifest["marks"] == ["sentence", "word", "phoneme", "viseme"]
    for chapter, source in zip(manifest["chapters"], read_book(book).chapters, strict=True):
        job = client.get(f"/v1/jobs/{chapter['job_id']}").json()
        assert job["options"]["marks"] == ["sentence", "word", "phoneme", "viseme"]
        marks = json.loads((out / chapter["marks_file"]).read_text())
        words = [m["value"] for m in marks if m["type"] == "word"]
        assert words == source.text.rstrip(".").split()
        assert max(m["end_ms"] for m in marks) <= chapter["duration_s"] * 1000 + 50
        assert (out / chapter["subtitles_file"]).read_text().startswith("WEBVTT")
        assert_visemes_inside_words(marks)
    marks = json.loads((out / manifest["chapters"][0]["marks_file"]).read_text())
    assert [m["value"] for m in marks if m["type"] == "viseme" and m["text_start"] == 0] == ["p", "a", "p"]  # Bob


def assert_visemes_inside_words(marks: list[dict[str, Any]]) -> None:
    """Each viseme lies within the word whose text it spans, in text and in time."""
    words = {(m["text_start"], m["text_end"]): m for m in marks if m["type"] == "word"}
    for viseme in (m for m in marks if m["type"] == "viseme"):
        if viseme["value"] == "sil":  # a pause between two words (sampled durations may leave one mid-phrase)
            assert viseme["text_start"] not in {start for start, _ in words}
            continue
        word = words[viseme["text_start"], viseme["text_end"]]
        assert word["start_ms"] <= viseme["start_ms"] < viseme["end_ms"] <= word["end_ms"]


def test_each_marks_choice_asks_for_its_marks_and_side_files_and_changes_the_refs() -> None:
    """What ``--marks`` puts in the batch request and the plan, for every choice (the real service
    sees ``none`` and ``viseme`` above, ``sentence`` in the first test)."""
    book = Book("Tiny", [Chapter(1, "One", "A quiet day.")])
    asked: dict[str, object] = {}
    refs = set()
    for choice in MARKS:
        options = NarrateOptions(voice=None, format="wav", speed=None, marks=choice)
        [planned] = plan(book, options)
        asked[choice] = batch_body([planned], options)["defaults"].get("marks")
        assert sorted(planned.side) == ([] if choice == "none" else sorted(SIDE_FILES)), choice
        refs.add(planned.ref)
    assert asked == {
        "none": None,
        "sentence": ["sentence"],
        "word": ["sentence", "word"],
        "viseme": ["sentence", "word", "phoneme", "viseme"],
    }
    assert len(refs) == len(MARKS)  # files made with other marks are never reused


def test_ctrl_c_leaves_the_batch_running_and_the_printed_command_resumes_it(
    api_url: str, client: httpx.Client, worker: ManagedProcess, tmp_path: Path
) -> None:
    book = tmp_path / "small-book.md"
    book.write_text(BOOK)
    out = tmp_path / "out"
    argv = [*TTSQ, "narrate", str(book), "--out", str(out), "--api-url", api_url]
    state = out / STATE_FILE
    # The worker paused until after the Ctrl-C: no chapter can finish before it, however fast it is.
    with paused(worker):
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=ROOT
        )
        try:
            wait_until(lambda: state.exists() and json.loads(state.read_text())["batch_id"], 60, "the saved batch id")
            process.send_signal(signal.SIGINT)
            stdout, stderr = process.communicate(timeout=60)
        except BaseException:
            process.kill()
            process.communicate()
            raise
        assert process.returncode == 130, stderr
        assert "the batch keeps running on the server" in stderr
        batch_id = json.loads(state.read_text())["batch_id"]
        assert client.get(f"/v1/batches/{batch_id}").json()["status"] == "running"
        assert not [p for p in out.iterdir() if p.name.endswith(".partial")]
    resume = shlex.split(stdout.strip().splitlines()[-1])
    assert resume[:2] == ["ttsq", "narrate"]
    before = batch_ids(client)
    done = subprocess.run([*TTSQ, *resume[1:]], capture_output=True, text=True, timeout=120, env=clean_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert batch_ids(client) == before  # the same batch, rejoined
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["batch_id"] == batch_id
    assert [c["status"] for c in manifest["chapters"]] == ["succeeded"] * 3
    for chapter in manifest["chapters"]:
        assert decoded_s(out / chapter["file"]) == pytest.approx(chapter["duration_s"], abs=0.1)


def test_a_failing_chapter_is_reported_while_the_others_finish(api_url: str, tmp_path: Path) -> None:
    """The suite's voices folder has a voice that fails any sentence with "th" as in "think"."""
    book = tmp_path / "book.md"
    book.write_text("# Book\n\n## One\n\nA quiet day.\n\n## Two\n\nI think so.\n\n## Three\n\nA good end.\n")
    out = tmp_path / "out"
    run = narrate(book, out, api_url, "--voice", BROKEN_VOICE_ID, "--format", "wav", "--m4b")
    assert run.returncode == 1, run.stderr
    assert f"{out}: 2 of 3 chapters" in run.stdout
    assert "Chapters without audio" in run.stderr
    assert "synthesis_error" in run.stderr
    assert (out / "01-one.wav").exists()
    assert (out / "03-three.wav").exists()
    assert not (out / "02-two.wav").exists()
    assert not (out / "book.m4b").exists()
    chapters = json.loads((out / "manifest.json").read_text())["chapters"]
    assert [c["status"] for c in chapters] == ["succeeded", "failed", "succeeded"]
    assert chapters[1]["file"] is None
    assert chapters[1]["error"].startswith("synthesis_error")
    assert [line for line in (out / "book.m3u").read_text().splitlines() if not line.startswith("#")] == [
        "01-one.wav",
        "03-three.wav",
    ]


def test_a_chapter_the_voice_cannot_read_refuses_the_batch_before_anything_runs(
    api_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    """The batch API validates every item at submit (422 naming the item): nothing is narrated, and
    the message names the chapter (by its file, in a folder book), not the batch item. A book in one
    file, its chapters named by number and title: the test below."""
    folder = tmp_path / "chapters"
    folder.mkdir()
    (folder / "01-calm.md").write_text("# Calm\n\nA quiet day came.\n")
    (folder / "02-tokyo.md").write_text("# Tokyo\n\n今日は静かな日です。\n")
    before = batch_ids(client)
    run = narrate(folder, tmp_path / "out", api_url)
    assert run.returncode == 1
    assert "HTTP 422" in run.stderr
    assert 'unsupported_text: 02-tokyo.md (chapter 2, "Tokyo"): ' in " ".join(run.stderr.split())
    assert "items[" not in run.stderr
    assert "left out" not in run.stderr
    assert batch_ids(client) == before
    assert not list((tmp_path / "out").glob("*.mp3"))


def test_a_refusal_names_the_chapters_of_a_book_in_one_file_by_number_and_title(tmp_path: Path) -> None:
    book = tmp_path / "book.md"
    book.write_text("# Book\n\n## One\n\nA quiet day came.\n\n## Two\n\n今日は静かな日です。\n")
    read = read_book(book)
    assert read.left_out == []
    planned = plan(read, NarrateOptions(voice=None, format="mp3", speed=None))
    refusal = ClientError("HTTP 422: unsupported_text: items[1]: no voice reads it; items[0].speed: too fast", 422)
    named = naming_chapters(refusal, planned)
    assert (
        str(named)
        == 'HTTP 422: unsupported_text: chapter 2, "Two": no voice reads it; chapter 1, "One", speed: too fast'
    )
    assert named.status_code == 422


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    book = tmp_path / "book.md"
    book.write_text(BOOK)
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    run = narrate(book, tmp_path / "out", url, timeout=60)
    assert run.returncode == 1
    assert f"cannot reach the ttsq API at {url}" in run.stderr
    assert "Traceback" not in run.stderr
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(("name", "content", "message"), [("empty.md", "", "the book has no text to speak")])
def test_an_empty_book_is_refused_before_anything_is_sent(
    tmp_path: Path, name: str, content: Any, message: str
) -> None:
    book = tmp_path / name
    book.write_text(content)
    run = narrate(book, tmp_path / "out", f"http://127.0.0.1:{free_port()}", timeout=60)
    assert run.returncode == 1
    assert f"{book}: {message}" in run.stderr
    with pytest.raises(InvalidBook, match=r"nothing\.txt: no such file or folder$"):  # told as the above is
        read_book(tmp_path / "nothing.txt")


# --- Resuming trusts nothing on disk ---------------------------------------------------------------


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_of(out: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return manifest


def assert_files_match_manifest(out: Path) -> None:
    """Every chapter's files are there with the SHA-256 the manifest gives them, and only those."""
    for chapter in manifest_of(out)["chapters"]:
        names = [chapter[key] for key in ("file", "subtitles_file", "srt_file", "marks_file") if chapter[key]]
        assert sorted(chapter["sha256"]) == sorted(names)
        for name in names:
            assert sha256(out / name) == chapter["sha256"][name], name


def test_changed_truncated_and_missing_files_are_named_and_fetched_again(
    api_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    book = tmp_path / "small-book.md"
    book.write_text(BOOK)
    out = tmp_path / "out"
    assert narrate(book, out, api_url).returncode == 0
    manifest = manifest_of(out)
    assert [len(c["text_sha256"]) for c in manifest["chapters"]] == [64] * 3
    assert_files_match_manifest(out)
    original = {name: (out / name).read_bytes() for name in [*FILES, *SIDE]}

    # Audio of the same size with 1 KiB of its middle overwritten; subtitles of the same length with
    # another word; marks truncated to nothing; an SRT file gone. The third audio file is untouched.
    audio = bytearray(original[FILES[0]])
    middle = len(audio) // 2
    audio[middle : middle + 1024] = bytes(1024)
    (out / FILES[0]).write_bytes(audio)
    (out / "02-the-garden.vtt").write_text(original["02-the-garden.vtt"].decode().replace("quiet", "QUIET"))
    (out / "03-the-end.marks.json").write_bytes(b"")
    (out / "01-the-door.srt").unlink()
    untouched = (out / FILES[2]).stat().st_mtime_ns
    before = batch_ids(client)

    again = narrate(book, out, api_url)
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stderr.split())
    assert 'chapter 1, "The Door": 01-the-door.mp3 has changed since it was downloaded' in said
    assert 'chapter 2, "The Garden": 02-the-garden.vtt has changed since it was downloaded' in said
    assert 'chapter 3, "The End": 03-the-end.marks.json has changed since it was downloaded (0 bytes' in said
    assert "already in" not in said  # no chapter kept
    assert batch_ids(client) == before  # the same batch rejoined: the files downloaded again from it
    assert {name: (out / name).read_bytes() for name in original} == original
    assert (out / FILES[2]).stat().st_mtime_ns != untouched  # its chapter was fetched whole again
    assert_files_match_manifest(out)


def test_a_changed_empty_added_or_copied_chapter_file_in_a_folder_book(
    api_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    folder = tmp_path / "stories"
    folder.mkdir()
    (folder / "1.txt").write_text("The fox ran off.\n")
    (folder / "2.txt").write_text("The crow sang once.\n")
    out = tmp_path / "out"
    first = narrate(folder, out, api_url, "--marks", "none", "--format", "wav")
    assert first.returncode == 0, first.stderr
    jobs = {c["file"]: c["job_id"] for c in manifest_of(out)["chapters"]}
    assert list(jobs) == ["01-1.wav", "02-2.wav"]

    # 2.txt edited; a new chapter before the others; an empty file and one of punctuation; a copy of 1.txt.
    (folder / "2.txt").write_text("The crow sang twice.\n")
    (folder / "0.txt").write_text("It begins here.\n")
    (folder / "3.txt").write_text("")
    (folder / "4.md").write_text("... !? --\n")
    (folder / "5.txt").write_text("The fox ran off.\n")
    again = narrate(folder, out, api_url, "--marks", "none", "--format", "wav")
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stderr.split())
    assert "left out: 3.txt: nothing to speak (empty, or only punctuation or symbols)" in said
    assert "left out: 4.md: nothing to speak" in said
    assert '2.txt (chapter 3, "2"): its text changed since it was narrated; narrating it again' in said
    assert "01-1.wav renamed to 02-1.wav" in said
    assert "1 chapter(s) already in" in said
    chapters = manifest_of(out)["chapters"]
    assert [(c["index"], c["title"], c["file"]) for c in chapters] == [
        (1, "0", "01-0.wav"),
        (2, "1", "02-1.wav"),
        (3, "2", "03-2.wav"),
        (4, "5", "04-5.wav"),
    ]
    assert chapters[1]["job_id"] == jobs["01-1.wav"]  # kept, under its new name
    assert chapters[2]["job_id"] != jobs["02-2.wav"]  # narrated again: its text changed
    batch = client.get(f"/v1/batches/{manifest_of(out)['batch_id']}").json()
    assert batch["counts"]["total"] == 3  # the new, the changed and the copied chapter
    assert decoded_s(out / "04-5.wav") == pytest.approx(decoded_s(out / "02-1.wav"), abs=0.5)
    # The audio of 2.txt's old text stays as it was, listed nowhere (ttsq narrate deletes nothing).
    assert sorted(p.name for p in out.glob("*.wav")) == ["01-0.wav", "02-1.wav", "02-2.wav", "03-2.wav", "04-5.wav"]
    assert "02-2.wav" not in (out / "stories.m3u").read_text()
    assert_files_match_manifest(out)


DAMAGES: dict[str, tuple[Callable[[str], str], str]] = {
    "truncated": (lambda text: text[: len(text) // 2], "cannot be used"),
    "edited": (
        lambda text: text.replace('"bytes": ', '"bytes": "many", "was": '),
        "chapters[0].bytes: Input should be",
    ),
    "another-shape": (lambda text: "[]", "cannot be used (not a JSON object)"),
}
"""Ways a state file is damaged, and what its problem then says."""


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_state_file_is_read_as_none_naming_its_problem(tmp_path: Path, damage: str) -> None:
    """Each damage through ``State.load`` on a file ``State.save`` wrote; what ``ttsq narrate`` does
    with any problem (names it, keeps nothing) is seen through the real service in the test below."""
    outcome = Outcome(index=1, title="One", ref="r1", file="01-one.wav", job_id="j1", status="succeeded", bytes=100)
    State(book="Tiny", batch_id="b1", chapters={"r1": outcome}).save(tmp_path)
    assert State.load(tmp_path, "Tiny").chapters == {"r1": outcome}  # whole, it is read back as written
    damaged, problem = DAMAGES[damage]
    state = tmp_path / STATE_FILE
    state.write_text(damaged(state.read_text()))
    loaded = State.load(tmp_path, "Tiny")
    assert loaded.problem is not None
    assert loaded.problem.startswith(f"{state}: ")
    assert problem in loaded.problem
    assert (loaded.batch_id, loaded.chapters) == (None, {})


def test_a_damaged_state_file_keeps_nothing_and_a_fresh_folder_after_the_batch_expired_gets_a_new_one(
    api_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A truncated state file (the other damages: the test above). Then the batch's Idempotency-Key
    outlives a batch that expired (or a job TTL under 24 h): the server answers it 404, and narrate
    into a fresh folder submits a new batch instead of failing."""
    book = tmp_path / "tiny.md"
    book.write_text("# Tiny\n\n## One\n\nA quiet day.\n\n## Two\n\nThe birds sang.\n")
    out = tmp_path / "out"
    assert narrate(book, out, api_url, "--format", "wav").returncode == 0
    state = out / STATE_FILE
    damaged, problem = DAMAGES["truncated"]
    state.write_text(damaged(state.read_text()))
    (out / "01-one.wav").write_bytes(b"RIFF" + bytes(100))  # a file the damaged state cannot vouch for
    again = narrate(book, out, api_url, "--format", "wav")
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stderr.split())
    assert f"{state}: " in said
    assert problem in said
    assert "every chapter is narrated again" in said
    assert "already in" not in said
    json.loads(state.read_text())  # whole again
    assert_files_match_manifest(out)
    assert decoded_s(out / "01-one.wav") > 0.5

    gone = manifest_of(out)["batch_id"]
    redis_client.delete(batch_key(gone))
    run = narrate(book, tmp_path / "second", api_url, "--format", "wav")
    assert run.returncode == 0, run.stderr
    assert manifest_of(tmp_path / "second")["batch_id"] not in (None, gone)
    assert_files_match_manifest(tmp_path / "second")


def test_an_audiobook_from_an_undecodable_chapter_names_it_and_leaves_nothing(tmp_path: Path) -> None:
    good = tmp_path / "01-good.wav"
    soundfile.write(str(good), [0.0] * 22050, 22050)
    bad = tmp_path / "02-bad.mp3"
    bad.write_bytes(b"not audio at all, whatever its name says")
    for chapters in ([good, bad], [bad, good]):  # found while encoding, or while reading the first
        with pytest.raises(ValueError, match=r"^02-bad\.mp3: not audio that can be decoded"):
            write_m4b([ChapterAudio(path, path.stem) for path in chapters], tmp_path / "book.m4b", "Book")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["01-good.wav", "02-bad.mp3"]


def test_loudness_levels_every_chapter_to_the_one_target(api_url: str, client: httpx.Client, tmp_path: Path) -> None:
    """``--loudness audiobook``: every chapter lands on ACX's RMS alone, whatever its length."""
    book = tmp_path / "levels.md"
    long = " ".join(["The river ran on under the bridge, and the town slept beside it."] * 2)
    book.write_text(f"# Levels\n\n## Short\n\nA quiet day.\n\n## Long\n\n{long}\n")
    out = tmp_path / "out"
    done = narrate(book, out, api_url, "--marks", "none", "--format", "wav", "--loudness", "audiobook")
    assert done.returncode == 0, done.stderr
    for chapter in json.loads((out / "manifest.json").read_text())["chapters"]:
        job = client.get(f"/v1/jobs/{chapter['job_id']}").json()
        assert job["options"]["loudness"] == {"preset": "audiobook", "target_lufs": None, "true_peak_db": None}
        audio, _ = soundfile.read(out / chapter["file"], dtype="float64")
        assert 10 * np.log10(np.mean(audio**2)) == pytest.approx(-20.0, abs=0.5)
        assert 20 * np.log10(np.abs(audio).max()) <= -3.0
    # A target out of bounds: the batch narrate would send is refused naming it (how narrate prints a
    # 422: test_a_chapter_the_voice_cannot_read_refuses_the_batch_before_anything_runs).
    loud = NarrateOptions(voice=None, format="mp3", speed=None, loudness="-5")
    refused = client.post("/v1/batches", json=batch_body(plan(read_book(book), loud), loud))
    assert refused.status_code == 422, refused.text
    assert "loudness.target_lufs" in refused.json()["error"]["message"]
