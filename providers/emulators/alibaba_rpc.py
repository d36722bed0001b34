"""What every Alibaba Cloud RPC-style API shares, for the emulators that speak one: signature v1, the
error shape, and the HTTP server.

The ECS emulator (``alibaba_ecs``) and the BSS billing emulator (``alibaba_bss``) are two products behind
one gateway protocol, so the gateway's part lives here once:

* ``RpcAuthenticator`` checks a request the way the gateway does: the common parameters present,
  HMAC-SHA1 / version 1.0, a known AccessKeyId, a Timestamp within the allowed skew of the wall clock
  (the SDK stamps requests with real time, whatever clock a sandbox runs on), the signature (the
  parameters but ``Signature``, sorted and percent-encoded per RFC 3986 over UTF-8, string to sign
  ``METHOD&%2F&percentEncode(canonical query)``, base64 HMAC-SHA1 keyed with ``secret + "&"``), and a
  nonce never seen before. A mismatch says ``server string to sign is:...`` like the gateway: the SDK
  reads that to tell a wrong secret (``InvalidAccessKeySecret``) apart.
* ``RpcError``: an error answer (HTTP status, code, message); ``rpc_error_body`` its JSON
  ``{RequestId, HostId, Code, Message, Recommend}``.
* ``RpcServer``: ``POST /`` or ``GET /`` with the parameters in the query string (a form body is read
  too), handed to the emulator's ``handle``, which gives an ``RpcAnswer`` (status, JSON body, extra
  headers such as ``Retry-After``); ``None`` from it drops the connection without an answer (a
  response lost on the way back). The server itself is ``local_http.LocalServer``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol
from urllib.parse import quote

from providers.emulators.local_http import LISTEN_HOST, Answer, LocalServer, Request
from scheduler.clock import Clock, SystemClock

__all__ = [
    "LISTEN_HOST",
    "RpcAnswer",
    "RpcAuthenticator",
    "RpcError",
    "RpcServer",
    "missing_parameter",
    "percent_encode",
    "rpc_error_body",
    "rpc_json",
    "rpc_signature",
    "string_to_sign",
]

TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class RpcError(Exception):
    """An RPC error answer: HTTP status, vendor code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class RpcAnswer:
    """One HTTP answer: status, JSON body and any extra headers (``Retry-After``)."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def percent_encode(text: str) -> str:
    """RFC 3986 over UTF-8: only A-Z a-z 0-9 - _ . ~ stay as they are."""
    return quote(text, safe="")


def string_to_sign(method: str, params: Mapping[str, str]) -> str:
    """``METHOD&%2F&percentEncode(canonicalized query)``; ``Signature`` itself is left out."""
    canonical = "&".join(
        f"{percent_encode(k)}={percent_encode(v)}" for k, v in sorted(params.items()) if k != "Signature"
    )
    return f"{method.upper()}&{percent_encode('/')}&{percent_encode(canonical)}"


def rpc_signature(method: str, params: Mapping[str, str], secret: str) -> str:
    """Signature v1: base64(HMAC-SHA1(secret + "&", string to sign))."""
    digest = hmac.new(f"{secret}&".encode(), string_to_sign(method, params).encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def missing_parameter(name: str) -> RpcError:
    return RpcError(400, "MissingParameter",
                    f'The input parameter "{name}" that is mandatory for processing this request is not supplied.')


class RpcAuthenticator:
    """The gateway's check of one request. ``credentials`` maps AccessKeyId -> AccessKeySecret.

    Not thread-safe on its own (the nonce memory): an emulator calls ``check`` under its lock.
    """

    def __init__(self, credentials: Mapping[str, str], *, wall_clock: Clock | None = None,
                 max_skew_seconds: float = 900) -> None:
        self._credentials = dict(credentials)
        self._wall_clock = wall_clock if wall_clock is not None else SystemClock()
        self._max_skew = timedelta(seconds=max_skew_seconds)
        self._nonces: set[tuple[str, str]] = set()

    def check(self, method: str, p: Mapping[str, str]) -> None:
        """Return if the request is signed by a known key within the allowed skew; else raise RpcError."""
        for name in ("AccessKeyId", "Signature", "SignatureMethod", "SignatureVersion", "SignatureNonce",
                     "Timestamp", "Version", "Action"):
            if not p.get(name):
                raise missing_parameter(name)
        if p["SignatureMethod"] != "HMAC-SHA1":
            raise RpcError(400, "InvalidSignatureMethod", "Specified signature method is not valid.")
        if p["SignatureVersion"] != "1.0":
            raise RpcError(400, "InvalidSignatureVersion", "Specified signature version is not valid.")
        secret = self._credentials.get(p["AccessKeyId"])
        if secret is None:
            raise RpcError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        try:
            stamp = datetime.strptime(p["Timestamp"], TIMESTAMP_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            raise RpcError(400, "InvalidTimeStamp.Format",
                           "Specified time stamp or date value is not well formatted.") from None
        if abs(self._wall_clock.now() - stamp) > self._max_skew:
            raise RpcError(400, "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.")
        expected = rpc_signature(method, p, secret)
        if not hmac.compare_digest(expected.encode(), p["Signature"].encode()):
            raise RpcError(400, "SignatureDoesNotMatch",
                           "Specified signature is not matched with our calculation. "
                           f"server string to sign is:{string_to_sign(method, p)}")
        nonce = (p["AccessKeyId"], p["SignatureNonce"])
        if nonce in self._nonces:
            raise RpcError(400, "SignatureNonceUsed", "Specified signature nonce was used already.")
        self._nonces.add(nonce)


def rpc_json(payload: Mapping[str, Any]) -> bytes:
    # Decimal goes out as a JSON number, as the gateway writes prices and amounts.
    return json.dumps(payload, default=lambda o: float(o) if isinstance(o, Decimal) else str(o)).encode()


def rpc_error_body(exc: RpcError, request_id: str, host_id: str, product: str) -> dict[str, Any]:
    return {
        "RequestId": request_id,
        "HostId": host_id,
        "Code": exc.code,
        "Message": exc.message,
        "Recommend": f"https://api.aliyun.com/troubleshoot?q={exc.code}&product={product}&requestId={request_id}",
    }


class RpcEmulator(Protocol):
    def handle(self, method: str, path: str, query: str, body: bytes,
               content_type: str) -> RpcAnswer | None: ...

class RpcServer:
    """One emulator's HTTP server (``local_http.LocalServer`` on 127.0.0.1, port 0: the OS picks) answering
    as the gateway does: JSON bodies, plus the headers the emulator adds."""

    def __init__(self, emulator: RpcEmulator, *, port: int = 0, name: str = "alibaba-rpc-emulator") -> None:
        self.emulator = emulator
        self._http = LocalServer(self._answer, port=port, name=name)

    @property
    def port(self) -> int:
        return self._http.port

    def close(self) -> None:
        self._http.close()

    def _answer(self, request: Request) -> Answer | None:
        outcome = self.emulator.handle(request.method, request.path, request.query, request.body,
                                       request.headers.get("content-type", ""))
        if outcome is None:
            return None
        return Answer(outcome.status, outcome.body,
                      {"Content-Type": "application/json;charset=utf-8", **outcome.headers})
