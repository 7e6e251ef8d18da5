"""A job's :class:`~tts_core.pronunciation.Pronunciation`: the tenant's lexicons at the versions the
job recorded, then the operator's lexicons for the voice (``TTSQ_VOICE_LEXICONS``), and the job's
normalisation options.

Lexicons are read from Redis and compiled once per version and process; when a newer version of a
lexicon is read, the older one is dropped from the cache (a job submitted before the change that is
planned after it reads its own version again). Operator files are read again when they change.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Final, NamedTuple

from tts_core.errors import InvalidLexicon, VoiceLoadError
from tts_core.lexicon import Lexicon
from tts_core.lexicon_documents import parse_json_lexicon, parse_pls
from tts_core.normalization import NormalizeOptions, spoken_edits
from tts_core.pronunciation import Normalizer, Pronunciation
from tts_core.voice_info import VoiceInfo
from ttsq.jobs import JobRecord, NormalizeOption
from ttsq.lexicons import LexiconRef, LexiconStore

LEXICONS_KEPT: Final = 64
"""Compiled lexicon versions a worker process keeps."""
PRONUNCIATIONS_KEPT: Final = 32
"""Whole pronunciations (lexicons, language and options together) a worker process keeps."""

_lexicons: OrderedDict[tuple[str, str], tuple[int, Lexicon]] = OrderedDict()


class _Made(NamedTuple):
    """What a pronunciation is made of: the key of the cache that keeps it."""

    tenant: str
    lexicons: tuple[tuple[str, int], ...]
    """The job's lexicons: name and version."""
    files: tuple[tuple[Path, int], ...]
    """The voice's operator lexicon files and when each last changed."""
    language: str
    options: tuple[tuple[str, bool], ...]


_pronunciations: OrderedDict[_Made, Pronunciation] = OrderedDict()
_lock = threading.Lock()


def job_pronunciation(
    record: JobRecord, voice: VoiceInfo, store: LexiconStore, voice_lexicons: dict[str, list[Path]]
) -> Pronunciation:
    """How the job's text is spoken by its voice."""
    files = tuple((path, _modified_ns(path, voice.id)) for path in voice_lexicons.get(voice.id, []))
    options = record.options.normalize
    key = _Made(
        record.tenant,
        tuple((use.name, use.version) for use in record.options.lexicons),
        files,
        voice.language,
        tuple(options.model_dump().items()),
    )
    with _lock:
        known = _pronunciations.get(key)
        if known is not None:
            _pronunciations.move_to_end(key)
            return known
    lexicons = [_tenant_lexicon(store, record.tenant, LexiconRef(u.name, u.version)) for u in record.options.lexicons]
    operators = [_file_lexicon(path, modified, voice.id) for path, modified in files]
    pronunciation = Pronunciation([*lexicons, *operators], voice.language, _normalizer(options, voice.language))
    with _lock:
        _drop_superseded(record.tenant, dict(key.lexicons))
        _pronunciations[key] = pronunciation
        while len(_pronunciations) > PRONUNCIATIONS_KEPT:
            _pronunciations.popitem(last=False)
    return pronunciation


def _drop_superseded(tenant: str, versions: dict[str, int]) -> None:
    """Forget the tenant's pronunciations made with an older version of a lexicon now read newer
    (a job still planned with an older one makes its own again)."""
    for key in list(_pronunciations):
        if key.tenant == tenant and any(versions.get(name, version) > version for name, version in key.lexicons):
            del _pronunciations[key]


def _normalizer(option: NormalizeOption, language: str) -> Normalizer | None:
    """The job's normalisation rules for the voice's language; None where every rule is off."""
    chosen = option.model_dump()
    if not any(chosen.values()):
        return None
    options = NormalizeOptions(**chosen)
    return lambda text: spoken_edits(text, language, options)


def _tenant_lexicon(store: LexiconStore, tenant: str, ref: LexiconRef) -> Lexicon:
    with _lock:
        cached = _lexicons.get((tenant, ref.name))
        if cached is not None and cached[0] == ref.version:
            _lexicons.move_to_end((tenant, ref.name))
            return cached[1]
    lexicon = store.lexicon(tenant, ref)
    with _lock:
        cached = _lexicons.get((tenant, ref.name))
        if cached is None or cached[0] < ref.version:  # an older version read for an older job is not kept
            _lexicons[(tenant, ref.name)] = (ref.version, lexicon)
            while len(_lexicons) > LEXICONS_KEPT:
                _lexicons.popitem(last=False)
    return lexicon


def _modified_ns(path: Path, voice_id: str) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError as e:
        raise VoiceLoadError(f"the lexicon file {path.name} of voice {voice_id} cannot be read: {e.strerror}") from e


@functools.lru_cache(maxsize=64)
def _file_lexicon(path: Path, mtime_ns: int, voice_id: str) -> Lexicon:
    """An operator's lexicon file (PLS, or JSON by its ``.json`` suffix), read again once it changes;
    one that cannot be read or parsed fails the voice's jobs as the voice's own fault."""
    try:
        data = path.read_bytes()
        if path.suffix.lower() == ".json":
            return parse_json_lexicon(json.loads(data))
        return parse_pls(data)
    except (OSError, ValueError, InvalidLexicon) as e:
        raise VoiceLoadError(f"the lexicon file {path.name} of voice {voice_id} is unusable: {e}") from e
