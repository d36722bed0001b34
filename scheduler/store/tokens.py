"""API tokens of people and services: made, checked, listed and revoked in the store.

A token reads ``gps_<12 hex>_<secret>``: the hex digits name its row (``tok-<12 hex>``), so checking one
is a look-up by key and one constant-time comparison, never a scan. The secret is 32 random bytes
(``secrets.token_urlsafe``); the store keeps only the SHA-256 of the whole token, so neither a copy
of the database nor a backup gives anyone a token that works. A slow hash (bcrypt, scrypt) would buy
nothing here: it protects guessable passwords, and 256 random bits are not guessable.

Roles, from most to least: ``admin`` (every team, tokens, budgets, the audit log), ``team-admin`` (its
teams' jobs, and member and viewer tokens of its teams), ``member`` (submits, reads and cancels its
teams' jobs) and ``viewer`` (reads its teams' jobs). What each may do is ``scheduler.app.roles``.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.models import MAX_NAME_CHARS, TEAM_PATTERN, Frozen
from scheduler.store.database import new_id
from scheduler.store.tables import ApiTokenRow
from scheduler.times import utc

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$"  # a token's name: a person's or a service's
MAX_EXPIRY_SECONDS = 10 * 366 * 86400
MAX_TOKEN_TEAMS = 16

PREFIX = "gps_"
_TOKEN_RE = re.compile(r"^gps_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
SECRET_BYTES = 32


class Role(StrEnum):
    admin = "admin"
    team_admin = "team-admin"
    member = "member"
    viewer = "viewer"


TokenState = Literal["live", "expired", "revoked"]
# Why a presented token was not accepted: no such token (or not one of ours), or the named token's.
Rejection = Literal["unknown", "wrong-secret", "revoked", "expired"]


class TokenRequest(Frozen):
    """A token to make: whose it is, its role, the teams it acts for, and how long it lives (null: always).
    The API's body, and what ``gpusched token create`` checks its options against before it sends them."""

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=NAME_PATTERN)
    role: Role
    teams: list[Annotated[str, Field(pattern=TEAM_PATTERN, max_length=MAX_NAME_CHARS)]] = Field(
        default_factory=list, max_length=MAX_TOKEN_TEAMS)
    expires_in_seconds: int | None = Field(default=None, ge=60, le=MAX_EXPIRY_SECONDS)


class TokenInfo(Frozen):
    """A token as it is listed: never its secret, never its hash."""

    id: str
    name: str
    role: Role
    teams: tuple[str, ...]
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    state: TokenState


class IssuedToken(TokenInfo):
    """A token just made: the only answer that carries the token itself."""

    token: str


def _state(row: ApiTokenRow, now: datetime) -> TokenState:
    if row.revoked_at is not None:
        return "revoked"
    if row.expires_at is not None and utc(row.expires_at) <= utc(now):
        return "expired"
    return "live"


def _info(row: ApiTokenRow, now: datetime) -> TokenInfo:
    return TokenInfo(id=row.id, name=row.name, role=Role(row.role), teams=tuple(row.teams),
                     created_at=utc(row.created_at), created_by=row.created_by,
                     expires_at=utc(row.expires_at) if row.expires_at else None,
                     revoked_at=utc(row.revoked_at) if row.revoked_at else None, revoked_by=row.revoked_by,
                     state=_state(row, now))


def digest(token: str) -> str:
    """What the store keeps of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def issue(session: Session, now: datetime, *, name: str, role: Role, teams: tuple[str, ...], created_by: str,
          expires_at: datetime | None) -> tuple[str, TokenInfo]:
    """Make a token; returns it (the only time it exists outside the caller's hands) and its listing."""
    token_id = new_id("tok")
    token = f"{PREFIX}{token_id.removeprefix('tok-')}_{secrets.token_urlsafe(SECRET_BYTES)}"
    row = ApiTokenRow(id=token_id, name=name, role=role.value, teams=list(teams), secret_sha256=digest(token),
                      created_at=now, created_by=created_by, expires_at=expires_at)
    session.add(row)
    session.flush()
    return token, _info(row, now)


def looks_like_ours(given: str) -> bool:
    """Whether ``given`` has a personal token's shape (not whether it is valid)."""
    return _TOKEN_RE.match(given) is not None


def check(session: Session, given: str, now: datetime) -> tuple[TokenInfo | None, Rejection | None]:
    """The live token ``given`` is, or why not. A rejection of a token whose row exists comes with that
    row's listing (whom to blame in the audit log); an unknown token with neither."""
    match = _TOKEN_RE.match(given)
    if match is None:
        return None, "unknown"
    row = session.get(ApiTokenRow, f"tok-{match.group(1)}")
    if row is None:
        return None, "unknown"
    info = _info(row, now)
    if not secrets.compare_digest(digest(given), row.secret_sha256):
        return info, "wrong-secret"
    if info.state != "live":
        return info, info.state
    return info, None


def find(session: Session, token_id: str, now: datetime) -> TokenInfo | None:
    row = session.get(ApiTokenRow, token_id)
    return _info(row, now) if row is not None else None


def listing(session: Session, now: datetime) -> list[TokenInfo]:
    """Every token, newest first (revoked and expired ones too: the audit log names them)."""
    rows = session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.created_at.desc(), ApiTokenRow.id.desc()))
    return [_info(r, now) for r in rows]


def revoke(session: Session, token_id: str, now: datetime, *, by: str) -> TokenInfo | None:
    """Revoke a token (None: no such token). Revoking a revoked token again changes nothing."""
    row = session.get(ApiTokenRow, token_id)
    if row is None:
        return None
    if row.revoked_at is None:
        row.revoked_at, row.revoked_by = now, by
        session.flush()
    return _info(row, now)


def live_admin_exists(session: Session, now: datetime) -> bool:
    """Whether some admin token is live: while none is, GPUSCHED_API_TOKEN acts as admin."""
    query = select(ApiTokenRow.id).where(
        ApiTokenRow.role == Role.admin.value, ApiTokenRow.revoked_at.is_(None),
        (ApiTokenRow.expires_at.is_(None)) | (ApiTokenRow.expires_at > utc(now)),
    ).limit(1)
    return session.scalars(query).first() is not None
