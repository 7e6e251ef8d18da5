"""A TCP proxy in front of SeaweedFS's S3 port that can start refusing every request.

Passing through, it forwards bytes unchanged (request signatures name the proxy's own host, which
the store checks as sent) and counts the worker's rounds of checks it has seen answered (a round
ends with its test write, whose answer it relays last). Told to
:meth:`S3Proxy.refuse`, it closes every open connection and answers each request after that with
``403 AccessDenied``, as a store would that no longer accepts a worker's keys; :meth:`restore`
passes requests through again. Told to :meth:`refuse_writes`, it answers only the next uploads
(``PUT``) with 403 and passes everything else, the worker's checks (its bucket ``HEAD`` and, unless
told otherwise, its test write) included: a store that refused a job's write and changed its mind
before the worker looked, or one whose policy refuses some keys; refusing the test writes too, keys
that may read the bucket but not write to it.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Final

from cli.embedded import LOOPBACK
from cli.processes import free_port
from ttsq.constants import WORKER_CHECK_KEY_TEMPLATE

CHUNK: Final = 65536
CHECK_PATH: Final = b"/" + WORKER_CHECK_KEY_TEMPLATE.split("{", 1)[0].encode()
"""What the request line of a worker's test write contains (path-style: ``/<bucket>/tmp/...``)."""
DENIED: Final = b"<?xml version='1.0'?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"


class S3Proxy:
    """Forwards ``127.0.0.1:<port>`` to the store at ``upstream_port``, or refuses."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.checks = 0
        """Rounds of the worker's check answered so far: test writes whose answer was relayed. A
        count of forwarded requests would rise mid-round, and a refusal begun then would meet the
        round's test write instead of the tasks' writes."""
        self._refusing = False
        self._writes_to_refuse = 0
        self._spare_checks = True
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server((LOOPBACK, self.port))
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> S3Proxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        self._close_all()
        self._thread.join(5)

    def refuse(self) -> None:
        """Answer every request from now on with 403 (open connections are closed: the client's
        next request comes on a new one)."""
        self._refusing = True
        self._close_all()

    def refuse_writes(self, count: int, spare_checks: bool = True) -> None:
        """Answer the next ``count`` uploads with 403, passing everything else (and the workers'
        test writes, :data:`ttsq.constants.WORKER_CHECK_KEY_TEMPLATE`, if ``spare_checks``)."""
        self._spare_checks = spare_checks
        self._writes_to_refuse = count

    def restore(self) -> None:
        self._refusing = False
        self._writes_to_refuse = 0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # stopped
                return
            with self._lock:
                self._open.add(client)
            target = self._deny if self._refusing else self._pump
            threading.Thread(target=target, args=(client,), daemon=True).start()

    def _deny(self, client: socket.socket, data: bytes = b"") -> None:
        """Read one request whole (its head and a body of ``Content-Length``; ``data`` is what was
        read of it already), answer 403, close."""
        try:
            while b"\r\n\r\n" not in data:
                chunk = client.recv(CHUNK)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = _content_length(head)
            while len(body) < length:
                chunk = client.recv(CHUNK)
                if not chunk:
                    return
                body += chunk
            client.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\n"
                + f"Content-Length: {len(DENIED)}\r\nConnection: close\r\n\r\n".encode()
                + DENIED
            )
        except OSError:
            return
        finally:
            self._close(client)

    def _pump(self, client: socket.socket) -> None:
        """Both directions of one connection, byte for byte."""
        try:
            upstream = socket.create_connection((LOOPBACK, self.upstream_port))
        except OSError:
            self._close(client)
            return
        with self._lock:
            self._open.add(upstream)
        check_sent = False
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [])
                if client in readable:
                    data = client.recv(CHUNK)
                    if not data:
                        return
                    if data.startswith(b"PUT ") and self._take_write_refusal(data):
                        self._deny(client, data)
                        return
                    check_sent = check_sent or _is_check_write(data)
                    upstream.sendall(data)
                if upstream in readable:
                    data = upstream.recv(CHUNK)
                    if not data:
                        return
                    client.sendall(data)
                    if check_sent and data.startswith(b"HTTP/"):
                        check_sent = False
                        self.checks += 1
        except OSError:
            return
        finally:
            self._close(client, upstream)

    def _take_write_refusal(self, request: bytes) -> bool:
        if self._spare_checks and _is_check_write(request):
            return False
        with self._lock:
            if self._writes_to_refuse <= 0:
                return False
            self._writes_to_refuse -= 1
            return True

    def _close(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with self._lock:
                self._open.discard(sock)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _close_all(self) -> None:
        with self._lock:
            sockets = list(self._open)
        self._close(*sockets)


def _is_check_write(request: bytes) -> bool:
    """Whether ``request`` (its first bytes) is a worker's test write."""
    return request.startswith(b"PUT ") and CHECK_PATH in request.split(b"\r\n", 1)[0]


def _content_length(head: bytes) -> int:
    """The ``Content-Length`` of a request's head, 0 where it has none."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0
