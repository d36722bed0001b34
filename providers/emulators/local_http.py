"""The HTTP plumbing an emulator needs, apart from its cloud's protocol: a local threaded server.

``LocalServer`` listens on 127.0.0.1 and hands every request to ``answer(request)``,
which returns an ``Answer`` (status, headers, body) or ``None`` for "the answer is
lost": the connection then closes without a byte, which is how a client sees a call
that took effect but whose response never arrived. It keeps connections alive (SDK
sessions reuse them), turns Nagle off (a kept-alive answer otherwise waits ~40 ms for
the client's delayed ACK) and closes the connections still held when it stops, so
their handler threads end with it.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self
from urllib.parse import urlsplit

__all__ = ["LISTEN_HOST", "Answer", "LocalServer", "Request", "Served"]

LISTEN_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Request:
    """One request as it arrived: header names lower-cased, the path without its query."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


class _Listening(Protocol):
    @property
    def port(self) -> int: ...

    def close(self) -> None: ...


class Served:
    """An emulator's lifetime over the server it keeps in ``_server``: its port, ``close`` and ``with``."""

    _server: _Listening

    @property
    def port(self) -> int:
        return self._server.port

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalServer:
    """A ThreadingHTTPServer on 127.0.0.1 (``port`` 0: the OS picks) that calls ``answer`` per request."""

    def __init__(self, answer: Callable[[Request], Answer | None], *, port: int = 0, name: str = "emulator") -> None:
        self._server = _Server((LISTEN_HOST, port), _Handler, answer)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.drop_connections()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 answer: Callable[[Request], Answer | None]) -> None:
        self.answer = answer
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops its kept-alive connection (after a lost answer, or at exit) is not an
        # emulator fault: say nothing. Anything else is printed as the stdlib does.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, open_: bool) -> None:
        with self._open_lock:
            (self._open.add if open_ else self._open.discard)(conn)

    def drop_connections(self) -> None:
        with self._open_lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle kept-alive connection closes and frees its thread
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        target = urlsplit(self.path)
        request = Request(self.command, target.path or "/", target.query,
                          {k.lower(): v for k, v in self.headers.items()}, body)
        outcome = self.server.answer(request)
        if outcome is None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.send_response(outcome.status)
        for name, value in outcome.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(outcome.body)))
        self.end_headers()
        if outcome.body:
            self.wfile.write(outcome.body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the tests' own assertions say what matters; per-request lines are noise
