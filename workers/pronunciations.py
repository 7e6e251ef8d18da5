"""A job's :class:`~tts_core.lexicon.pronunciation.Pronunciation`: the tenant's lexicons at the versions the
job recorded, then the operator's lexicons for the voice (``TTSQ_VOICE_LEXICONS``), and the job's
normalisation options.

Lexicons are read from Redis and indexed for matching (``tts_core.lexicon.lexicon_match.GraphemeIndex``)
once per version and process. An index depends on nothing but its lexicon, so a job only combines
the indexes this process holds with its own options: cycling ``normalize`` options or voices
indexes nothing, and a new version costs one read and one index (tens of milliseconds for the
largest lexicon allowed), in the job that first uses it. When a newer version of a lexicon is read,
the older one is dropped (a job submitted before the change that is planned after it reads and
indexes its own version again, without keeping it). The indexes kept are bounded by count and by
graphemes, the least recently used dropped first. Operator files are read again when they change.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Final

from tts_core.base.errors import InvalidLexicon, VoiceLoadError
from tts_core.lexicon.lexicon import Lexicon
from tts_core.lexicon.lexicon_documents import parse_json_lexicon, parse_pls
from tts_core.lexicon.lexicon_match import GraphemeIndex
from tts_core.lexicon.pronunciation import Normalizer, Pronunciation
from tts_core.text.normalization import NormalizeOptions, spoken_edits
from tts_core.voices.voice_info import VoiceInfo
from ttsq.job_record import JobRecord, NormalizeOption
from ttsq.lexicons import LexiconRef, LexiconStore
from workers.metrics import LEXICON_INDEXES

LEXICONS_KEPT: Final = 64
"""Indexed tenant lexicons (one version of each) a worker process keeps."""
GRAPHEMES_KEPT: Final = 100_000
"""Graphemes in all the indexed lexicons a process keeps: ten of the largest allowed (10,000
entries), some 50 MiB at about 500 bytes a grapheme (measured: 4 to 6 MiB a full lexicon). Past it
the least recently used are dropped, whatever their count; the newest is always kept."""
OPERATOR_FILES_KEPT: Final = 64
"""Indexed operator lexicon files (by path and modification time) a process keeps."""

_indexes: OrderedDict[tuple[str, str], tuple[int, GraphemeIndex]] = OrderedDict()
"""(tenant, lexicon name) -> the newest version read and its index, least recently used first."""
_lock = threading.Lock()


def job_pronunciation(
    record: JobRecord, voice: VoiceInfo, store: LexiconStore, voice_lexicons: dict[str, list[Path]]
) -> Pronunciation:
    """How the job's text is spoken by its voice."""
    tenant = [_tenant_index(store, record.tenant, LexiconRef(use.name, use.version)) for use in record.options.lexicons]
    paths = voice_lexicons.get(voice.id, [])
    operator = [_file_index(path, _modified_ns(path, voice.id), voice.id) for path in paths]
    return Pronunciation([*tenant, *operator], voice.language, _normalizer(record.options.normalize, voice.language))


def _normalizer(option: NormalizeOption, language: str) -> Normalizer | None:
    """The job's normalisation rules for the voice's language; None where every rule is off."""
    chosen = option.model_dump()
    if not any(chosen.values()):
        return None
    options = NormalizeOptions(**chosen)
    return lambda text: spoken_edits(text, language, options)


def _tenant_index(store: LexiconStore, tenant: str, ref: LexiconRef) -> GraphemeIndex:
    key = (tenant, ref.name)
    with _lock:
        cached = _indexes.get(key)
        if cached is not None and cached[0] == ref.version:
            _indexes.move_to_end(key)
            return cached[1]
    index = _indexed(store.lexicon(tenant, ref))
    with _lock:
        cached = _indexes.get(key)
        if cached is None or cached[0] < ref.version:  # an older version read for an older job is not kept
            _indexes[key] = (ref.version, index)
            _indexes.move_to_end(key)
            _trim()
    return index


def _trim() -> None:
    """Drop the least recently used indexes past :data:`LEXICONS_KEPT` or :data:`GRAPHEMES_KEPT`."""
    graphemes = sum(index.graphemes for _, index in _indexes.values())
    while len(_indexes) > 1 and (len(_indexes) > LEXICONS_KEPT or graphemes > GRAPHEMES_KEPT):
        _, (_, dropped) = _indexes.popitem(last=False)
        graphemes -= dropped.graphemes


def _indexed(lexicon: Lexicon) -> GraphemeIndex:
    LEXICON_INDEXES.inc()
    return GraphemeIndex(lexicon)


def _modified_ns(path: Path, voice_id: str) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError as e:
        raise VoiceLoadError(f"the lexicon file {path.name} of voice {voice_id} cannot be read: {e.strerror}") from e


@functools.lru_cache(maxsize=OPERATOR_FILES_KEPT)
def _file_index(path: Path, mtime_ns: int, voice_id: str) -> GraphemeIndex:
    """An operator's lexicon file (PLS, or JSON by its ``.json`` suffix), read again once it changes;
    one that cannot be read or parsed fails the voice's jobs as the voice's own fault."""
    try:
        data = path.read_bytes()
        lexicon = parse_json_lexicon(json.loads(data)) if path.suffix.lower() == ".json" else parse_pls(data)
    except (OSError, ValueError, InvalidLexicon) as e:
        raise VoiceLoadError(f"the lexicon file {path.name} of voice {voice_id} is unusable: {e}") from e
    return _indexed(lexicon)
