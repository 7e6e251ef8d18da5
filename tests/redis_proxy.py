"""A TCP proxy in front of a real redis-server that can lose the answer to one write, or be slow.

Told to :meth:`RedisProxy.cut_after` some bytes (a job's unique text), it forwards the client's
command that carries them, lets Redis apply it and answer, throws the answer away and closes every
connection; until :meth:`RedisProxy.restore` it then closes each new connection at once, as a Redis
that went away would. The client sees a connection error after its write was applied: the lost
answer of issue 25.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import Final

from cli.embedded import LOOPBACK
from cli.processes import free_port

CHUNK: Final = 65536
QUIET_S: Final = 0.2
"""After the cut, the proxy reads Redis's answer until Redis has been quiet this long, so the write
is applied (and answered) before the connection is closed."""


class RedisProxy:
    """Forwards ``127.0.0.1:<port>`` to Redis at ``upstream``, byte for byte."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.cut = threading.Event()
        """Set once the armed command went through and its answer was thrown away."""
        self._marker: bytes | None = None
        self.delay_s = 0.0
        """Each command waits this long before it goes on to Redis: a slow Redis, every call seconds."""
        self._down = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server((LOOPBACK, self.port))
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def url(self, database: int) -> str:
        return f"redis://{LOOPBACK}:{self.port}/{database}"

    def start(self) -> RedisProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        self._close_all()
        self._thread.join(5)

    def cut_after(self, marker: bytes) -> None:
        """Lose the answer to the next command whose bytes hold ``marker``, then stay down."""
        self.cut.clear()
        self._marker = marker

    def go_down(self) -> None:
        """Close every connection and refuse new ones, with no write in flight: Redis went away."""
        self._down = True
        self._close_all()

    def restore(self) -> None:
        """Take connections again."""
        self._down = False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # stopped
                return
            if self._down:
                client.close()
                continue
            try:
                upstream = socket.create_connection((LOOPBACK, self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        """Both directions of one connection; the client's bytes are searched for the marker."""
        seen = b""
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [])
                if client in readable:
                    data = client.recv(CHUNK)
                    if not data:
                        return
                    if self.delay_s:
                        time.sleep(self.delay_s)
                    upstream.sendall(data)
                    marker = self._marker
                    seen = (seen + data)[-(len(marker) + CHUNK) :] if marker else b""
                    if marker and marker in seen:
                        self._marker = None
                        self._lose_answer(upstream)
                        return
                if upstream in readable:
                    data = upstream.recv(CHUNK)
                    if not data:
                        return
                    client.sendall(data)
        except OSError:
            return
        finally:
            self._close(client, upstream)

    def _lose_answer(self, upstream: socket.socket) -> None:
        """Read Redis's answer until it is quiet (the write is applied), then go down."""
        answered = False
        while True:
            readable, _, _ = select.select([upstream], [], [], QUIET_S)
            if not readable:
                if answered:
                    break
                continue
            if not upstream.recv(CHUNK):
                break
            answered = True
        self._down = True
        self.cut.set()  # before the close: the client may see it and ask at once
        self._close_all()

    def _close(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with self._lock:
                self._open.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()

    def _close_all(self) -> None:
        """Shut every connection down: each pump wakes to the end of its stream and closes its pair
        (closing a socket another thread waits on would not wake it)."""
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
