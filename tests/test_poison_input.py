"""Input built to hurt never reaches native code unbounded (issue 19, finding 2: one "word" of
500,000 letters crashed espeak-ng, and with it every worker the message was handed to).

espeak-ng runs in a child process here, so that what would crash it crashes the child, not pytest.
"""

from __future__ import annotations

import random
import string
import subprocess
import sys
import time

import httpx
import pytest

from cli.processes import ManagedProcess
from tests.conftest import wait_for, wait_for_job
from tts_core.frontend.openjtalk_input import MAX_G2P_CHARS
from tts_core.frontend.phonemes import MAX_TOKEN_CHARS
from tts_core.text.sentences import bounded_pieces, split_long_tokens
from tts_core.voices.kokoro import front_end
from tts_core.voices.kokoro_package import data_dir
from ttsq.job_record import JobStatus


def random_word(letters: int, seed: int, alphabet: str = string.ascii_lowercase) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(letters))


@pytest.mark.parametrize(
    "text",
    [
        random_word(100_000, 1),  # a 100,000-letter "word": SIGSEGV in espeak-ng before
        random_word(40_000, 2, string.ascii_uppercase),
        "Intro " + random_word(60_000, 3) + " outro.",
    ],
    ids=["lowercase", "uppercase", "inside-a-sentence"],
)
def test_espeak_ng_survives_a_word_of_any_length(text: str) -> None:
    code = (
        "import sys; from tts_core.frontend.phonemes import phonemize; print(len(phonemize(sys.stdin.read(), 'en-us')))"
    )
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the phonemiser died with {done.returncode}: {done.stderr[-500:]}"
    assert int(done.stdout) >= 1


def test_long_tokens_are_cut_and_pieces_join_back() -> None:
    cut = split_long_tokens("short " + "x" * (2 * MAX_TOKEN_CHARS + 5) + " end", MAX_TOKEN_CHARS)
    assert max(len(token) for token in cut.split()) == MAX_TOKEN_CHARS
    assert cut.replace(" ", "") == "short" + "x" * (2 * MAX_TOKEN_CHARS + 5) + "end"
    text = "一二三、四五六七、八九" * 50
    pieces = bounded_pieces(text, 25, "、")
    assert "".join(pieces) == text
    assert all(len(p) <= 25 for p in pieces)
    assert all(p.endswith("、") for p in pieces[:-1])


def test_the_japanese_g2p_takes_a_sentence_of_any_length_in_bounded_calls() -> None:
    """OpenJTalk refused 20,000 characters without punctuation (RuntimeError, the job failed as an
    internal error) and took 18 s for 2,000 (its time grows faster than the text): it is now read in
    pieces of at most ``MAX_G2P_CHARS``."""
    kanji = random_word(20_000, 4, "日本語漢字東京大阪山川田中森林花火")
    started = time.monotonic()
    ids = front_end(data_dir()).phoneme_ids(kanji)
    assert sum(len(i) for i in ids) > len(kanji)
    assert MAX_G2P_CHARS <= 200
    print(f"20,000 kanji read in {time.monotonic() - started:.1f} s")


def test_a_job_of_one_huge_word_is_planned_and_the_worker_lives(client: httpx.Client, worker: ManagedProcess) -> None:
    """Through the API and a real worker: the job gets past planning (the step that crashed), and is
    canceled then (synthesising its gibberish would take minutes)."""
    job = client.post("/v1/jobs", json={"text": random_word(100_000, 5)}).json()
    current = wait_for(
        lambda: client.get(f"/v1/jobs/{job['id']}").json(),
        lambda job: (
            not worker.alive or job["progress"]["segments_total"] is not None or JobStatus(job["status"]).terminal
        ),
        120,
        "the job planned",
    )
    assert worker.alive, f"the worker died: exit {worker.returncode}"
    assert current["status"] == "running", current
    assert current["progress"]["segments_total"] > 1
    client.delete(f"/v1/jobs/{job['id']}")
    assert wait_for_job(client, job["id"])["status"] == "canceled"
    assert worker.alive
