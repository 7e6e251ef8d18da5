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
from typing import Final

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
_pronunciations: OrderedDict[tuple[object, ...], Pronunciation] = OrderedDict()
_lock = threading.Lock()


def job_pronunciation(
    record: JobRecord, voice: VoiceInfo, store: LexiconStore, voice_lexicons: dict[str, list[Path]]
) -> Pronunciation:
    """How the job's text is spoken by its voice."""
    files = [_file_lexicon(path, path.stat().st_mtime_ns) for path in voice_lexicons.get(voice.id, [])]
    options = record.options.normalize
    key = (
        record.tenant,
        tuple((use.name, use.version) for use in record.options.lexicons),
        tuple(id(lexicon) for lexicon in files),
        voice.language,
        tuple(options.model_dump().items()),
    )
    with _lock:
        known = _pronunciations.get(key)
        if known is not None:
            _pronunciations.move_to_end(key)
            return known
    lexicons = [_tenant_lexicon(store, record.tenant, LexiconRef(u.name, u.version)) for u in record.options.lexicons]
    pronunciation = Pronunciation([*lexicons, *files], voice.language, _normalizer(options, voice.language))
    with _lock:
        _pronunciations[key] = pronunciation
        while len(_pronunciations) > PRONUNCIATIONS_KEPT:
            _pronunciations.popitem(last=False)
    return pronunciation


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


@functools.lru_cache(maxsize=64)
def _file_lexicon(path: Path, mtime_ns: int) -> Lexicon:
    """An operator's lexicon file (PLS, or JSON by its ``.json`` suffix), read again once it changes."""
    data = path.read_bytes()
    if path.suffix.lower() == ".json":
        return parse_json_lexicon(json.loads(data))
    return parse_pls(data)
