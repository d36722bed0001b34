"""Real receivers for the delivery tests: an SMTP server (aiosmtpd) and an HTTP server for chat webhooks.

Both listen on a free port of 127.0.0.1 in this process. The HTTP receiver answers each path as the
service named by its first segment does (``/slack/...``: "ok"; DingTalk and WeCom: ``{"errcode": 0}``;
Feishu: ``{"code": 0}``); a path under ``/refuse/<service>/`` answers that service's refusal. Given a
``dingtalk_secret``, it checks DingTalk's signature as the robot with the "sign" setting does (its own
HMAC over ``timestamp``, the query's ``sign`` URL-decoded, the timestamp within an hour of ``now``) and
answers a request that fails with DingTalk's refusal.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from aiosmtpd.controller import Controller


@dataclass
class Mailbox:
    """What the SMTP server received: (envelope sender, recipients, parsed message) per mail."""

    mails: list[tuple[str, list[str], EmailMessage]] = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd's hook name
        msg = message_from_bytes(envelope.content, policy=policy.default)
        self.mails.append((envelope.mail_from, list(envelope.rcpt_tos), msg))  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


@contextmanager
def smtp_server() -> Iterator[tuple[str, Mailbox]]:
    """An SMTP server on a free port; yields (smtp://127.0.0.1:PORT, its mailbox)."""
    box = Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=_free_port())
    controller.start()
    try:
        yield f"smtp://127.0.0.1:{controller.port}", box
    finally:
        controller.stop()


def _free_port() -> int:
    # aiosmtpd's Controller checks its server by connecting to the port it was given, so not 0.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_ANSWERS = {
    "slack": (200, "text/plain", b"ok"),
    "dingtalk": (200, "application/json", b'{"errcode":0,"errmsg":"ok"}'),
    "wecom": (200, "application/json", b'{"errcode":0,"errmsg":"ok"}'),
    "feishu": (200, "application/json", b'{"code":0,"msg":"success","data":{}}'),
}
_REFUSALS = {
    "slack": (403, "text/plain", b"invalid_token"),
    "dingtalk": (200, "application/json", b'{"errcode":310000,"errmsg":"keywords not in content"}'),
    "wecom": (200, "application/json", b'{"errcode":93000,"errmsg":"invalid webhook url"}'),
    "feishu": (200, "application/json", b'{"code":19021,"msg":"sign match fail or timestamp is not within one hour"}'),
}


@dataclass
class Posts:
    """What the HTTP receiver got: (path with query, JSON body) per request, in order."""

    received: list[tuple[str, dict]] = field(default_factory=list)
    sign_problems: list[str | None] = field(default_factory=list)  # per DingTalk request, when it checks signs
    lock: threading.Lock = field(default_factory=threading.Lock)

    def for_service(self, service: str) -> list[dict]:
        with self.lock:
            return [body for path, body in self.received if path.split("/")[1] == service]


_SIGN_REFUSED = (200, "application/json", b'{"errcode":310000,"errmsg":"sign not match"}')


def dingtalk_sign_problem(path: str, secret: str, now: datetime) -> str | None:
    """Why a DingTalk robot with ``secret`` would refuse a request to ``path`` at ``now``; None if it takes it."""
    query = parse_qs(urlsplit(path).query)  # URL-decoded, '+' as a space: an unencoded sign fails here
    if len(query.get("timestamp", ())) != 1 or len(query.get("sign", ())) != 1:
        return "no timestamp and sign"
    timestamp = query["timestamp"][0]
    if not timestamp.isdigit():
        return "timestamp is not milliseconds"
    if abs(int(timestamp) - int(now.timestamp()) * 1000) > 3_600_000:
        return "timestamp more than an hour off"
    want = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return None if hmac.compare_digest(base64.b64encode(want).decode(), query["sign"][0]) else "sign not match"


@contextmanager
def webhook_receiver(dingtalk_secret: str | None = None,
                     now: datetime | None = None) -> Iterator[tuple[str, Posts]]:
    """An HTTP server on a free port; yields (http://127.0.0.1:PORT, what it received)."""
    posts = Posts()
    if dingtalk_secret is not None and now is None:
        raise ValueError("a receiver that checks DingTalk signatures needs the time it takes as now")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's hook name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with posts.lock:
                posts.received.append((self.path, body))
            parts = self.path.split("/")
            status, kind, answer = (_REFUSALS[parts[2]] if parts[1] == "refuse" else _ANSWERS[parts[1]])
            if dingtalk_secret is not None and parts[1] == "dingtalk":
                why = dingtalk_sign_problem(self.path, dingtalk_secret, now)  # type: ignore[arg-type]
                with posts.lock:
                    posts.sign_problems.append(why)
                if why is not None:
                    status, kind, answer = _SIGN_REFUSED
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posts
    finally:
        server.shutdown()
        server.server_close()


def hooks_env(base: str) -> str:
    """GPUSCHED_WEBHOOKS for the receiver at ``base``, each URL with a token in it as the real ones have."""
    return (f"slack={base}/slack/services/T000/B000/slacksecret1,dingtalk={base}/dingtalk/robot/send?"
            f"access_token=dingsecret22,wecom={base}/wecom/cgi-bin/webhook/send?key=wecomsecret3,"
            f"feishu={base}/feishu/open-apis/bot/v2/hook/feishusecret4")


TOKENS = ("slacksecret1", "dingsecret22", "wecomsecret3", "feishusecret4")
