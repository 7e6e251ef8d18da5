"""Which lexicons a job may use, checked at submission: each named one exists for the tenant, is of
the voice's language, and holds nothing the voice cannot say; the job records each at its current
version. A lexicon being stored is checked the same way against every voice of its language.

After the named lexicons, a job uses the tenant's user dictionary (the lexicon named
:data:`USER_DICTIONARY`, which the VOICEVOX API's user dictionary writes) when it is of the voice's
language, without naming it: a word added by a VOICEVOX client is said so by every job of the tenant
in that language. It does not count against a job's limit of named lexicons.

A verdict is kept per lexicon version and voice, so a batch of 10,000 items naming one lexicon of
1,000 entries reads and checks it once; so is what each version may add to a job's spoken text
(``ttsq.lexicon_growth``), which decides the job's priority, admission and charge.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from tts_core.lexicon.lexicon import Lexicon
from tts_core.text.scripts import base_language
from tts_core.voices.catalog import VoiceCatalog
from tts_core.voices.engines import engine_of
from tts_core.voices.voice_info import VoiceInfo
from ttsq.errors import LexiconNotFound, LexiconRefused
from ttsq.job_record import LexiconUse
from ttsq.lexicon_growth import NO_GROWTH, Growth, LexiconGrowth, growth_of
from ttsq.lexicons import USER_DICTIONARY, LexiconRef, LexiconStore

VERDICTS_KEPT: Final = 1024
"""Lexicon versions and voices whose verdict an API process remembers."""

_verdicts: OrderedDict[tuple[str, str, int, str], str | None] = OrderedDict()
_growths: OrderedDict[tuple[str, str, int], LexiconGrowth] = OrderedDict()
_lock = threading.Lock()


def unspeakable_entry(lexicon: Lexicon, voice: VoiceInfo) -> str | None:
    """Why the voice cannot use the lexicon (its first entry the voice cannot say), or None."""
    engine = engine_of(voice)
    for number, entry in enumerate(lexicon.entries, start=1):
        if entry.phoneme is not None:
            problem = engine.unspeakable_phonemes(voice, entry.phoneme)
            if problem is not None:
                return f"entry {number} ({entry.graphemes[0]!r}): {problem}"
    return None


def check_storable(lexicon: Lexicon, catalog: VoiceCatalog) -> None:
    """A lexicon is stored only if some voice of its language can say all of its entries (a job
    checks its own voice again); a :class:`LexiconRefused` naming an entry and voice otherwise."""
    voices = [v for v in catalog.all() if base_language(v.language) == lexicon.primary_language]
    if not voices:
        raise LexiconRefused(f"no voice of this server speaks the lexicon's language {lexicon.language!r}")
    problems = [(voice, unspeakable_entry(lexicon, voice)) for voice in voices]
    if all(problem is not None for _, problem in problems):
        raise LexiconRefused(str(problems[0][1]))


def job_lexicons(
    store: LexiconStore, tenant: str, names: Sequence[str], voice: VoiceInfo, draft: LexiconRef | None = None
) -> list[LexiconUse]:
    """The named lexicons at their current versions, each checked against the voice (a
    :class:`LexiconRefused` naming the first that cannot be used), then the tenant's user dictionary
    if it applies. A ``draft`` (``LexiconStore.put_draft``) comes first, checked the same way."""
    uses: list[LexiconUse] = []
    if draft is not None:
        use = LexiconUse(name=draft.name, version=draft.version)
        problem = _verdict(store, tenant, use, voice)
        if problem is not None:
            raise LexiconRefused(f"lexicon: {problem}")
        uses.append(use)
    for index, name in enumerate(names):
        try:
            ref = store.current(tenant, name)
        except LexiconNotFound:
            raise LexiconRefused(f"lexicons[{index}]: no lexicon named {name!r}") from None
        problem = _verdict(store, tenant, LexiconUse(name=name, version=ref.version), voice)
        if problem is not None:
            raise LexiconRefused(f"lexicons[{index}] ({name!r}): {problem}")
        uses.append(LexiconUse(name=name, version=ref.version))
    user = user_dictionary_use(store, tenant, voice, names)
    return uses if user is None else [*uses, user]


def user_dictionary_use(
    store: LexiconStore, tenant: str, voice: VoiceInfo, named: Sequence[str] = ()
) -> LexiconUse | None:
    """The tenant's user dictionary at its current version, if it exists, the job did not name it,
    and the voice can use it (its language): otherwise None, since the job never asked for it."""
    if USER_DICTIONARY in named:
        return None
    try:
        use = LexiconUse(name=USER_DICTIONARY, version=store.current(tenant, USER_DICTIONARY).version)
    except LexiconNotFound:
        return None
    return use if _verdict(store, tenant, use, voice) is None else None


def user_dictionary(store: LexiconStore, tenant: str, voice: VoiceInfo) -> Lexicon | None:
    """The tenant's user dictionary as the voice would use it (:func:`user_dictionary_use`), or None."""
    use = user_dictionary_use(store, tenant, voice)
    if use is None:
        return None
    try:
        return store.lexicon(tenant, LexiconRef(use.name, use.version))
    except LexiconNotFound:  # replaced just now
        return None


def _verdict(store: LexiconStore, tenant: str, use: LexiconUse, voice: VoiceInfo) -> str | None:
    key = (tenant, use.name, use.version, voice.id)
    with _lock:
        if key in _verdicts:
            _verdicts.move_to_end(key)
            return _verdicts[key]
    try:
        lexicon = store.lexicon(tenant, LexiconRef(use.name, use.version))
    except LexiconNotFound:  # replaced between the two reads: the caller may try again
        return "it changed while the job was being submitted; submit again"
    if lexicon.primary_language != base_language(voice.language):
        verdict: str | None = f"it is a {lexicon.language!r} lexicon and voice {voice.id} speaks {voice.language!r}"
    else:
        verdict = unspeakable_entry(lexicon, voice)
    with _lock:
        _verdicts[key] = verdict
        while len(_verdicts) > VERDICTS_KEPT:
            _verdicts.popitem(last=False)
    return verdict


def spoken_growth(store: LexiconStore, tenant: str, uses: Sequence[LexiconUse], text: str) -> Growth:
    """At most what the job's lexicons add to what it speaks of ``text`` (``ttsq.lexicon_growth``)."""
    growths = [_growth(store, tenant, use) for use in uses]
    return growth_of((g for g in growths if g), text) if any(growths) else NO_GROWTH


def _growth(store: LexiconStore, tenant: str, use: LexiconUse) -> LexiconGrowth:
    key = (tenant, use.name, use.version)
    with _lock:
        if key in _growths:
            _growths.move_to_end(key)
            return _growths[key]
    try:
        growth = LexiconGrowth(store.lexicon(tenant, LexiconRef(use.name, use.version)))
    except LexiconNotFound:  # replaced between the reads: the job is refused for it, as by its verdict
        raise LexiconRefused(f"lexicon {use.name!r} changed while the job was being submitted; submit again") from None
    with _lock:
        _growths[key] = growth
        while len(_growths) > VERDICTS_KEPT:
            _growths.popitem(last=False)
    return growth
