"""A scripted webhook receiver for the tests: a real HTTP server in a thread."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG_S = 5.0
"""How long a ``hang`` answer keeps the sender waiting: longer than any test's delivery timeout."""

Answer = int | str | tuple[int, dict[str, str]]


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)


class Receiver:
    """A real HTTP server on loopback answering each path with a script of answers (the last one
    repeats): a status, a (status, headers) pair, or ``hang``: no answer within any sender's timeout."""

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
                    script = receiver.scripts.get(self.path, [200])
                    answer = script.pop(0) if len(script) > 1 else script[0]
                if answer == "hang":
                    time.sleep(HANG_S)
                    return
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
