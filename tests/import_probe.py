"""Imports every module of the service in this fresh interpreter and prints what importing did that it
must not: read the settings, open a connection, connect a Celery signal or an OS signal handler ("clean"
if nothing). Run by ``tests/test_import_state.py`` as ``python tests/import_probe.py ROOT [MODULE ...]``:
extra modules (found on ``sys.path``) are imported last and watched too, the test's check of the probe.
"""

from __future__ import annotations

import importlib
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGES = ("api", "workers", "ttsq", "tts_core", "cli", "narration")


def _ours(thing: object, watched: tuple[str, ...]) -> bool:
    return str(getattr(thing, "__module__", "") or "").split(".")[0] in watched


def _where() -> str:
    """The innermost line on the stack of code that is neither a library's nor this probe's."""
    frames = [
        frame
        for frame in traceback.extract_stack()[:-2]
        if not frame.filename.startswith("<")
        and "/lib/python3" not in frame.filename
        and "import_probe" not in frame.filename
    ]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def watch_settings(found: list[str]) -> None:
    import ttsq.settings

    settings_init = ttsq.settings.Settings.__init__

    def reading(self: Any, *args: Any, **kwargs: Any) -> None:
        found.append(f"settings read at {_where()}")
        settings_init(self, *args, **kwargs)

    ttsq.settings.Settings.__init__ = reading  # type: ignore[method-assign,assignment]
    get_settings = ttsq.settings.get_settings

    def getting() -> ttsq.settings.Settings:
        found.append(f"get_settings() at {_where()}")
        return get_settings()

    ttsq.settings.get_settings = getting  # type: ignore[assignment]


def watch_connections(found: list[str]) -> None:
    socket_connect = socket.socket.connect

    def connecting(self: socket.socket, address: Any) -> None:
        found.append(f"connection to {address} at {_where()}")
        socket_connect(self, address)

    socket.socket.connect = connecting  # type: ignore[method-assign,assignment]


def watch_signals(watched: tuple[str, ...], found: list[str]) -> None:
    from celery.utils.dispatch.signal import Signal

    signal_connect = Signal.connect

    def connect(self: Signal, *args: Any, **kwargs: Any) -> Any:
        def note(receiver: Callable[..., Any]) -> None:
            if _ours(receiver, watched):
                name = getattr(self, "name", "?")
                found.append(f"signal {name} connected to {receiver.__module__}.{receiver.__qualname__}")

        if args and callable(args[0]):
            note(args[0])
            return signal_connect(self, *args, **kwargs)
        decorate = signal_connect(self, *args, **kwargs)

        def noting(receiver: Callable[..., Any]) -> Any:
            note(receiver)
            return decorate(receiver)

        return noting

    Signal.connect = connect  # type: ignore[method-assign]
    os_signal = signal.signal

    def handling(number: int, handler: Any) -> Any:
        if _ours(handler, watched):
            found.append(f"OS signal {number} handled by {handler.__module__}")
        return os_signal(number, handler)

    signal.signal = handling  # type: ignore[assignment]


def service_modules(root: Path) -> list[str]:
    names = ["celeryconfig"]
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def main() -> None:
    root, extra = Path(sys.argv[1]), sys.argv[2:]
    sys.path.insert(0, str(root))
    watched = (*PACKAGES, "celeryconfig", *(name.split(".")[0] for name in extra))
    found: list[str] = []
    watch_settings(found)
    watch_connections(found)
    watch_signals(watched, found)
    for name in [*service_modules(root), *extra]:
        importlib.import_module(name)
    print("\n".join(found) or "clean")


if __name__ == "__main__":
    main()
