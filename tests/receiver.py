"""Webhook receivers for the tests: a scripted HTTP server in a thread, and raw TCP servers that
misbehave (never answer, trickle, answer without end)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG_S = 5.0
"""How long a ``hang`` answer keeps the sender waiting: longer than any test's delivery timeout."""

SLOW_S = 0.5
"""How long a ``slow`` answer (a 200) takes: well within any test's delivery timeout."""

Answer = int | str | tuple[int, dict[str, str]]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)


class Receiver:
    """A real HTTP server on loopback answering each path (whatever its query) with a script of answers
    (the last one repeats): a status, a (status, headers) pair, ``slow`` (200 after ``SLOW_S``) or ``hang``: no
    answer within any sender's timeout."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.scripts: dict[str, list[Answer]] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver._lock:
                    receiver.received.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    script = receiver.scripts.get(self.path.partition("?")[0], [200])
                    answer = script.pop(0) if len(script) > 1 else script[0]
                if answer == "hang":
                    time.sleep(HANG_S)
                    return
                if answer == "slow":
                    time.sleep(SLOW_S)
                    answer = 200
                status, headers = answer if isinstance(answer, tuple) else (int(answer), {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def path(self, *script: Answer) -> str:
        """A fresh path answering with ``script``; returns its full URL."""
        name = f"/{uuid.uuid4().hex}"
        self.scripts[name] = list(script)
        return self.url + name

    def at(self, url: str) -> list[Received]:
        path = "/" + url.split("/", 3)[3]
        with self._lock:
            return [r for r in self.received if r.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RawReceiver:
    """A TCP server on loopback whose every connection is handed to ``behave(connection, closing)``
    in a thread of its own: the receivers no HTTP server library would be (one that never answers,
    one that trickles, one that answers without end). ``closing`` is set by :meth:`close`."""

    def __init__(self, behave: Callable[[socket.socket, threading.Event], None]) -> None:
        self.accepted = 0
        self._behave = behave
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._closing.is_set():  # accepted just as the server closed
                    connection.close()
                    return
                self.accepted += 1
                self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError), connection:
            self._behave(connection, self._closing)

    def close(self) -> None:
        """Stop listening and drop every connection (a sender's attempts then fail at once)."""
        with self._lock:
            self._closing.set()
            self._listener.close()
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.close()


def read_request(connection: socket.socket) -> bytes:
    """The request's head and body, read as far as its content-length says."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
    length = int({name.strip().lower(): value for name, value in fields.items()}.get(b"content-length", b"0"))
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def never_answers(connection: socket.socket, closing: threading.Event) -> None:
    """Accepts the connection, and then neither reads nor answers."""
    closing.wait()


def trickles(connection: socket.socket, closing: threading.Event) -> None:
    """Reads the request, then sends a status line and headers that never end, a byte at a time."""
    read_request(connection)
    connection.sendall(b"HTTP/1.1 200 OK\r\n")
    while not closing.wait(0.1):
        connection.sendall(b"x")


def answers_with(body_bytes: int) -> Callable[[socket.socket, threading.Event], None]:
    """Reads the request, then answers 200 with a body of ``body_bytes`` (one buffer, shared by every
    connection), as fast as the sender reads."""
    body = memoryview(bytes(body_bytes))

    def answer(connection: socket.socket, closing: threading.Event) -> None:
        read_request(connection)
        connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n" % body_bytes)
        connection.sendall(body)
        connection.close()

    return answer
