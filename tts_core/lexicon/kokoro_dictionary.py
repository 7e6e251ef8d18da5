"""A lexicon's Japanese readings as an OpenJTalk user dictionary, the form in which they reach the
Kokoro voices' G2P (``tts_core.frontend.kokoro_reading``: each front end with its own dictionary holds its own
``OpenJTalk`` instance; pyopenjtalk's global one is never changed, since one worker serves several
lexicons at once).

A dictionary is compiled once per distinct content and kept under a file named by the hash of its
rows, so every process that needs it finds or builds the same file; a builder writes under a
temporary name and renames, so concurrent builders never expose half a file. The folder is a cache
bounded in files and bytes (:data:`MAX_DICTIONARY_FILES`, :data:`MAX_DICTIONARY_BYTES`), least
recently used first out: every distinct content a tenant stores would otherwise leave a file for
good (issue 34: 20 rounds left 20 files). A file is only needed while OpenJTalk loads it (MeCab maps
it; the mapping outlives the name), so a process finds or builds it and loads it under a shared
``flock`` of the folder's lock file (:func:`load_user_dictionary`), and files are removed only under
the exclusive lock: never while another process, one of several workers sharing ``$TMPDIR``, is
between finding a file and loading it.

Each row is a naist-jdic proper noun: surface, context ids left empty (``mecab-dict-index`` picks
them from the part of speech), :data:`USER_WORD_COST`, the reading as both reading and
pronunciation, and the accent as ``n/moras``. The reading is spoken as written: ``ショウジ`` is said
with its ``ウ`` as a vowel of its own; a long vowel is written ``ー`` (``ショージ``), as naist-jdic's
own pronunciations do (no rule can tell ``コウマ``, 子馬, from ``コーマ``).

The accent is correct data for other consumers but does not change Kokoro's tokens: misaki's
romaniser reads only the pronunciation, without its accent marks (measured: a word with accent 0
and with accent 3 gives identical ids, ``tests/test_kokoro_dictionary.py``).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, TypeVar

import pyopenjtalk
from pyopenjtalk.openjtalk import OpenJTalk

from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import ACCENT_MARK, LexiconEntry, mora_count

DICTIONARY_FORMAT: Final = "ttsq-openjtalk-1"
"""Part of each dictionary's hash: a change to how rows are written gives new files, never a stale hit."""
DEFAULT_CACHE_DIR: Final = Path(tempfile.gettempdir()) / "ttsq-kokoro-dictionaries"
"""Where compiled dictionaries are kept unless a caller names a folder."""
MAX_DICTIONARY_FILES: Final = 16
"""Compiled dictionaries kept in a folder: as many as one process keeps loaded (``FRONT_ENDS_KEPT``,
``JTALKS_KEPT``). A file evicted and needed again is compiled again (measured: 1,000 words in 0.05 s,
10,000 in 0.3 s); a process that loaded it keeps it loaded."""
MAX_DICTIONARY_BYTES: Final = 256 * 1024 * 1024
"""Bytes of compiled dictionaries kept in a folder (10,000 words compile to 2 MiB); the one just
used is kept even if it alone is larger."""
LOCK_NAME: Final = ".lock"
"""The folder's lock file: shared while a process finds or builds a file and loads it, exclusive
while one evicts."""
BUILD_PREFIX: Final = ".build-"
USER_WORD_COST: Final = -20000
"""The rows' word cost. naist-jdic's words cost about -4,000 to 15,000 and its connection costs are of
the same order, so a path through a user word is always the cheapest: the word is read wherever its
surface occurs, even inside a longer word of the system dictionary (``東海林業`` with ``東海林``
is cut ``東海林`` + ``業``). MeCab keeps costs in 16 bits; this leaves room below -32,768."""
DEFAULT_ACCENT: Final = 0
"""The accent of a reading given without one (flat, the commonest type of Japanese nouns). OpenJTalk
takes no "unknown" here: with ``*`` pyopenjtalk-plus drops the row's reading for the system one."""
POS_FIELDS: Final = ("名詞", "固有名詞", "一般", "*", "*", "*")
"""Part of speech, its subclasses, conjugation type and form: a proper noun."""

T = TypeVar("T")


def load_user_dictionary(
    entries: Sequence[LexiconEntry], load: Callable[[Path], T], cache_dir: Path | None = None
) -> T | None:
    """``load`` called on the compiled dictionary of the entries that have a ``reading`` (None if
    none has), while no process may remove it; built once per distinct content into ``cache_dir``
    (:data:`DEFAULT_CACHE_DIR` if None), then the folder is cut back to its bounds."""
    rows = dictionary_rows(entries)
    if not rows:
        return None
    text = _csv_text(rows)
    folder = DEFAULT_CACHE_DIR if cache_dir is None else cache_dir
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(f"{DICTIONARY_FORMAT}\n{text}".encode()).hexdigest()
    path = folder / f"{digest[:32]}.dic"
    with _locked(folder, fcntl.LOCK_SH):
        try:
            os.utime(path)  # the least recently used goes first
        except FileNotFoundError:
            _build(text, path)
        loaded = load(path)
    evict(folder, keep=path)
    return loaded


def user_dictionary(entries: Sequence[LexiconEntry], cache_dir: Path | None = None) -> Path | None:
    """The compiled dictionary's path (:func:`load_user_dictionary`), for a caller that reads it at
    once in this process: another process may evict it once later dictionaries pass the bounds."""
    return load_user_dictionary(entries, lambda path: path, cache_dir)


def evict(folder: Path, keep: Path | None = None) -> None:
    """Remove the least recently used dictionaries past :data:`MAX_DICTIONARY_FILES` and
    :data:`MAX_DICTIONARY_BYTES` (never ``keep``), and builds a killed process left; skipped while
    another process holds the folder's lock (the next call evicts)."""
    try:
        with _locked(folder, fcntl.LOCK_EX | fcntl.LOCK_NB):
            for leftover in folder.glob(f"{BUILD_PREFIX}*"):  # no build runs under the exclusive lock
                leftover.unlink(missing_ok=True)
            count, size = 0, 0
            for path, stat in sorted(_dictionaries(folder), key=lambda found: -found[1].st_mtime):
                if path == keep or (count < MAX_DICTIONARY_FILES and size + stat.st_size <= MAX_DICTIONARY_BYTES):
                    count, size = count + 1, size + stat.st_size
                else:
                    path.unlink(missing_ok=True)
    except BlockingIOError:
        return


def _dictionaries(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for path in folder.glob("*.dic"):
        with contextlib.suppress(FileNotFoundError):
            yield path, path.stat()


@contextlib.contextmanager
def _locked(folder: Path, operation: int) -> Iterator[None]:
    """The folder's lock file held with ``operation`` (``flock``: released when the file closes,
    also by a process that dies)."""
    with open(folder / LOCK_NAME, "a") as lock:
        fcntl.flock(lock.fileno(), operation)
        yield


def dictionary_rows(entries: Sequence[LexiconEntry]) -> list[tuple[str, ...]]:
    """The CSV rows of the entries' readings, one per surface: the first entry of a surface wins."""
    rows: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        if entry.reading is None:
            continue
        reading, accent = _reading_and_accent(entry.reading, entry.accent)
        for grapheme in entry.graphemes:
            for surface in _surfaces(grapheme, entry.case_sensitive):
                if surface and surface not in rows:
                    rows[surface] = _row(surface, reading, accent)
    return list(rows.values())


def _row(surface: str, reading: str, accent: int) -> tuple[str, ...]:
    moras = mora_count(reading)
    return (surface, "", "", str(USER_WORD_COST), *POS_FIELDS, surface, reading, reading, f"{accent}/{moras}", "*")


def _reading_and_accent(reading: str, accent: int | None) -> tuple[str, int]:
    """The reading without an accent mark, and the accent: the given one, else the mark's, else
    :data:`DEFAULT_ACCENT`."""
    if ACCENT_MARK in reading:
        before = reading.split(ACCENT_MARK, 1)[0]
        reading = reading.replace(ACCENT_MARK, "")
        if accent is None:
            accent = mora_count(before)
    return reading, DEFAULT_ACCENT if accent is None else min(max(accent, 0), mora_count(reading))


def _surfaces(grapheme: str, case_sensitive: bool) -> list[str]:
    """The grapheme as OpenJTalk's MeCab sees it (half-width Latin, digits and punctuation are made
    full-width before analysis, so ``GNU`` is matched in full-width letters); a case-insensitive
    grapheme in its written, lower, upper and title case (MeCab matches case exactly)."""
    forms = [grapheme] if case_sensitive else [grapheme, grapheme.lower(), grapheme.upper(), grapheme.title()]
    normal = [_normalizer().normalize_for_mecab(form).strip() for form in forms]
    return list(dict.fromkeys(normal))


_NORMALIZER: list[OpenJTalk] = []


def _normalizer() -> OpenJTalk:
    """An OpenJTalk instance for its text normalisation only (cheap: the dictionary is mapped lazily)."""
    if not _NORMALIZER:
        _NORMALIZER.append(OpenJTalk(dn_mecab=pyopenjtalk.OPEN_JTALK_DICT_DIR))
    return _NORMALIZER[0]


def _csv_text(rows: Sequence[tuple[str, ...]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _build(text: str, path: Path) -> None:
    """Compile ``text`` to ``path`` through temporary files beside it, then rename: a reader sees the
    whole dictionary or none, and concurrent builders of one content each write the same bytes."""
    handle, source = tempfile.mkstemp(dir=path.parent, prefix=BUILD_PREFIX, suffix=".csv")
    target = f"{source[:-4]}.dic"
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        try:
            pyopenjtalk.mecab_dict_index(source, target)
        except RuntimeError as e:
            raise InvalidLexicon(f"the Japanese readings could not be compiled as a dictionary: {e}") from e
        os.replace(target, path)
    finally:
        for leftover in (source, target):
            Path(leftover).unlink(missing_ok=True)
