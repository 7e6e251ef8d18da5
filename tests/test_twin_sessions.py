"""The one-thread twins of loaded models with plain data: loaded once in the background, shared by
a model's voices, dropped with their model, never kept from a load its model's eviction overtook."""

from __future__ import annotations

import threading
from typing import cast

import pytest

from cli.processes import wait_until
from tts_core.voices.engines import SpeechModel
from workers.twin_sessions import TwinSessions


class Loads:
    """A loader whose loads each wait for ``go`` and return a fresh marker object per voice."""

    def __init__(self, fail: bool = False) -> None:
        self.asked: list[str] = []
        self.go = threading.Event()
        self.fail = fail

    def __call__(self, voice_id: str) -> SpeechModel:
        self.asked.append(voice_id)
        assert self.go.wait(10)
        if self.fail:
            raise RuntimeError("no memory for a second session")
        return cast(SpeechModel, f"twin of {voice_id}")


def share(model: SpeechModel, voice_id: str) -> SpeechModel:
    return cast(SpeechModel, f"{model} as {voice_id}")


def test_a_twin_loads_once_in_the_background_then_serves_every_voice_of_its_model() -> None:
    loads = Loads()
    twins = TwinSessions(loads, share)
    assert twins.get("kokoro", "alpha") is None  # its load starts; the caller goes on without it
    assert twins.get("kokoro", "kumo") is None  # no second load while one is under way
    loads.go.set()
    wait_until(lambda: twins.loaded() == ["kokoro"], 10, "the twin loaded")
    assert str(twins.get("kokoro", "alpha")) == "twin of alpha"
    assert str(twins.get("kokoro", "kumo")) == "twin of alpha as kumo"
    assert loads.asked == ["alpha"]


def test_a_twin_goes_with_its_model() -> None:
    loads = Loads()
    loads.go.set()
    twins = TwinSessions(loads, share)
    twins.get("joe", "joe")
    wait_until(lambda: twins.loaded() == ["joe"], 10, "the twin loaded")
    twins.drop("joe")
    assert twins.loaded() == []
    assert twins.get("joe", "joe") is None  # loaded again when asked again
    wait_until(lambda: twins.loaded() == ["joe"], 10, "the twin loaded again")
    assert loads.asked == ["joe", "joe"]


def test_a_load_overtaken_by_its_models_eviction_is_not_kept() -> None:
    loads = Loads()
    twins = TwinSessions(loads, share)
    twins.get("joe", "joe")
    twins.drop("joe")  # evicted while its twin loads
    loads.go.set()
    wait_until(lambda: not twins.loading(), 10, "the load ended")
    assert twins.loaded() == []


def test_a_twin_that_fails_to_load_is_not_tried_again_until_its_model_is(caplog: pytest.LogCaptureFixture) -> None:
    loads = Loads(fail=True)
    loads.go.set()
    twins = TwinSessions(loads, share)
    twins.get("joe", "joe")
    wait_until(lambda: not twins.loading(), 10, "the load ended")
    assert twins.get("joe", "joe") is None
    assert loads.asked == ["joe"]
    assert "did not load" in caplog.text
    twins.drop("joe")
    twins.get("joe", "joe")
    wait_until(lambda: len(loads.asked) == 2, 10, "a new load after the model came back")
