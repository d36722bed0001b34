"""An HTTP proxy between the daemon and one cloud emulator that SIGKILLs the daemon at a chosen call.

The daemon's GPUSCHED_<CLOUD>_ENDPOINT points here; every request is forwarded byte for byte (headers
included: Tencent signs the Host header) to the emulator and its answer relayed. When the ``Trap`` is
armed for a call (the cloud's action name: ``RunInstances``, ``StopInstances``, ``DeleteInstances``,
``TerminateInstances`` ...), the proxy kills the daemon

* ``before`` forwarding it: the request was sent, the cloud never acted (kill point (a)), or
* ``after`` the emulator acted and answered, before the answer reaches the daemon: the cloud acted and
  the daemon never learnt it (kill points (b) for a launch, (c) for a stop or a terminate).

The daemon is dead before the connection closes, so it cannot have seen the answer. Nothing in the
daemon is hooked: this is what a power cut at that instant looks like from the cloud's side.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

When = Literal["before", "after"]
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


@dataclass(frozen=True)
class Armed:
    life: int  # the daemon life it is meant for; a late call from an earlier life never fires it
    kind: str  # the name the kill is counted under
    actions: frozenset[str]
    when: When


class Trap:
    """One-shot: armed for one daemon life and a set of actions; the first matching call fires it.

    ``kill(kind, cloud, action)`` is the campaign's: it SIGKILLs the daemon, waits until it is gone and
    records the kill; it returns False when that life had already ended (then the call goes on as usual).
    """

    def __init__(self, kill: Callable[[int, str, str, str], bool]) -> None:
        self._kill = kill
        self._lock = threading.Lock()
        self._armed: Armed | None = None
        self.calls: dict[str, int] = {}  # action -> calls seen, all lives together

    def arm(self, life: int, kind: str, actions: set[str] | frozenset[str], when: When) -> None:
        with self._lock:
            self._armed = Armed(life, kind, frozenset(actions), when)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def take(self, action: str) -> Armed | None:
        """The armed trap if ``action`` fires it (and it is then disarmed), else None."""
        with self._lock:
            self.calls[action] = self.calls.get(action, 0) + 1
            armed = self._armed
            if armed is None or action not in armed.actions:
                return None
            self._armed = None
            return armed

    def fire(self, armed: Armed, cloud: str, action: str) -> bool:
        return self._kill(armed.life, armed.kind, cloud, action)


def action_of(cloud: str, path: str, headers: dict[str, str], body: bytes) -> str:
    """The cloud API action a request calls: Alibaba's ``Action`` parameter, Tencent's ``X-TC-Action``."""
    lower = {k.lower(): v for k, v in headers.items()}
    if "x-tc-action" in lower:
        return lower["x-tc-action"]
    params = dict(parse_qsl(urlsplit(path).query, keep_blank_values=True))
    if not params.get("Action") and body and lower.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    return params.get("Action", "")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A killed daemon resets its connections mid-request: that is the point, not an error."""


class KillProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` (``host:port``)."""

    def __init__(self, cloud: str, upstream: str, trap: Trap) -> None:
        self.cloud = cloud
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.trap = trap
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"kill-proxy-{cloud}", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def forward(self, method: str, path: str, headers: list[tuple[str, str]],
                body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
        """One request to the emulator on a fresh connection; None when it closed without an answer."""
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            answer = conn.getresponse()
            data = answer.read()
            return answer.status, answer.reason, answer.getheaders(), data
        except (http.client.HTTPException, OSError):
            return None  # the emulator dropped it (a lost answer): the daemon sees the same
        finally:
            conn.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler_for(proxy: KillProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            self._relay()

        def do_POST(self) -> None:
            self._relay()

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = list(self.headers.items())
            action = action_of(proxy.cloud, self.path, dict(headers), body)
            armed = proxy.trap.take(action)
            if armed is not None and armed.when == "before" and proxy.trap.fire(armed, proxy.cloud, action):
                self._drop()  # the daemon is dead; the cloud never heard of this call
                return
            answer = proxy.forward(self.command, self.path, headers, body)
            if armed is not None and armed.when == "after" and proxy.trap.fire(armed, proxy.cloud, action):
                self._drop()  # the cloud acted; the daemon died before it could read the answer
                return
            if answer is None:
                self._drop()
                return
            status, reason, answer_headers, data = answer
            self.send_response(status, reason)
            for name, value in answer_headers:
                if name.lower() not in HOP_BY_HOP and name.lower() not in ("content-length", "server", "date"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler
