"""Who may send a body, checked before a byte of it is read.

FastAPI reads and parses a route's body before it runs the route's dependencies, so a token
checked in a dependency alone lets anyone make the daemon read a body (a 200 MiB one, before this
existed) only to be told 401 afterwards. ``AuthFirst`` is a pure ASGI middleware in front of the
routes: it checks the bearer token of every guarded path from the request's headers and answers 401
at once, without reading the body. What a check answers for a token it accepts (an API caller's
``Principal``) is left in the request's state as ``auth``, so a route's dependency need not look the
token up again; a check may also answer a refusal of its own (a revoked token's 401 says so). The
checks run in a worker thread: one may read the store. The routes' own dependencies still check the
token (and, for a machine, its instance row) afterwards.

The body limits themselves are FastAPI's ``max_body_size`` on the app, routers and routes: counted
while the body streams in (chunked bodies included), 413 once over the limit. A ``Content-Length``
that announces more than the route's limit is answered here, at once and in the API's own error
shape (FastAPI would answer it in plain text). A 401 or 413 also says ``Connection: close``, so the
server stops taking in whatever the client still sends instead of reading it to discard it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# A check of the bearer token a request gives (None: no bearer token at all) and of the request's scope:
# something true (what the token is) to let it through, a Response to refuse it with, or false for ``refuse()``.
TokenCheck = Callable[[str | None, Scope], object]
CLOSE_AFTER = frozenset({401, 413})


def bearer(headers: Headers) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case), or None."""
    scheme, _, given = headers.get("authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else None


class AuthFirst:
    """Answer ``refuse()`` (a 401) to a request on a guarded path whose token fails its check, before the
    app sees it. ``areas``: (path prefix, check), the first matching prefix wins; other paths pass.
    ``oversized(method, path, content_length)``: the 413 for a body announced over its route's limit."""

    def __init__(self, app: ASGIApp, *, areas: Sequence[tuple[str, TokenCheck]], refuse: Callable[[], Response],
                 oversized: Callable[[str, str, int], Response | None]) -> None:
        self.app, self.areas, self.refuse, self.oversized = app, tuple(areas), refuse, oversized

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = Headers(scope=scope)
        check = next((c for prefix, c in self.areas if path.startswith(prefix)), None)
        response = None
        if check is not None:
            verdict = await run_in_threadpool(check, bearer(headers), scope)
            if isinstance(verdict, Response):
                response = verdict
            elif not verdict:
                response = self.refuse()
            else:
                scope.setdefault("state", {})["auth"] = verdict
        declared = headers.get("content-length", "")
        if response is None and declared.isdigit():
            response = self.oversized(scope["method"], path, int(declared))
        if response is not None:
            response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, _closing(send))


def _closing(send: Send) -> Send:
    """``send``, adding ``Connection: close`` to a 401 or 413: the body may still be on its way."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] in CLOSE_AFTER:
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return wrapped
