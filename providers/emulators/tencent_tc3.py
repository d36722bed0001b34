"""What every Tencent Cloud API 3.0 service shares, for the emulators that speak one: TC3-HMAC-SHA256,
the error shape, and the HTTP server.

The CVM emulator (``tencent_cvm``) and the billing emulator (``tencent_billing``) are two services behind
one protocol, so the protocol's part lives here once:

* ``Tc3Verifier`` checks a request exactly: ``POST /``, an ``Authorization`` header
  ``TC3-HMAC-SHA256 Credential=ID/DATE/SERVICE/tc3_request, SignedHeaders=..., Signature=...`` that signs
  at least content-type and host, a known SecretId, an ``X-TC-Timestamp`` within five minutes of the wall
  clock (the SDK stamps requests with real time), a credential scope naming that day and this service, and
  the signature over the canonical request (header names and values lower-cased and trimmed, the hashed
  payload, or ``UNSIGNED-PAYLOAD`` when the client says so) under the key chain
  HMAC("TC3" + secret, date) -> service -> "tc3_request".
* ``ApiError``: ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``, HTTP 200 (a throttling
  answer may carry ``retry_after``, sent as ``Retry-After``).
* ``api3_handler``: the request handler. ``handle`` gives the JSON body (HTTP 200 with
  ``Content-Type: application/json`` and nothing after it: the SDK only recognises an error body under
  exactly that type) or an ``Api3Reply`` (another status, content type or extra headers: a gateway's
  503 page, ``Retry-After``); ``DropConnection`` closes the connection without an answer.
* ``Api3Server``: the threaded server, quiet about clients that drop their kept-alive connections.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from scheduler.clock import Clock, SystemClock

__all__ = [
    "ALGORITHM",
    "JSON_TYPE",
    "SIGNATURE_TTL",
    "UNSIGNED_PAYLOAD",
    "Api3Reply",
    "Api3Server",
    "ApiError",
    "DropConnection",
    "Tc3Verifier",
    "api3_handler",
    "canonical_request",
    "string_to_sign",
    "tc3_signature",
]

ALGORITHM = "TC3-HMAC-SHA256"
JSON_TYPE = "application/json"
SIGNATURE_TTL = timedelta(minutes=5)  # Tencent Cloud refuses a timestamp further off than this
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"

_AUTHORIZATION = re.compile(
    r"^TC3-HMAC-SHA256 Credential=(?P<secret_id>[^/\s,]+)/(?P<date>\d{4}-\d{2}-\d{2})/(?P<service>[a-z0-9]+)"
    r"/tc3_request, SignedHeaders=(?P<signed>[a-z0-9\-;]+), Signature=(?P<signature>[0-9a-f]{64})$"
)


class ApiError(Exception):
    """One API 3.0 error answer: ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``."""

    def __init__(self, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after = retry_after  # seconds, sent as Retry-After (throttling answers)


class DropConnection(Exception):
    """The call took effect but its answer is lost: close the connection without one."""


@dataclass(frozen=True)
class Api3Reply:
    """One HTTP answer: status, body, content type and any extra headers (``Retry-After``)."""

    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: Mapping[str, str] = field(default_factory=dict)


def canonical_request(
    method: str, path: str, query: str, headers: Mapping[str, str], signed: Sequence[str], payload_hash: str
) -> str:
    """The canonical request of TC3: header names and values lower-cased and trimmed."""
    lines = "".join(f"{name}:{headers.get(name, '').strip().lower()}\n" for name in signed)
    return f"{method}\n{path}\n{query}\n{lines}\n{';'.join(signed)}\n{payload_hash}"


def string_to_sign(timestamp: int, date: str, service: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{timestamp}\n{date}/{service}/tc3_request\n{digest}"


def tc3_signature(secret_key: str, date: str, service: str, to_sign: str) -> str:
    """Hex HMAC-SHA256 of ``to_sign`` under the key chain ("TC3" + secret, date) -> service -> "tc3_request"."""
    key = hmac.new(f"TC3{secret_key}".encode(), date.encode("utf-8"), hashlib.sha256).digest()
    key = hmac.new(key, service.encode("utf-8"), hashlib.sha256).digest()
    key = hmac.new(key, b"tc3_request", hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


class Tc3Verifier:
    """Checks one request's TC3 signature for ``service``. ``credentials`` maps SecretId -> SecretKey;
    ``signing_clock`` judges request timestamps (real time by default)."""

    def __init__(self, credentials: Mapping[str, str], service: str, *, signing_clock: Clock | None = None) -> None:
        if not credentials:
            raise ValueError("the emulator needs at least one SecretId -> SecretKey pair")
        self._credentials = dict(credentials)
        self._service = service
        self._signing_clock = signing_clock or SystemClock()

    def check(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> None:
        """Return if the request is soundly signed; else raise ApiError. ``headers`` lower-cased."""
        if method != "POST" or path != "/":
            raise ApiError("UnsupportedProtocol", "this endpoint takes POST / with a JSON body")
        found = _AUTHORIZATION.match(headers.get("authorization", ""))
        if found is None:
            raise ApiError("AuthFailure.InvalidAuthorization", "the Authorization header is not TC3-HMAC-SHA256")
        signed = found["signed"].split(";")
        if "content-type" not in signed or "host" not in signed:
            raise ApiError("AuthFailure.InvalidAuthorization", "SignedHeaders must include content-type and host")
        secret = self._credentials.get(found["secret_id"])
        if secret is None:
            raise ApiError("AuthFailure.SecretIdNotFound", "the SecretId is not found, please ensure it exists")
        try:
            timestamp = int(headers.get("x-tc-timestamp", ""))
        except ValueError:
            raise ApiError("AuthFailure.SignatureFailure", "X-TC-Timestamp is not a Unix time") from None
        stamped = datetime.fromtimestamp(timestamp, tz=timezone.utc)
        if abs(self._signing_clock.now() - stamped) > SIGNATURE_TTL:
            raise ApiError("AuthFailure.SignatureExpire",
                           "the signature expired: the timestamp is more than 5 minutes off")
        if found["date"] != stamped.strftime("%Y-%m-%d") or found["service"] != self._service:
            raise ApiError("AuthFailure.SignatureFailure",
                           "the credential scope does not match the timestamp or service")
        unsigned = headers.get("x-tc-content-sha256") == UNSIGNED_PAYLOAD
        payload_hash = hashlib.sha256(UNSIGNED_PAYLOAD.encode() if unsigned else body).hexdigest()
        canonical = canonical_request(method, path, "", headers, signed, payload_hash)
        expected = tc3_signature(secret, found["date"], self._service,
                                 string_to_sign(timestamp, found["date"], self._service, canonical))
        if not hmac.compare_digest(expected, found["signature"]):
            raise ApiError("AuthFailure.SignatureFailure", "the provided credentials could not be validated")


class Api3Emulator(Protocol):
    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> bytes | Api3Reply: ...


class Api3Server(ThreadingHTTPServer):
    """An emulator's threaded HTTP server (handler from ``api3_handler``); handler threads are daemons."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops its kept-alive connection (after a lost answer, or at exit) is not an
        # emulator fault: say nothing. Anything else is printed as the stdlib does.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def api3_handler(emulator: Api3Emulator) -> type[BaseHTTPRequestHandler]:
    """The request handler class for one emulator; ``DropConnection`` from ``handle`` closes without an answer."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the SDK's session reuses connections
        timeout = 10  # an idle kept-alive connection closes and frees its thread

        def setup(self) -> None:
            super().setup()
            # Headers and body leave in two writes; with Nagle on, a kept-alive
            # connection then waits for the client's delayed ACK (~40 ms a call).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_POST(self) -> None:
            self._answer()

        def do_GET(self) -> None:
            self._answer()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?")[0]
            try:
                reply = emulator.handle(self.command, path, dict(self.headers.items()), body)
            except DropConnection:
                self.close_connection = True
                return
            if isinstance(reply, bytes):
                reply = Api3Reply(200, reply)
            self.send_response(reply.status)
            # JSON_TYPE exactly, unless a test asks for another: the SDK ignores errors otherwise.
            self.send_header("Content-Type", reply.content_type)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler
