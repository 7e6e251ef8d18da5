"""Pronunciation lexicons through the real API and worker: stored whole and read back byte for byte,
refused with where and why (nothing stored), applied by the Piper and Kokoro voices to what is
said, never to what marks and subtitles show, at the version a job was submitted with."""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import numpy as np
import pytest
import redis
import soundfile

from api.main import create_app
from cli.processes import ManagedProcess
from narration.outputs import resume_command
from narration.planning import NarrateOptions
from tests.conftest import IdleQueueApi, enqueue, serve, wait_for_job
from tests.test_batches import wait_for_batch
from tests.test_cli import clean_env
from tests.test_metrics import scrape, value, worker_url
from tests.test_narrate import ROOT, TTSQ
from tts_core.frontend.phonemes import phonemize
from tts_core.lexicon.lexicon import Lexicon, LexiconEntry
from tts_core.marks.speech_marks import Mark, marks_from_json
from tts_core.voices.catalog import DEFAULT_VOICE_ID, VoiceCatalog
from tts_core.voices.voice_info import VoiceInfo
from ttsq.job_record import JobOptions, JobRecord, LexiconUse, NormalizeOption, utcnow
from ttsq.lexicons import LexiconStore
from ttsq.settings import Settings
from ttsq.tenants import Limits, TenantStore
from workers import pronunciations
from workers.metrics import REGISTRY
from workers.pronunciations import job_pronunciation

DATA: Final = Path(__file__).parent / "data" / "lexicons"
PLS: Final = "application/pls+xml"
STILL: Final = {"noise_scale": 0.0, "noise_w": 0.0, "format": "wav"}
"""No sampling noise: the same ids give the same audio."""
JAPANESE_VOICE: Final = "ja_JP-kokoro-jf_alpha"
STRESS: Final = str.maketrans("", "", "ˈˌ")


def fresh_name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def pls(lexemes: str, language: str = "en-US") -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" '
        f'alphabet="ipa" xml:lang="{language}">\n{lexemes}\n</lexicon>\n'
    ).encode()


def put(client: httpx.Client, name: str, document: bytes, content_type: str = PLS) -> httpx.Response:
    return client.put(f"/v1/lexicons/{name}", content=document, headers={"Content-Type": content_type})


def stored(client: httpx.Client, document: bytes, content_type: str = PLS) -> str:
    name = fresh_name()
    answer = put(client, name, document, content_type)
    assert answer.status_code == 200, answer.text
    return name


def finished(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={**STILL, **body})
    assert answer.status_code == 202, answer.text
    done = wait_for_job(client, answer.json()["id"])
    assert done["status"] == "succeeded", done
    return done


def audio_of(job: dict[str, Any]) -> np.ndarray:
    samples, _ = soundfile.read(io.BytesIO(httpx.get(job["result"]["url"]).content), dtype="float64")
    return np.asarray(samples)


def marks_of(job: dict[str, Any]) -> list[Mark]:
    return marks_from_json(json.loads(httpx.get(job["result"]["marks_url"]).content))


def said_in(marks: list[Mark], word: str) -> str:
    """The phonemes heard within the word mark of ``word`` (stress marks left out)."""
    (found,) = [m for m in marks if m.type == "word" and m.value == word]
    inside = [m.value for m in marks if m.type == "phoneme" and found.start_ms <= m.start_ms < found.end_ms]
    return "".join(inside).translate(STRESS)


def espeak(text: str) -> str:
    return "".join(p for sentence in phonemize(text, "en-us") for p in sentence).translate(STRESS)


# --- Storing ------------------------------------------------------------------------------------


def test_a_w3c_pls_document_is_stored_and_read_back_byte_for_byte(client: httpx.Client) -> None:
    document = (DATA / "w3c-example.pls").read_bytes()
    name = stored(client, document)
    back = client.get(f"/v1/lexicons/{name}")
    assert back.status_code == 200
    assert back.content == document
    assert back.headers["content-type"].startswith(PLS)
    listed = {item["name"]: item for item in client.get("/v1/lexicons").json()["lexicons"]}
    assert listed[name]["language"] == "en-US"
    assert listed[name]["entries"] == 4
    assert listed[name]["bytes"] == len(document)
    first = listed[name]["version"]
    again = put(client, name, pls("<lexeme><grapheme>ttsq</grapheme><alias>tee tee ess queue</alias></lexeme>"))
    assert again.json()["version"] == first + 1
    assert again.json()["entries"] == 1
    assert client.delete(f"/v1/lexicons/{name}").status_code == 204
    assert client.get(f"/v1/lexicons/{name}").status_code == 404
    assert name not in {item["name"] for item in client.get("/v1/lexicons").json()["lexicons"]}
    assert client.delete(f"/v1/lexicons/{name}").status_code == 404


def test_the_w3c_example_document_is_applied(client: httpx.Client) -> None:
    name = stored(client, (DATA / "w3c-example.pls").read_bytes())
    body = {"text": "The W3C judgement was made.", "marks": ["word", "phoneme"]}
    fixed = marks_of(finished(client, {**body, "lexicons": [name]}))
    assert said_in(fixed, "W3C") == espeak("World Wide Web Consortium").replace(" ", "")
    assert said_in(fixed, "judgement") == "dʒʌdʒmənt"
    assert said_in(marks_of(finished(client, body)), "W3C") != said_in(fixed, "W3C")


def spectrum(samples: np.ndarray) -> np.ndarray:
    """The average magnitude spectrum of 1,024-sample frames, normalised."""
    frames = samples[: len(samples) // 1024 * 1024].reshape(-1, 1024)
    average = np.abs(np.fft.rfft(frames * np.hanning(1024), axis=1)).mean(axis=0)
    return np.asarray(average / np.linalg.norm(average), dtype=np.float64)


def test_a_json_lexicon_is_stored_as_sent(client: httpx.Client) -> None:
    body = {"language": "ja", "entries": [{"graphemes": ["夏目"], "reading": "ソーセキ", "accent": 1}]}
    document = json.dumps(body, ensure_ascii=False).encode()
    name = stored(client, document, "application/json")
    back = client.get(f"/v1/lexicons/{name}")
    assert back.content == document
    assert back.headers["content-type"].startswith("application/json")


BILLION_LAUGHS: Final = (
    b'<?xml version="1.0"?>\n<!DOCTYPE lexicon [\n<!ENTITY a "ha">\n<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n'
    b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">\n]>\n<lexicon version="1.0" '
    b'xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">'
    b"<lexeme><grapheme>&c;</grapheme><alias>x</alias></lexeme></lexicon>"
)


@pytest.mark.parametrize(
    ("document", "content_type", "status", "named"),
    [
        (b"<lexicon><lexeme>", PLS, 422, "line 1, column"),
        (BILLION_LAUGHS, PLS, 422, "DTD"),
        (pls('<lexeme><grapheme>x</grapheme><phoneme alphabet="x-sampa">t@</phoneme></lexeme>'), PLS, 422, "x-sampa"),
        (pls("<lexeme><grapheme> </grapheme><alias>x</alias></lexeme>"), PLS, 422, "grapheme"),
        (pls("<lexeme><grapheme>Nguyen</grapheme><phoneme>ŋwiən3</phoneme></lexeme>"), PLS, 422, "Nguyen"),
        (pls("<lexeme><grapheme>tsar</grapheme><phoneme>ʦɑɹ</phoneme></lexeme>"), PLS, 422, "'ʦ'"),
        (pls("<lexeme><grapheme>x</grapheme><alias>y</alias></lexeme>", "de-DE"), PLS, 422, "de-DE"),
        (
            b'{"language": "en-US", "entries": [{"graphemes": ["a"], "alias": "b", "colour": 1}]}',
            "application/json",
            422,
            "colour",
        ),
        (b'{"language": "en-US", "entries": [', "application/json", 422, "JSON"),
        (b"Nguyen,win", "text/csv", 415, "Content-Type"),
    ],
)
def test_a_bad_lexicon_is_refused_naming_the_problem_and_nothing_is_stored(
    client: httpx.Client, document: bytes, content_type: str, status: int, named: str
) -> None:
    name = fresh_name()
    answer = put(client, name, document, content_type)
    assert answer.status_code == status, answer.text
    assert named in answer.json()["error"]["message"]
    assert client.get(f"/v1/lexicons/{name}").status_code == 404


def test_a_lexicon_past_the_entry_limit_is_refused(client: httpx.Client, settings: Settings) -> None:
    lexemes = "".join(
        f"<lexeme><grapheme>w{n}</grapheme><alias>x</alias></lexeme>" for n in range(settings.lexicon_max_entries + 1)
    )
    answer = put(client, fresh_name(), pls(lexemes))
    assert answer.status_code in (413, 422), answer.text
    assert str(settings.lexicon_max_entries) in answer.json()["error"]["message"]


@pytest.mark.parametrize("name", ["has-dash", "a" * 21, "naïve"])
def test_a_name_outside_letters_and_digits_is_refused(client: httpx.Client, name: str) -> None:
    answer = put(client, name, pls("<lexeme><grapheme>x</grapheme><alias>y</alias></lexeme>"))
    assert answer.status_code == 422


def test_concurrent_puts_of_one_name_leave_one_document_whole(client: httpx.Client, api_url: str) -> None:
    name = fresh_name()
    documents = [
        pls("".join(f"<lexeme><grapheme>{tag}{n}</grapheme><alias>{tag}</alias></lexeme>" for n in range(400)))
        for tag in ("alpha", "beta", "gamma")
    ]

    def store(document: bytes) -> None:
        with httpx.Client(base_url=api_url, timeout=30) as own:
            for _ in range(3):
                assert put(own, name, document).status_code == 200

    threads = [threading.Thread(target=store, args=(d,)) for d in documents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    back = client.get(f"/v1/lexicons/{name}").content
    assert back in documents
    summary = {i["name"]: i for i in client.get("/v1/lexicons").json()["lexicons"]}[name]
    assert summary["version"] == 9
    assert summary["bytes"] == len(back)


# --- Applied ------------------------------------------------------------------------------------

NAMES: Final = pls(
    "<lexeme><grapheme>Nguyen</grapheme><alias>win</alias></lexeme>"
    "<lexeme><grapheme>tomato</grapheme><phoneme>təˈmɑːtoʊ</phoneme></lexeme>"
    "<lexeme><grapheme>Dr.</grapheme><alias>doctor</alias></lexeme>"
)
SENTENCE: Final = "Dr. Nguyen ate a ripe tomato."


@pytest.fixture(scope="module")
def names_lexicon(api_url: str) -> str:
    with httpx.Client(base_url=api_url, timeout=30) as client:
        return stored(client, NAMES)


def test_a_lexicon_changes_what_is_heard_and_marks_keep_the_written_words(
    client: httpx.Client, names_lexicon: str
) -> None:
    marks = ["word", "phoneme"]
    plain = finished(client, {"text": SENTENCE, "marks": marks})
    fixed = finished(client, {"text": SENTENCE, "marks": marks, "lexicons": [names_lexicon]})
    written = marks_of(fixed)
    assert [m.value for m in written if m.type == "word"] == ["Dr", "Nguyen", "ate", "a", "ripe", "tomato"]
    assert said_in(written, "Nguyen") == espeak("win")
    assert said_in(written, "tomato").rstrip(".") == "təmɑːtoʊ"
    assert said_in(marks_of(plain), "tomato") != said_in(written, "tomato")
    assert said_in(marks_of(plain), "Nguyen") != said_in(written, "Nguyen")
    subtitles = httpx.get(fixed["result"]["subtitles_url"]).text
    assert "Nguyen" in subtitles
    assert "win" not in subtitles
    with_lexicon, without = audio_of(fixed), audio_of(plain)
    assert len(with_lexicon) != len(without)
    assert np.linalg.norm(spectrum(with_lexicon) - spectrum(without)) > 0.05
    rate = fixed["result"]["sample_rate"]
    for word in ("Nguyen", "tomato"):  # each word mark cuts the audio where that word is spoken
        (mark,) = [m for m in written if m.type == "word" and m.value == word]
        inside = with_lexicon[mark.start_ms * rate // 1000 : mark.end_ms * rate // 1000]
        assert np.sqrt(np.mean(inside**2)) > 0.02, word


def test_an_alias_speaks_as_its_text_would(client: httpx.Client, names_lexicon: str) -> None:
    """Same ids, same audio: the job with the lexicon against the alias written out."""
    fixed = audio_of(finished(client, {"text": "Dr. Nguyen rang.", "lexicons": [names_lexicon]}))
    written = audio_of(finished(client, {"text": "doctor win rang."}))
    assert len(fixed) == len(written)
    assert np.abs(fixed - written).max() < 0.01


def test_the_first_lexicon_named_wins(client: httpx.Client, names_lexicon: str) -> None:
    other = stored(client, pls("<lexeme><grapheme>Nguyen</grapheme><alias>nuh gwen</alias></lexeme>"))
    first = marks_of(
        finished(client, {"text": SENTENCE, "marks": ["word", "phoneme"], "lexicons": [other, names_lexicon]})
    )
    assert said_in(first, "Nguyen") == espeak("nuh gwen").replace(" ", "")
    assert said_in(first, "tomato").rstrip(".") == "təmɑːtoʊ"  # the second still applies where the first is silent


def test_a_batch_item_and_the_speech_endpoint_say_it_the_same(client: httpx.Client) -> None:
    """The alias is many times the name's length, so the speech endpoint's random rhythm cannot hide it."""
    alias = "a name that is a great deal longer than it looks on the page"
    long_alias = stored(client, pls(f"<lexeme><grapheme>Nguyen</grapheme><alias>{alias}</alias></lexeme>"))
    text = "Nguyen rang."
    job = audio_of(finished(client, {"text": text, "lexicons": [long_alias]}))
    batch = client.post(
        "/v1/batches",
        json={"items": [{"text": text}], "defaults": {**STILL, "lexicons": [long_alias]}},
    )
    assert batch.status_code == 202, batch.text
    done = wait_for_batch(client, batch.json()["id"], lambda b: b["status"] == "completed")
    item = client.get(f"/v1/jobs/{done['items'][0]['job_id']}").json()
    assert item["status"] == "succeeded"
    assert np.abs(audio_of(item) - job).max() < 0.01
    speech = client.post(
        "/v1/audio/speech",
        json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav", "lexicons": [long_alias]},
    )
    assert speech.status_code == 200, speech.text
    spoken, _ = soundfile.read(io.BytesIO(speech.content), dtype="float64")
    plain = client.post(
        "/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": "wav"}
    )
    unfixed, _ = soundfile.read(io.BytesIO(plain.content), dtype="float64")
    assert abs(len(spoken) - len(job)) < len(job) * 0.15
    assert len(spoken) > 2 * len(unfixed)


@pytest.mark.parametrize("written", ["Straße", "STRASSE"])
def test_a_grapheme_is_heard_in_its_own_spelling_and_its_case_folding(client: httpx.Client, written: str) -> None:
    """Issue 34 finding 10: "Straße" was looked for as "strasse" by a pattern with simple case
    folding, so the text "Straße" was read as written, not as the lexicon said."""
    name = stored(client, pls("<lexeme><grapheme>Straße</grapheme><alias>doctor</alias></lexeme>"))
    fixed = audio_of(finished(client, {"text": f"{written} rang.", "lexicons": [name]}))
    said = audio_of(finished(client, {"text": "doctor rang."}))
    assert len(fixed) == len(said)
    assert np.abs(fixed - said).max() < 0.01


def test_a_worker_indexes_a_lexicon_once_per_version_whatever_the_jobs_options(
    client: httpx.Client, worker: ManagedProcess
) -> None:
    """Issue 34 finding 1: workers compiled a lexicon again per version and set of ``normalize``
    options (2.1 s for 10,000 entries), so a tenant cycling options held the worker in compiles.
    Two sets of options here; all 64 in ``test_a_lexicon_version_is_indexed_once_whatever_the_jobs_options``."""
    name = stored(client, pls("<lexeme><grapheme>Nguyen</grapheme><alias>win</alias></lexeme>"))
    metrics = f"{worker_url(worker)}/metrics"
    before = value(scrape(metrics), "ttsq_lexicon_indexes_total")
    cycled: list[dict[str, Any]] = [{}, {"normalize": {"numbers": False}}]
    for options in cycled:
        finished(client, {"text": "Nguyen rang.", "lexicons": [name], **options})
    assert value(scrape(metrics), "ttsq_lexicon_indexes_total") - before == 1
    assert (
        put(client, name, pls("<lexeme><grapheme>Nguyen</grapheme><alias>nuh gwen</alias></lexeme>")).status_code == 200
    )
    for options in cycled:
        finished(client, {"text": "Nguyen rang.", "lexicons": [name], **options})
    assert value(scrape(metrics), "ttsq_lexicon_indexes_total") - before == 2


def test_a_japanese_reading_reaches_the_kokoro_g2p(client: httpx.Client) -> None:
    """A word and a family name whose dictionary readings (キョー, ショージ) the lexicon changes."""
    entries = [
        {"graphemes": ["今日"], "reading": "コンニチ"},
        {"graphemes": ["東海林"], "reading": "アズマ", "accent": 1},
    ]
    name = stored(
        client, json.dumps({"language": "ja", "entries": entries}, ensure_ascii=False).encode(), "application/json"
    )
    body = {"voice": JAPANESE_VOICE, "marks": ["word", "phoneme"]}
    fixed = finished(client, {**body, "text": "今日は東海林さん。", "lexicons": [name]})
    written = finished(client, {**body, "text": "コンニチはアズマさん。"})
    plain = finished(client, {**body, "text": "今日は東海林さん。"})
    fixed_marks = marks_of(fixed)
    words = [m.value for m in fixed_marks if m.type == "word"]
    assert "今日" in words
    assert "東海林" in words
    heard = [m.value for m in fixed_marks if m.type == "phoneme"]
    assert heard == [m.value for m in marks_of(written) if m.type == "phoneme"]
    assert heard != [m.value for m in marks_of(plain) if m.type == "phoneme"]
    assert len(audio_of(fixed)) != len(audio_of(plain))


# --- Refused jobs -------------------------------------------------------------------------------


def test_jobs_naming_lexicons_they_cannot_use_are_refused_with_no_job(
    idle_queue_api: IdleQueueApi, names_lexicon: str
) -> None:
    client = idle_queue_api.client
    japanese = stored(
        client,
        json.dumps({"language": "ja", "entries": [{"graphemes": ["x"], "alias": "y"}]}).encode(),
        "application/json",
    )
    before = len(client.get("/v1/jobs").json()["jobs"])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"lexicons": ["nosuchlexicon"]}, "nosuchlexicon"),
        ({"lexicons": [japanese]}, japanese),
        ({"lexicons": [names_lexicon] * 2}, "more than once"),
        ({"lexicons": [fresh_name() for _ in range(6)]}, "5"),
        ({"lexicons": ["bad-name"]}, "lexicons"),
        ({"normalize": {"urls": False, "rockets": True}}, "rockets"),
    ]
    for extra, named in cases:
        answer = client.post("/v1/jobs", json={"text": "Hello.", **extra})
        assert answer.status_code == 422, (extra, answer.text)
        assert named in answer.json()["error"]["message"], (extra, answer.text)
    assert len(client.get("/v1/jobs").json()["jobs"]) == before


def test_a_job_speaks_the_version_it_was_submitted_with(
    idle_queue_api: IdleQueueApi, settings: Settings, client: httpx.Client
) -> None:
    """Submitted while the lexicon said "win", planned after it said "nuh gwen": it says "win"."""
    name = stored(client, pls("<lexeme><grapheme>Nguyen</grapheme><alias>win</alias></lexeme>"))
    queued = idle_queue_api.client.post(
        "/v1/jobs", json={**STILL, "text": "Nguyen rang.", "marks": ["word", "phoneme"], "lexicons": [name]}
    )
    assert queued.status_code == 202, queued.text
    assert (
        put(client, name, pls("<lexeme><grapheme>Nguyen</grapheme><alias>nuh gwen</alias></lexeme>")).status_code == 200
    )
    enqueue(settings, queued.json()["id"])
    done = wait_for_job(client, queued.json()["id"])
    assert done["status"] == "succeeded", done
    assert said_in(marks_of(done), "Nguyen") == espeak("win")
    later = finished(client, {"text": "Nguyen rang.", "marks": ["word", "phoneme"], "lexicons": [name]})
    assert said_in(marks_of(later), "Nguyen") == espeak("nuh gwen").replace(" ", "")


# --- Tenants ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_url(settings: Settings, worker: ManagedProcess) -> Iterator[str]:
    """An API that requires keys, in front of the suite's worker."""
    with serve(create_app(settings.model_copy(update={"auth_required": True}))) as url:
        yield url


def keyed_client(url: str, settings: Settings) -> httpx.Client:
    key, _ = TenantStore(redis.Redis.from_url(settings.redis_url)).create(f"lex-{uuid.uuid4().hex[:6]}", Limits())
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_a_tenant_cannot_read_list_delete_or_use_another_tenants_lexicon(keyed_url: str, settings: Settings) -> None:
    with keyed_client(keyed_url, settings) as owner, keyed_client(keyed_url, settings) as other:
        name = stored(owner, NAMES)
        assert other.get(f"/v1/lexicons/{name}").status_code == 404
        assert name not in {i["name"] for i in other.get("/v1/lexicons").json()["lexicons"]}
        assert other.delete(f"/v1/lexicons/{name}").status_code == 404
        refused = other.post("/v1/jobs", json={"text": "Nguyen rang.", "lexicons": [name]})
        assert refused.status_code == 422
        assert name in refused.json()["error"]["message"]
        assert other.get("/v1/jobs").json()["jobs"] == []
        assert owner.get(f"/v1/lexicons/{name}").content == NAMES  # still the owner's, whole
        theirs = stored(other, pls("<lexeme><grapheme>Nguyen</grapheme><alias>nuh gwen</alias></lexeme>"))
        assert put(other, name, NAMES).status_code == 200  # the same name is another lexicon
        assert owner.get(f"/v1/lexicons/{name}").content == NAMES
        assert theirs not in {i["name"] for i in owner.get("/v1/lexicons").json()["lexicons"]}


# --- The command line, narration, operator lexicons, normalisation -----------------------------


def ttsq(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [*TTSQ, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(), cwd=ROOT)


def test_ttsq_lexicons_put_list_get_delete(api_url: str, tmp_path: Path) -> None:
    source = DATA / "w3c-example.pls"
    name = fresh_name()
    put_run = ttsq("lexicons", "put", name, str(source), "--api-url", api_url)
    assert put_run.returncode == 0, put_run.stderr
    assert "4 entries" in put_run.stdout
    listed = ttsq("lexicons", "list", "--api-url", api_url)
    assert name in listed.stdout
    copy = tmp_path / "back.pls"
    assert ttsq("lexicons", "get", name, "-o", str(copy), "--api-url", api_url).returncode == 0
    assert copy.read_bytes() == source.read_bytes()
    assert ttsq("lexicons", "delete", name, "--api-url", api_url).returncode == 0
    gone = ttsq("lexicons", "get", name, "--api-url", api_url)
    assert gone.returncode != 0
    assert "lexicon_not_found" in gone.stderr


def test_ttsq_narrate_says_a_lexicon_word_as_jobs_do(
    api_url: str, client: httpx.Client, names_lexicon: str, tmp_path: Path, webhook_worker: ManagedProcess
) -> None:
    book = tmp_path / "names.md"
    book.write_text("# Names\n\n## One\n\nNguyen rang.\n")
    out = tmp_path / "out"
    run = ttsq("narrate", str(book), "--out", str(out), "--api-url", api_url, "--format", "wav",
               "--marks", "viseme", "--lexicon", names_lexicon)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"--lexicon {names_lexicon}" in resume_hint(out, book, names_lexicon)
    marks = marks_from_json(json.loads((out / "01-one.marks.json").read_text()))
    assert said_in(marks, "Nguyen") == espeak("win")
    manifest = json.loads((out / "manifest.json").read_text())
    job = client.get(f"/v1/jobs/{manifest['chapters'][0]['job_id']}").json()
    assert [use["name"] for use in job["options"]["lexicons"]] == [names_lexicon]


def resume_hint(out: Path, book: Path, name: str) -> str:
    options = NarrateOptions(voice=None, format="wav", speed=None, marks="viseme", lexicons=(name,))
    return resume_command(book, out, options, None, False)


def test_normalisation_changes_what_is_said_and_can_be_switched_off(client: httpx.Client) -> None:
    text = "It cost $5 at 10:00."
    marks = ["word", "phoneme"]
    normal = finished(client, {"text": text, "marks": marks})
    raw = finished(client, {"text": text, "marks": marks, "normalize": False})
    only_money_off = finished(client, {"text": text, "marks": marks, "normalize": {"currency": False}})
    words = [m.value for m in marks_of(normal) if m.type == "word"]
    assert words == ["It", "cost", "5", "at", "10:00"]  # what was written (a word mark spans letters and digits)
    assert said_in(marks_of(normal), "5") == espeak("five dollars").replace(" ", "")
    assert said_in(marks_of(raw), "5") != said_in(marks_of(normal), "5")
    assert said_in(marks_of(only_money_off), "5") == said_in(marks_of(raw), "5")
    assert said_in(marks_of(only_money_off), "10:00") == said_in(marks_of(normal), "10:00")


def test_an_operators_voice_lexicon_applies_after_the_jobs(tmp_path: Path, redis_client: redis.Redis) -> None:
    """``TTSQ_VOICE_LEXICONS``: read from its file, again when the file changes."""
    voice = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    names = tmp_path / "names.pls"
    names.write_bytes(pls("<lexeme><grapheme>Nguyen</grapheme><alias>win</alias></lexeme>"))
    record = JobRecord(id=str(uuid.uuid4()), voice=voice.id, format="wav", characters=1, options=JobOptions(),
                       created_at=utcnow())  # fmt: skip
    store = LexiconStore(redis_client, 60)
    spoken = job_pronunciation(record, voice, store, {voice.id: [names]}).spoken("Mr Nguyen.")
    assert spoken.text == "Mr win."
    names.write_bytes(pls("<lexeme><grapheme>Nguyen</grapheme><alias>nuh gwen</alias></lexeme>"))
    os.utime(names, ns=(names.stat().st_atime_ns, names.stat().st_mtime_ns + 1_000_000_000))
    assert job_pronunciation(record, voice, store, {voice.id: [names]}).spoken("Mr Nguyen.").text == "Mr nuh gwen."
    assert job_pronunciation(record, voice, store, {}).spoken("Mr Nguyen.").text == "Mr Nguyen."


def test_a_worker_keeps_one_compiled_version_and_still_reads_older_ones(redis_client: redis.Redis) -> None:
    voice = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    store = LexiconStore(redis_client, 60)
    tenant, name = f"t-{uuid.uuid4().hex[:8]}", fresh_name()

    def version(alias: str) -> int:
        lexicon = Lexicon("en-US", (LexiconEntry(("Nguyen",), alias=alias),))
        return store.put(tenant, name, b"{}", "application/json", lexicon, 5).version

    first = version("win")
    assert said(store, voice, tenant, name, first) == "win"
    second = version("nuh gwen")
    assert said(store, voice, tenant, name, second) == "nuh gwen"
    assert pronunciations._indexes[(tenant, name)][0] == second  # the older one dropped
    assert said(store, voice, tenant, name, first) == "win"  # a job submitted before the change still speaks as it was
    assert pronunciations._indexes[(tenant, name)][0] == second


def said(
    store: LexiconStore, voice: VoiceInfo, tenant: str, name: str, at: int, normalize: NormalizeOption | None = None
) -> str:
    """What a job of ``tenant`` using lexicon ``name`` at version ``at`` says for "Nguyen"."""
    options = JobOptions(lexicons=[LexiconUse(name=name, version=at)], normalize=normalize or NormalizeOption())
    record = JobRecord(id=str(uuid.uuid4()), voice=voice.id, format="wav", characters=1, options=options,
                       created_at=utcnow(), tenant=tenant)  # fmt: skip
    return job_pronunciation(record, voice, store, {}).spoken("Nguyen").text


def indexed() -> float:
    return REGISTRY.get_sample_value("ttsq_lexicon_indexes_total") or 0.0


def test_a_lexicon_version_is_indexed_once_whatever_the_jobs_options(redis_client: redis.Redis) -> None:
    """Issue 34 finding 1: a worker compiled a lexicon again for every distinct set of ``normalize``
    options (2.1 s for 10,000 entries), so a tenant cycling them held every job behind compiles."""
    voice = VoiceCatalog.discover().get(DEFAULT_VOICE_ID)
    store = LexiconStore(redis_client, 60)
    tenant, name = f"t-{uuid.uuid4().hex[:8]}", fresh_name()
    lexicon = Lexicon("en-US", (LexiconEntry(("Nguyen",), alias="win"),))
    version = store.put(tenant, name, b"{}", "application/json", lexicon, 5).version
    before = indexed()
    rules = list(NormalizeOption.model_fields)
    for n in range(64):
        options = NormalizeOption(**{rule: bool(n >> bit & 1) for bit, rule in enumerate(rules)})
        assert said(store, voice, tenant, name, version, options) == "win"
    assert indexed() - before == 1
