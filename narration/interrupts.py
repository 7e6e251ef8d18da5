"""Ctrl-C taken where the narration can stop cleanly. A ``KeyboardInterrupt`` raised at an arbitrary
point can land inside the live display's refresh (rich holds its console and live locks there), and
a display left half-started can hang the process instead of stopping it. Inside :class:`Checkpoints`
a first Ctrl-C only asks to stop: the narration raises ``KeyboardInterrupt`` at its next checkpoint
(between polls, within a fraction of a second), where the display closes and the state is saved. A
second Ctrl-C interrupts at once. The handler takes no lock (``tts_core.base.stop_signal``): a Ctrl-C that
lands while the main thread waits in :meth:`Checkpoints.sleep` cannot wait for itself."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

from tts_core.base.stop_signal import SignalEvent


class Checkpoints:
    """A SIGINT handler for the duration of a ``with`` block (in the main thread; elsewhere Python
    keeps its own), and the checks that turn a pending Ctrl-C into ``KeyboardInterrupt``."""

    def __init__(self) -> None:
        self._asked = SignalEvent()
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> Checkpoints:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        self._asked.close()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._asked.is_set():
            raise KeyboardInterrupt
        self._asked.set()

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed."""
        if self._asked.is_set():
            raise KeyboardInterrupt

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if Ctrl-C is pressed meanwhile (then raise)."""
        self._asked.wait(seconds)
        self.check()
