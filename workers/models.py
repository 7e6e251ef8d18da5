"""The models a worker process holds: loaded once per model (voices that share weights share the
load), loaded without blocking lookups of other models, and evicted least recently used first when
there are more than the budget allows.

A model is known by its key (``SpeechEngine.model_key``): Kokoro's five Japanese voices are one key,
each Piper voice its own. A voice of a loaded model is made from it without loading
(``SpeechEngine.with_voice``). A model is in use while a caller holds it (:meth:`LoadedModels.using`,
around an inference call and the wait for it); a model in use or pinned (the default and preloaded
voices) is never evicted, so a budget smaller than the models in use is exceeded until they are
released, never by unloading a model under a running call.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

M = TypeVar("M")


@dataclass(frozen=True)
class ModelEvents:
    """Told of loads and evictions (the worker's metrics); each gets the model key."""

    loaded: Callable[[str], None]
    evicted: Callable[[str], None]
    count: Callable[[int], None]
    """Told the number of models held after every change."""


class LoadedModels(Generic[M]):
    """Voices by voice id, over models by key, with a budget of models and LRU eviction."""

    def __init__(
        self,
        load: Callable[[str], M],
        share: Callable[[M, str], M],
        key_of: Callable[[str], str],
        max_models: int,
        events: ModelEvents | None = None,
    ) -> None:
        """``load(voice_id)`` loads a voice's model; ``share(model, voice_id)`` makes the voice from a
        loaded model of the same key; ``key_of(voice_id)`` names the model a voice needs."""
        if max_models < 1:
            raise ValueError("max_models must be at least 1")
        self._load = load
        self._share = share
        self._key_of = key_of
        self.max_models = max_models
        self._events = events
        self._lock = threading.Lock()
        self._models: OrderedDict[str, M] = OrderedDict()
        """Loaded models, least recently used first."""
        self._voices: dict[str, tuple[str, M]] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._in_use: Counter[str] = Counter()
        self._pinned: set[str] = set()

    def get(self, voice_id: str) -> M:
        """The voice, loading its model on first use; only a caller of the same model waits for a load."""
        key = self._key_of(voice_id)
        with self._lock:
            if (known := self._known(voice_id, key)) is not None:
                return known
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                if (known := self._known(voice_id, key)) is not None:
                    return known
                model = self._models.get(key)
            if model is None:
                voice = self._load(voice_id)
                with self._lock:
                    self._models[key] = voice
                    self._voices[voice_id] = (key, voice)
                    evicted = self._evict()
                self._tell_loaded(key, evicted)
                return voice
            voice = self._share(model, voice_id)
            with self._lock:
                if key in self._models:  # not evicted meanwhile
                    self._models.move_to_end(key)
                    self._voices[voice_id] = (key, voice)
            return voice

    def _known(self, voice_id: str, key: str) -> M | None:
        entry = self._voices.get(voice_id)
        if entry is None:
            return None
        self._models.move_to_end(key)
        return entry[1]

    @contextmanager
    def using(self, voice_id: str) -> Iterator[M]:
        """The voice, its model kept loaded until the block ends."""
        key = self._key_of(voice_id)
        with self._lock:
            self._in_use[key] += 1
        try:
            yield self.get(voice_id)
        finally:
            with self._lock:
                self._in_use[key] -= 1
                if self._in_use[key] == 0:
                    del self._in_use[key]
                evicted = self._evict()
            self._tell_evicted(evicted)

    def pin(self, voice_ids: Iterable[str]) -> None:
        """Never evict these voices' models (the default and preloaded voices)."""
        with self._lock:
            self._pinned.update(self._key_of(v) for v in voice_ids)

    def loaded(self) -> list[str]:
        """Keys of the models held, least recently used first."""
        with self._lock:
            return list(self._models)

    def _evict(self) -> list[str]:
        """Drop least recently used models, neither pinned nor in use, down to the budget (caller
        holds the lock); returns their keys."""
        evicted: list[str] = []
        over = len(self._models) - self.max_models
        for key in list(self._models):
            if over <= 0:
                break
            if key in self._pinned or self._in_use[key] > 0:
                continue
            del self._models[key]
            for voice_id in [v for v, (k, _) in self._voices.items() if k == key]:
                del self._voices[voice_id]
            evicted.append(key)
            over -= 1
        return evicted

    def _tell_loaded(self, key: str, evicted: list[str]) -> None:
        if self._events is not None:
            self._events.loaded(key)
        self._tell_evicted(evicted, always=True)

    def _tell_evicted(self, evicted: list[str], always: bool = False) -> None:
        for key in evicted:
            log.info("evicted model %s (least recently used, %d models held)", key, len(self._models))
        if self._events is None:
            return
        for key in evicted:
            self._events.evicted(key)
        if evicted or always:
            self._events.count(len(self._models))
