"""Child processes that stop cleanly: own process group, killed with their parent, TERM then KILL.

What starts one again when it dies is ``cli.supervisor``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: deliver SIGTERM to the child if its parent dies, so a killed ``ttsq dev`` leaves no orphans."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different TCP ports nobody listens on right now: each stays bound until all are
    picked, so no two are the same (separate :func:`free_port` calls may return one port twice)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket())
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


class ServiceExited(RuntimeError):
    """The process a wait was for exited before it was ready."""


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, process: ManagedProcess | None = None) -> None:
    """Poll ``check`` until it is true; fail early if ``process`` exits meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and not process.alive:
            raise ServiceExited(f"{what}: process exited with code {process.returncode}; see {process.log_path}")
        try:
            if check():
                return
        except Exception:  # not up yet: connection refused, timeouts, 5xx...
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s" + (f"; see {process.log_path}" if process else ""))


class ManagedProcess:
    """A child in its own session (so Ctrl-C reaches only the supervisor) with output to a log file."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path | None, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._stopped = False

    def start(self) -> ManagedProcess:
        """Start the command; again after :meth:`stop`, as a new process with the same command line."""
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log else None,
            env=self.env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._stopped = False
        return self

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a worker and its pool children alike); nothing once stopped."""
        if self._process is not None and not self._stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the group, wait, then SIGKILL whatever is left of it. A second call does nothing (its
        pid, reaped, may belong to another process by then)."""
        if self._process is None or self._stopped:
            return
        if self.alive:
            self.kill(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout_s)
        self.kill(signal.SIGKILL)
        self._process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._stopped = True
