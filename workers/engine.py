"""The voices a worker process holds: loaded once, after fork, and warmed up before taking jobs."""

from __future__ import annotations

import logging
import os
import threading
import time

from tts_core import SynthesisConfig, Voice, VoiceCatalog
from ttsq.settings import Settings, get_settings

log = logging.getLogger(__name__)

_WARM_UP_TEXT = "Warming up."


class Engine:
    """Loaded voices of this process, keyed by voice id; loading is serialised by a lock."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.catalog = VoiceCatalog.discover(settings.voices_dir)
        self._voices: dict[str, Voice] = {}
        self._lock = threading.Lock()

    def voice(self, voice_id: str) -> Voice:
        """The loaded voice, loading it on first use."""
        with self._lock:
            loaded = self._voices.get(voice_id)
            if loaded is None:
                loaded = self._load(voice_id)
                self._voices[voice_id] = loaded
            return loaded

    def _load(self, voice_id: str) -> Voice:
        info = self.catalog.get(voice_id)
        started = time.perf_counter()
        worker = self._settings.worker
        voice = Voice.load(info.model_path, info.config_path, worker.device, worker.intra_op_threads)
        voice.speak(_WARM_UP_TEXT, SynthesisConfig())
        log.info(
            "loaded voice %s on %s in %.1fs (pid %d)",
            voice_id,
            voice.providers[0],
            time.perf_counter() - started,
            os.getpid(),
        )
        return voice

    def warm_up(self) -> None:
        """Load the default voice and any configured to preload."""
        for voice_id in dict.fromkeys([self._settings.default_voice, *self._settings.worker.preload_voices]):
            self.voice(voice_id)


_engine: Engine | None = None
_engine_pid: int | None = None
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """This process's engine; a forked child never reuses its parent's sessions."""
    global _engine, _engine_pid
    with _engine_lock:
        if _engine is None or _engine_pid != os.getpid():
            _engine = Engine(get_settings())
            _engine_pid = os.getpid()
        return _engine
