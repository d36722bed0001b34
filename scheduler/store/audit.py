"""The audit log: one row per change made through the API and per call it refused.

A row says who (the token's name, id and role), what (an action and its target), when (the daemon's
clock), from where (the caller's address as the daemon saw it; behind a proxy, the proxy's), to which
team the target belongs (so a team-admin reads its own teams' rows) and whether it was allowed. Rows
are only ever added: nothing in gpusched updates or deletes one.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.models import Frozen
from scheduler.store.tables import AuditRow
from scheduler.times import utc

Outcome = Literal["allowed", "refused"]
MAX_DETAIL_CHARS = 2000
MAX_TARGET_CHARS = 128


class AuditEntry(Frozen):
    id: int
    at: datetime
    actor: str
    token_id: str | None
    role: str | None
    action: str
    target: str | None
    team: str | None
    client: str | None
    outcome: Outcome
    status: int
    detail: str


def _clip(text: str | None, limit: int) -> str | None:
    return None if text is None else (text if len(text) <= limit else text[: limit - 1] + "…")


def record(session: Session, at: datetime, *, actor: str, action: str, outcome: Outcome, status: int,
           token_id: str | None = None, role: str | None = None, target: str | None = None,
           team: str | None = None, client: str | None = None, detail: str = "") -> None:
    """Add one row (flushed with the caller's transaction, so a change and its row commit together)."""
    if len(action) > 32:
        raise ValueError(f"audit action {action!r} is longer than 32 characters")
    session.add(AuditRow(at=utc(at), actor=_clip(actor, 63) or "", token_id=token_id, role=role, action=action,
                         target=_clip(target, MAX_TARGET_CHARS), team=team, client=_clip(client, 64),
                         outcome=outcome, status=status, detail=_clip(detail, MAX_DETAIL_CHARS) or ""))


def _entry(row: AuditRow) -> AuditEntry:
    return AuditEntry(id=row.id, at=utc(row.at), actor=row.actor, token_id=row.token_id, role=row.role,
                      action=row.action, target=row.target, team=row.team, client=row.client,
                      outcome="refused" if row.outcome == "refused" else "allowed", status=row.status,
                      detail=row.detail)


def entries(session: Session, *, since: datetime | None = None, until: datetime | None = None,
            teams: Collection[str] | None = None, limit: int | None = None) -> list[AuditEntry]:
    """Rows from ``since`` (inclusive) to ``until`` (exclusive), oldest first; ``teams``: only rows about
    those teams; ``limit``: only the newest that many."""
    query = select(AuditRow)
    if since is not None:
        query = query.where(AuditRow.at >= utc(since))
    if until is not None:
        query = query.where(AuditRow.at < utc(until))
    if teams is not None:
        query = query.where(AuditRow.team.in_(list(teams)))
    if limit is not None:
        newest = session.scalars(query.order_by(AuditRow.at.desc(), AuditRow.id.desc()).limit(limit)).all()
        return [_entry(r) for r in reversed(newest)]
    return [_entry(r) for r in session.scalars(query.order_by(AuditRow.at, AuditRow.id))]
