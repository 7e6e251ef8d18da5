"""VOICEVOX's user dictionary (``/user_dict``, ``/user_dict_word``, ``/import_user_dict``) on the
tenant's lexicons.

The words are kept as VOICEVOX answers them (``ttsq.voicevox_words``); after each change the
tenant's ``userdict`` lexicon (Japanese, one reading entry per word, higher priority first) is
rewritten whole from them, so the lexicon machinery (versions, the Kokoro user dictionary, every job
of the tenant in Japanese using it: ``api.lexicon_use``) applies unchanged. The part of speech and
the priority are kept and answered back, but every word reaches OpenJTalk as a proper noun that
wins over the system dictionary (``tts_core.lexicon.kokoro_dictionary``).

Bad input is an ``HTTPException`` with VOICEVOX's ``{"detail": ...}``: 422, as VOICEVOX ENGINE
answers it, also for an unknown word uuid.
"""

from __future__ import annotations

import json
import re
import uuid
from contextlib import suppress
from enum import StrEnum
from typing import Annotated, Final

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from api.deps import StateDep, TenantDep
from api.lexicon_use import check_storable
from api.state import AppState
from tts_core.base.errors import InvalidLexicon
from tts_core.lexicon.lexicon import mora_count
from tts_core.lexicon.lexicon_documents import LexiconLimits, parse_json_lexicon
from ttsq.errors import LexiconNotFound, LexiconRefused
from ttsq.lexicons import USER_DICTIONARY, USER_DICTIONARY_LANGUAGE
from ttsq.voicevox_words import Words

router = APIRouter(tags=["voicevox user dictionary"])

MIN_PRIORITY: Final = 0
MAX_PRIORITY: Final = 10
DEFAULT_PRIORITY: Final = 5
"""VOICEVOX's priority bounds and default."""
_KATAKANA: Final = re.compile(r"[ァ-ヴー]+")
"""VOICEVOX's pronunciation: katakana and the long-vowel mark only."""
_UNSAFE: Final = re.compile(r"[\n\r\x00,\"]")
"""Characters VOICEVOX refuses in a word's fields (its dictionary is a CSV file)."""


class WordType(StrEnum):
    PROPER_NOUN = "PROPER_NOUN"
    COMMON_NOUN = "COMMON_NOUN"
    VERB = "VERB"
    ADJECTIVE = "ADJECTIVE"
    SUFFIX = "SUFFIX"


_PARTS_OF_SPEECH: Final = {
    WordType.PROPER_NOUN: ("名詞", "固有名詞", "一般", "*", 1348),
    WordType.COMMON_NOUN: ("名詞", "一般", "*", "*", 1345),
    WordType.VERB: ("動詞", "自立", "*", "*", 642),
    WordType.ADJECTIVE: ("形容詞", "自立", "*", "*", 20),
    WordType.SUFFIX: ("名詞", "接尾", "一般", "*", 1358),
}
"""Each word type's part of speech, its details and MeCab context id, as VOICEVOX ENGINE writes them."""


class UserDictWord(BaseModel):
    """A word as VOICEVOX ENGINE answers and imports it, checked as it checks it."""

    surface: str = Field(min_length=1)
    priority: int = Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)
    context_id: int = 1348
    part_of_speech: str
    part_of_speech_detail_1: str
    part_of_speech_detail_2: str
    part_of_speech_detail_3: str
    inflectional_type: str
    inflectional_form: str
    stem: str
    yomi: str
    pronunciation: str
    accent_type: int
    mora_count: int | None = None
    accent_associative_rule: str

    @field_validator("surface")
    @classmethod
    def _surface(cls, value: str) -> str:
        if not value.strip() or any(ch in value for ch in "\n\r\x00"):
            raise ValueError("the surface must be non-empty text on one line")
        return value

    @field_validator("pronunciation")
    @classmethod
    def _pronunciation(cls, value: str) -> str:
        if not _KATAKANA.fullmatch(value):
            raise ValueError("the pronunciation must be katakana")
        return value

    @model_validator(mode="after")
    def _accent(self) -> UserDictWord:
        for name in ("pronunciation", "yomi", "part_of_speech", "stem", "accent_associative_rule"):
            if _UNSAFE.search(getattr(self, name)):
                raise ValueError(f"{name} holds a line break, a comma or a double quote")
        moras = mora_count(self.pronunciation)
        self.mora_count = moras
        if not 0 <= self.accent_type <= moras:
            raise ValueError(f"accent_type {self.accent_type} is outside 0..{moras} (the pronunciation's moras)")
        return self


def new_word(surface: str, pronunciation: str, accent_type: int, word_type: WordType, priority: int) -> UserDictWord:
    """A word from the query parameters, as VOICEVOX ENGINE fills in the rest; 422 if it is bad."""
    pos, detail_1, detail_2, detail_3, context_id = _PARTS_OF_SPEECH[word_type]
    try:
        return UserDictWord(
            surface=surface,
            priority=priority,
            context_id=context_id,
            part_of_speech=pos,
            part_of_speech_detail_1=detail_1,
            part_of_speech_detail_2=detail_2,
            part_of_speech_detail_3=detail_3,
            inflectional_type="*",
            inflectional_form="*",
            stem="*",
            yomi=pronunciation,
            pronunciation=pronunciation,
            accent_type=accent_type,
            accent_associative_rule="*",
        )
    except ValidationError as e:
        raise HTTPException(422, detail=_described(e)) from None


def _described(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'word'}: {e['msg']}" for e in error.errors())


Surface = Annotated[str, Query(description="The word as written.")]
Pronunciation = Annotated[str, Query(description="Its reading in katakana.")]
AccentType = Annotated[int, Query(description="The mora after which the pitch falls (0: flat).")]
WordTypeQuery = Annotated[WordType, Query(description="Its part of speech (kept; every word is read as a noun).")]
Priority = Annotated[int, Query(ge=MIN_PRIORITY, le=MAX_PRIORITY, description="0 to 10 (kept; every word wins).")]


async def word_of_query(
    surface: Surface,
    pronunciation: Pronunciation,
    accent_type: AccentType,
    word_type: WordTypeQuery = WordType.PROPER_NOUN,
    priority: Priority = DEFAULT_PRIORITY,
) -> UserDictWord:
    """The word the query parameters of ``POST`` and ``PUT /user_dict_word`` describe (no I/O: async,
    so no thread is taken for it)."""
    return new_word(surface, pronunciation, accent_type, word_type, priority)


WordDep = Annotated[UserDictWord, Depends(word_of_query)]
WordUuid = Annotated[str, Path(description="The word's uuid.")]


@router.get("/user_dict", summary="The tenant's user dictionary words, by uuid")
def get_user_dict(state: StateDep, tenant: TenantDep) -> dict[str, UserDictWord]:
    words = state.stores.voicevox_words.words(tenant.id)
    return {key: UserDictWord.model_validate(value) for key, value in words.items()}


@router.post("/user_dict_word", summary="Add a word; answers its uuid")
async def add_word(state: StateDep, tenant: TenantDep, word: WordDep) -> str:
    key = str(uuid.uuid4())
    await run_in_threadpool(_change, state, tenant.id, {key: word}, None, False)
    return key


@router.put("/user_dict_word/{word_uuid}", status_code=204, response_class=Response, summary="Replace a word")
async def rewrite_word(word_uuid: WordUuid, state: StateDep, tenant: TenantDep, word: WordDep) -> Response:
    await run_in_threadpool(_change, state, tenant.id, {word_uuid: word}, None, True)
    return Response(status_code=204)


@router.delete("/user_dict_word/{word_uuid}", status_code=204, response_class=Response, summary="Delete a word")
async def delete_word(word_uuid: WordUuid, state: StateDep, tenant: TenantDep) -> Response:
    await run_in_threadpool(_change, state, tenant.id, {}, word_uuid, True)
    return Response(status_code=204)


@router.post("/import_user_dict", status_code=204, response_class=Response, summary="Import words by uuid")
async def import_user_dict(
    state: StateDep,
    tenant: TenantDep,
    words: Annotated[dict[str, UserDictWord], Body(description="Words by uuid, as GET /user_dict answers.")],
    override: Annotated[bool, Query(description="Replace words whose uuid is already there.")],
) -> Response:
    for key in words:
        _check_uuid(key)
    await run_in_threadpool(_import, state, tenant.id, words, override)
    return Response(status_code=204)


def _check_uuid(key: str) -> None:
    try:
        uuid.UUID(key)
    except ValueError:
        raise HTTPException(422, detail=f"{key!r} is not a uuid") from None


def _change(state: AppState, tenant: str, put: dict[str, UserDictWord], delete: str | None, existing: bool) -> None:
    """Put words (``existing``: only over words already there) or delete one, then rewrite the lexicon."""
    with state.stores.voicevox_words.change(tenant) as words:
        for key in [*put, *([delete] if delete else [])]:
            if existing and key not in words:
                raise HTTPException(422, detail=f"no word with uuid {key!r}")
        words.update({key: word.model_dump() for key, word in put.items()})
        if delete is not None:
            del words[delete]
        _publish(state, tenant, words)


def _import(state: AppState, tenant: str, imported: dict[str, UserDictWord], override: bool) -> None:
    with state.stores.voicevox_words.change(tenant) as words:
        for key, word in imported.items():
            if override or key not in words:
                words[key] = word.model_dump()
        _publish(state, tenant, words)


def _publish(state: AppState, tenant: str, words: Words) -> None:
    """Rewrite the ``userdict`` lexicon from the words (delete it when none are left); 422 if the
    lexicon cannot be stored (its limits, the tenant's number of lexicons)."""
    store = state.stores.lexicons
    if not words:
        with suppress(LexiconNotFound):
            store.delete(tenant, USER_DICTIONARY)
        return
    ordered = sorted((UserDictWord.model_validate(word) for word in words.values()), key=lambda w: -w.priority)
    entries = [{"graphemes": [w.surface], "reading": w.pronunciation, "accent": w.accent_type} for w in ordered]
    data = {"language": USER_DICTIONARY_LANGUAGE, "entries": entries}
    document = json.dumps(data, ensure_ascii=False).encode()
    settings = state.settings
    limits = LexiconLimits(max_entries=settings.lexicon_max_entries, max_bytes=settings.lexicon_max_bytes)
    try:
        if len(document) > limits.max_bytes:
            raise InvalidLexicon(f"the dictionary would be {len(document)} bytes; at most {limits.max_bytes}")
        lexicon = parse_json_lexicon(data, limits)
        check_storable(lexicon, state.catalog)
        store.put(tenant, USER_DICTIONARY, document, "application/json", lexicon, settings.lexicons_per_tenant)
    except (InvalidLexicon, LexiconRefused) as e:
        raise HTTPException(422, detail=str(e)) from None
