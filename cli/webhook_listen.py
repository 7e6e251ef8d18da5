"""``ttsq webhook-listen``: a local receiver that verifies each event's signature and prints it.

For trying webhooks against ``ttsq dev`` (which allows private receivers and keeps its secret in
its data directory) and for checking a production secret by hand.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ttsq.webhook_signing import WebhookVerificationError, verify

MAX_BODY_BYTES = 1024 * 1024


def describe(headers: dict[str, str], body: bytes, verdict: str) -> str:
    """One line per event: type, job, status, webhook id, and whether it verified."""
    try:
        event = json.loads(body)
        data = event.get("data", {})
        summary = f"{event.get('type')} job={data.get('id')} status={data.get('status')}"
    except (ValueError, AttributeError):
        summary = "unreadable body"
    return f"{summary} webhook-id={headers.get('webhook-id')} {verdict}"


class WebhookListener:
    """A threaded HTTP server on ``host:port`` answering 204 to verified events, 400 otherwise."""

    def __init__(
        self, keys: list[bytes], host: str = "127.0.0.1", port: int = 9000, echo: Callable[[str], Any] = print
    ) -> None:
        listener = self
        self.lines: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("content-length", 0) or 0), MAX_BODY_BYTES)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    verify(keys, headers, body)
                    status, verdict = 204, "verified"
                except WebhookVerificationError as e:
                    status, verdict = 400, f"REJECTED: {e}"
                line = describe(headers, body, verdict)
                listener.lines.append(line)
                echo(line)
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:  # one line per event is printed above
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://{host}:{self._server.server_address[1]}/"

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def start(self) -> WebhookListener:
        threading.Thread(target=self.serve_forever, name="webhook-listen", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
