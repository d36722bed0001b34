"""Who is calling the API, and the audit log of what they did: the tokens' and audit log's routes.

A ``/v1`` caller sends one of two kinds of bearer token:

* ``GPUSCHED_API_TOKEN``, the daemon's own. It acts as the admin ``api-token`` while no personal admin
  token is live, which is the single-token mode of a daemon nobody has made tokens for, exactly as
  before tokens existed. Once an admin has a token of their own, the shared one stops opening the API
  (401, saying why); it comes back only if every admin token is revoked or expired, so a daemon is
  never locked out for good.
* a personal token (``gps_...``, ``scheduler.store.tokens``): a person's or a service's name, role
  and teams, until it expires or is revoked.

Authentication runs in ``guard.AuthFirst`` before any body is read (``Access.check``); the routes get
the caller as a ``Principal`` (``Access.who``). A refused call is answered 403 with the reason, after its
audit row is written (``Access.refuse``); a change writes its row in the change's own transaction
(``Access.allowed``). A 401 is written to the audit log only for a token the daemon issued (revoked,
expired, a wrong secret) or the shared token out of use: a token it never issued is only logged, so
that anyone who can reach the port cannot fill the store with rows.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.types import Scope

from scheduler.app.roles import (
    SHARED,
    SHARED_NAME,
    Principal,
    audit_scope,
    may_issue,
    may_manage_tokens,
    may_revoke,
    may_see_token,
)
from scheduler.clock import Clock
from scheduler.logs import get_logger
from scheduler.store import audit
from scheduler.store import tokens as token_store
from scheduler.store.audit import AuditEntry
from scheduler.store.database import Store
from scheduler.store.tokens import IssuedToken, Role, TokenInfo, TokenRequest

log = get_logger(__name__)

MAX_AUDIT_ROWS = 10_000
ASK_ADMIN = "ask an admin (or your team's team-admin) for a token: `gpusched token create`"

class Unauthenticated(Exception):
    """No token, or not one the daemon knows: the API's plain 401."""


class Forbidden(Exception):
    """A caller the daemon knows, asking for what its role or teams do not allow: 403 with the reason."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


class _Invalid(Exception):
    """A token request that cannot be met whoever asks: 400."""

    def __init__(self, error: str, fix: str) -> None:
        super().__init__(error)
        self.error, self.fix = error, fix


def client_of(scope: Scope) -> str | None:
    """The caller's address as the daemon saw it (behind a proxy: the proxy's)."""
    peer = scope.get("client")
    return str(peer[0]) if peer else None


def _json_error(status: int, error: str, fix: str | None) -> JSONResponse:
    resp = JSONResponse({"error": error, "fix": fix}, status_code=status)
    if status == 401:
        resp.headers["WWW-Authenticate"] = "Bearer"
    return resp


_REJECTED = {
    "revoked": "the API token {id} ({name}) was revoked",
    "expired": "the API token {id} ({name}) has expired",
    "wrong-secret": "the API token names {id} but is not its secret",
}


class Access:
    """Authentication and the audit log for one API, on ``store`` and ``clock``."""

    def __init__(self, store: Store, clock: Clock, shared_token: str) -> None:
        self.store, self.clock = store, clock
        self._shared = shared_token.encode()

    # --- who is calling

    def check(self, given: str | None, scope: Scope) -> Principal | Response | None:
        """For ``guard.AuthFirst``: the caller, a 401 that says why, or None (the plain 401)."""
        if not given:
            return None
        try:
            return self._check(given, scope)
        except SQLAlchemyError as exc:  # answered as any failure inside the API: the details go to the log
            log.error("api_crash", path=scope.get("path"), exc_info=exc)
            return _json_error(500, "internal error", "see the daemon's log")

    def _check(self, given: str, scope: Scope) -> Principal | Response | None:
        now = self.clock.now()
        if secrets.compare_digest(given.encode("utf-8", "surrogatepass"), self._shared):
            with self.store.session(write=False) as s:
                retired = token_store.live_admin_exists(s, now)
            if not retired:
                return SHARED
            why = "GPUSCHED_API_TOKEN no longer opens the API: this daemon has personal admin tokens"
            self._refused_401(scope, SHARED, why)
            return _json_error(401, why, "use your own token (GPUSCHED_API_TOKEN in your shell); " + ASK_ADMIN)
        if not token_store.looks_like_ours(given):
            return None
        with self.store.session(write=False) as s:
            info, rejected = token_store.check(s, given, now)
        if info is None:
            log.warning("api_token_unknown", client=client_of(scope))
            return None
        caller = Principal(name=info.name, role=info.role, teams=info.teams, token_id=info.id)
        if rejected is None:
            return caller
        why = _REJECTED[rejected].format(id=info.id, name=info.name)
        self._refused_401(scope, caller, why)
        return _json_error(401, why, ASK_ADMIN)

    def _refused_401(self, scope: Scope, caller: Principal, why: str) -> None:
        target = f"{scope.get('method', '')} {scope.get('path', '')}".strip()
        with self.store.session() as s:
            audit.record(s, self.clock.now(), actor=caller.name, token_id=caller.token_id, role=caller.role.value,
                         action="auth", target=target, team=_one_team(caller.teams), client=client_of(scope),
                         outcome="refused", status=401, detail=why)
        log.warning("api_token_refused", token=caller.token_id, name=caller.name, why=why, client=client_of(scope))

    def who(self, request: Request) -> Principal:
        """The caller (a route's dependency); AuthFirst has already checked the token."""
        found = getattr(request.state, "auth", None)
        if isinstance(found, Principal):
            return found
        from scheduler.app.guard import bearer  # only when a route is reached without AuthFirst

        verdict = self.check(bearer(request.headers), request.scope)
        if isinstance(verdict, Principal):
            return verdict
        raise Unauthenticated()

    # --- the audit log

    def refuse(self, request: Request, caller: Principal, action: str, reason: str, *, target: str | None = None,
               team: str | None = None, fix: str | None = None) -> Forbidden:
        """Write the refused call's audit row; return the 403 to raise."""
        with self.store.session() as s:
            audit.record(s, self.clock.now(), actor=caller.name, token_id=caller.token_id, role=caller.role.value,
                         action=action, target=target, team=team, client=client_of(request.scope),
                         outcome="refused", status=403, detail=reason)
        log.warning("api_refused", action=action, target=target, actor=caller.name, why=reason)
        return Forbidden(reason, fix)

    def allowed(self, session: Session, request: Request, caller: Principal, action: str, *, status: int,
                target: str | None = None, team: str | None = None, detail: str = "") -> None:
        """Write a change's audit row in the change's own transaction."""
        audit.record(session, self.clock.now(), actor=caller.name, token_id=caller.token_id, role=caller.role.value,
                     action=action, target=target, team=team, client=client_of(request.scope), outcome="allowed",
                     status=status, detail=detail)


def _one_team(teams: tuple[str, ...] | list[str]) -> str | None:
    # A row belongs to one team so a team-admin can read it; a token of several teams is the admins'.
    return teams[0] if len(teams) == 1 else None


def access_router(access: Access) -> APIRouter:
    """``/v1/whoami``, ``/v1/tokens`` and ``/v1/audit``."""
    router = APIRouter(prefix="/v1")
    store, clock = access.store, access.clock

    @router.get("/whoami", response_model=Principal)
    def whoami(who: Principal = Depends(access.who)) -> Principal:
        return who

    @router.post("/tokens", status_code=201, response_model=IssuedToken)
    def create_token(body: TokenRequest, request: Request, who: Principal = Depends(access.who)) -> IssuedToken:
        teams = tuple(dict.fromkeys(body.teams))  # repeated teams once, in the order given
        if body.role is not Role.admin and not teams:
            raise _Invalid(f"a {body.role.value} token acts for at least one team", "name it: --team TEAM")
        if body.name == SHARED_NAME:
            raise _Invalid(f"{SHARED_NAME!r} stands for GPUSCHED_API_TOKEN in the audit log",
                           "give the token another name (--name)")
        target = f"{body.role.value} token {body.name!r} for {', '.join(teams) or 'every team'}"
        refused = may_issue(who, body.role, teams)
        if refused is not None:
            raise access.refuse(request, who, "token.create", refused, target=target, team=_one_team(teams))
        now = clock.now()
        expires = now + timedelta(seconds=body.expires_in_seconds) if body.expires_in_seconds else None
        with store.session() as s:
            token, info = token_store.issue(s, now, name=body.name, role=body.role, teams=teams, created_by=who.name,
                                            expires_at=expires)
            access.allowed(s, request, who, "token.create", status=201, target=info.id, team=_one_team(teams),
                           detail=f"{target}, " + (f"expires {expires.isoformat()}" if expires else "never expires"))
        log.info("api_token_created", token=info.id, name=info.name, role=info.role.value, by=who.name)
        return IssuedToken(**info.model_dump(), token=token)

    @router.get("/tokens", response_model=list[TokenInfo])
    def list_tokens(request: Request, who: Principal = Depends(access.who)) -> list[TokenInfo]:
        refused = may_manage_tokens(who)
        if refused is not None:
            raise access.refuse(request, who, "token.list", refused, target="tokens")
        with store.session(write=False) as s:
            found = token_store.listing(s, clock.now())
        return [t for t in found if may_see_token(who, t)]

    @router.post("/tokens/{token_id}/revoke", response_model=TokenInfo)
    def revoke_token(request: Request, token_id: str = Path(max_length=40),
                     who: Principal = Depends(access.who)) -> TokenInfo:
        refused = may_manage_tokens(who)
        if refused is not None:
            raise access.refuse(request, who, "token.revoke", refused, target=token_id)
        now = clock.now()
        with store.session() as s:
            found = token_store.find(s, token_id, now)
            if found is None:
                raise _NoToken(token_id)
            refused = may_revoke(who, found)
            revoked = token_store.revoke(s, token_id, now, by=who.name) if refused is None else None
            if revoked is not None:
                access.allowed(s, request, who, "token.revoke", status=200, target=token_id,
                               team=_one_team(found.teams), detail=f"{found.role.value} token {found.name!r}")
        if revoked is None:  # refused: its audit row in a transaction of its own, after this one
            raise access.refuse(request, who, "token.revoke", refused or "not revoked", target=token_id,
                                team=_one_team(found.teams))
        log.info("api_token_revoked", token=token_id, by=who.name)
        return revoked

    @router.get("/audit", response_model=list[AuditEntry])
    def audit_log(request: Request, who: Principal = Depends(access.who), since: datetime | None = None,
                  until: datetime | None = None, team: str | None = Query(default=None, max_length=63),
                  limit: int = Query(default=1000, ge=1, le=MAX_AUDIT_ROWS)) -> list[AuditEntry]:
        """Oldest first: the newest ``limit`` rows from ``since`` (a team-admin: of its teams)."""
        teams, refused = audit_scope(who, team)
        if refused is not None:
            raise access.refuse(request, who, "audit.read", refused, target="audit", team=team)
        with store.session(write=False) as s:
            return audit.entries(s, since=since, until=until, teams=teams, limit=limit)

    return router


class _NoToken(Exception):
    def __init__(self, token_id: str) -> None:
        super().__init__(token_id)
        self.token_id = token_id


def install_access_errors(app: Any, unauthorized: Any) -> None:
    """The answers of ``Unauthenticated`` (``unauthorized()``), ``Forbidden`` (403) and an unknown token (404)."""

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(_r: Request, _e: Unauthenticated) -> JSONResponse:
        return unauthorized()

    @app.exception_handler(Forbidden)
    async def _forbidden(_r: Request, e: Forbidden) -> JSONResponse:
        return _json_error(403, e.reason, e.fix or "use a token whose role and teams allow it; " + ASK_ADMIN)

    @app.exception_handler(_Invalid)
    async def _invalid(_r: Request, e: _Invalid) -> JSONResponse:
        return _json_error(400, e.error, e.fix)

    @app.exception_handler(_NoToken)
    async def _no_token(_r: Request, e: _NoToken) -> JSONResponse:
        return _json_error(404, f"no token {e.token_id!r}", "list tokens with `gpusched token list`")
