"""The worker's model cache (``workers.models``): one load per model, loads that block only their own
model, least-recently-used eviction that spares pinned models and models in use."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from workers.models import LoadedModels, ModelEvents


@dataclass
class Model:
    key: str
    voice: str


@dataclass
class Loader:
    """Loads a "model" per voice, keyed by the voice's prefix (``a/1`` and ``a/2`` share model ``a``)."""

    gate: dict[str, threading.Event] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)

    def load(self, voice_id: str) -> Model:
        key = self.key_of(voice_id)
        self.loads.append(key)
        if key in self.gate:
            assert self.gate[key].wait(10)
        return Model(key, voice_id)

    @staticmethod
    def share(model: Model, voice_id: str) -> Model:
        return Model(model.key, voice_id)

    @staticmethod
    def key_of(voice_id: str) -> str:
        return voice_id.split("/")[0]

    def cache(self, max_models: int) -> LoadedModels[Model]:
        events = ModelEvents(
            lambda k: self.events.append(("load", k)),
            lambda k: self.events.append(("evict", k)),
            self.counts.append,
        )
        return LoadedModels(self.load, self.share, self.key_of, max_models, events)


def test_voices_of_one_model_load_it_once() -> None:
    loader = Loader()
    models = loader.cache(4)
    first, second = models.get("kokoro/jf_alpha"), models.get("kokoro/jm_kumo")
    assert loader.loads == ["kokoro"]
    assert (first.voice, second.voice) == ("kokoro/jf_alpha", "kokoro/jm_kumo")
    assert models.get("kokoro/jm_kumo") is second
    assert models.loaded() == ["kokoro"]


def test_the_least_recently_used_model_goes_first() -> None:
    loader = Loader()
    models = loader.cache(2)
    models.get("a/1")
    models.get("b/1")
    models.get("a/2")  # a is now more recent than b
    models.get("c/1")
    assert models.loaded() == ["a", "c"]
    assert loader.events == [("load", "a"), ("load", "b"), ("load", "c"), ("evict", "b")]
    assert loader.counts[-1] == 2
    models.get("b/1")  # evicted: loaded again
    assert loader.loads == ["a", "b", "c", "b"]
    assert models.loaded() == ["c", "b"]


def test_pinned_models_and_models_in_use_are_never_evicted() -> None:
    loader = Loader()
    models = loader.cache(1)
    models.pin(["a/1"])
    models.get("a/1")
    with models.using("b/1") as b:
        models.get("c/1")  # over budget: a is pinned, b in use, so c (unused) goes
        assert b.key == "b"
        assert models.loaded() == ["a", "b"]
    assert models.loaded() == ["a"]  # b's use ended: back within what the pin allows
    assert ("evict", "a") not in loader.events
    assert [e for e in loader.events if e[0] == "evict"] == [("evict", "c"), ("evict", "b")]


def test_a_slow_load_blocks_only_callers_of_its_own_model() -> None:
    loader = Loader(gate={"slow": threading.Event()})
    models = loader.cache(4)
    models.get("fast/1")
    slow_done = threading.Event()
    waiter_done = threading.Event()

    def load_slow() -> None:
        models.get("slow/1")
        slow_done.set()

    def wait_for_slow() -> None:
        models.get("slow/2")  # the same model: waits for the load in progress, loads nothing itself
        waiter_done.set()

    threads = [threading.Thread(target=load_slow), threading.Thread(target=wait_for_slow)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while loader.loads.count("slow") < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    # While "slow" loads, another model's voices are answered and loaded.
    assert models.get("fast/2").key == "fast"
    assert models.get("other/1").key == "other"
    assert not slow_done.is_set()
    assert not waiter_done.is_set()
    loader.gate["slow"].set()
    for thread in threads:
        thread.join(5)
    assert slow_done.is_set()
    assert waiter_done.is_set()
    assert loader.loads.count("slow") == 1


def test_a_failed_load_leaves_nothing_behind_and_is_tried_again() -> None:
    attempts: list[str] = []

    def load(voice_id: str) -> Model:
        attempts.append(voice_id)
        if len(attempts) == 1:
            raise RuntimeError("disk hiccup")
        return Model("a", voice_id)

    models: LoadedModels[Model] = LoadedModels(load, Loader.share, Loader.key_of, 2)
    with pytest.raises(RuntimeError):
        models.get("a/1")
    assert models.loaded() == []
    assert models.get("a/1").voice == "a/1"
    assert attempts == ["a/1", "a/1"]


def test_a_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_models"):
        LoadedModels(Loader().load, Loader.share, Loader.key_of, 0)
