"""One-thread twins of a worker's loaded models, for inference calls that run beside another.

On 2 CPU cores, two calls at once that each keep to one ONNX Runtime thread do about 16 % more than
one call at a time on the worker's own session with two threads, while two calls on that two-thread
session gain nothing and a lone call on one thread takes 68 % longer (docs/PERFORMANCE.md, "Two
calls at once"; for Kokoro, 11 % more: "Kokoro's twin"). So a lone call keeps the model's own
session, and a call that begins beside another runs on the model's twin: a second session of the same
model with one thread, which serves every such call at once. A twin is loaded in the background the
first time two calls of its model meet (the call that asked goes on the model's own session
meanwhile), and dropped with its model."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tts_core.voices.engines import SpeechModel

log = logging.getLogger(__name__)

LoadTwin = Callable[[str], SpeechModel]
"""Loads a voice's model on one thread."""
ShareModel = Callable[[SpeechModel, str], SpeechModel]
"""Makes another voice of a loaded model (a style or speaker of it) without loading."""


class TwinSessions:
    """Twins by model, each made once and served to every voice of its model."""

    def __init__(self, load: LoadTwin, share: ShareModel) -> None:
        self._load = load
        self._share = share
        self._lock = threading.Lock()
        self._twins: dict[str, SpeechModel] = {}
        self._voices: dict[str, tuple[str, SpeechModel]] = {}
        self._loading: set[str] = set()
        self._failed: set[str] = set()
        self._generation: dict[str, int] = {}

    def get(self, model_key: str, voice_id: str) -> SpeechModel | None:
        """The voice on its model's twin; None while the twin is not loaded (its load is started
        here the first time)."""
        with self._lock:
            known = self._voices.get(voice_id)
            if known is not None and known[0] == model_key:
                return known[1]
            twin = self._twins.get(model_key)
            if twin is None:
                if model_key not in self._loading and model_key not in self._failed:
                    self._loading.add(model_key)
                    generation = self._generation.get(model_key, 0)
                    threading.Thread(
                        target=self._load_in_background,
                        args=(model_key, voice_id, generation),
                        name="ttsq-twin-load",
                        daemon=True,
                    ).start()
                return None
        voice = self._share(twin, voice_id)
        with self._lock:
            if self._twins.get(model_key) is twin:
                self._voices[voice_id] = (model_key, voice)
        return voice

    def drop(self, model_key: str) -> None:
        """Forget the model's twin (its model was evicted); a load under way is not kept."""
        with self._lock:
            self._generation[model_key] = self._generation.get(model_key, 0) + 1
            self._twins.pop(model_key, None)
            self._failed.discard(model_key)
            for voice_id in [v for v, (key, _) in self._voices.items() if key == model_key]:
                del self._voices[voice_id]

    def loaded(self) -> list[str]:
        """Models whose twin is loaded."""
        with self._lock:
            return sorted(self._twins)

    def loading(self) -> list[str]:
        """Models whose twin is loading now."""
        with self._lock:
            return sorted(self._loading)

    def _load_in_background(self, model_key: str, voice_id: str, generation: int) -> None:
        started = time.perf_counter()
        try:
            twin = self._load(voice_id)
        except Exception:
            log.exception("the one-thread twin of model %s did not load; its calls keep its own session", model_key)
            with self._lock:
                self._loading.discard(model_key)
                self._failed.add(model_key)
            return
        with self._lock:
            self._loading.discard(model_key)
            if self._generation.get(model_key, 0) != generation:
                return  # its model was evicted meanwhile
            self._twins[model_key] = twin
            self._voices[voice_id] = (model_key, twin)
        log.info("loaded the one-thread twin of model %s in %.1fs", model_key, time.perf_counter() - started)
