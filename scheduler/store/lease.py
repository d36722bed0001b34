"""The leader lease: which of several daemons on one database leads, decided by one row per lease name.

A daemon takes the lease, or renews its own, with one conditional UPDATE: it sets itself as holder
where the row is its own already or has expired (compare-and-set on ``holder`` and ``expires_at``).
Two contenders cannot both win: on PostgreSQL the second UPDATE waits for the first to commit and
then re-checks its WHERE against the row the first wrote (READ COMMITTED re-evaluation), and on
SQLite every write transaction holds the database's write lock from BEGIN IMMEDIATE.

``term`` counts holders: it grows by one each time the lease changes hands, never on a renewal, so
a deposed leader's writes can be fenced by term (``check_fence``). Times come from the caller's clock
(the daemons' clocks must agree to well under the lease's length, as NTP keeps them).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import BigInteger, ColumnElement, Text, bindparam, case, cast, func, literal, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from scheduler.errors import LeadershipLost
from scheduler.store.tables import LeaderLeaseRow
from scheduler.times import utc

__all__ = ["Holder", "Lease", "acquire", "check_fence", "holder_id", "parse_holder", "read", "release", "take_over"]

NEVER = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the expiry of a lease nobody has held yet
_HOLDER_MAX = 160  # the column's width
_T = LeaderLeaseRow.__table__


@dataclass(frozen=True)
class Lease:
    """The lease row as one read saw it."""

    name: str
    holder: str  # '' before anyone held it
    term: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime

    def held_by(self, holder: str, now: datetime) -> bool:
        return self.holder == holder and now < self.expires_at

    def live(self, now: datetime) -> bool:
        """Someone holds it and it has not expired."""
        return bool(self.holder) and now < self.expires_at


@dataclass(frozen=True)
class Holder:
    """What a holder id says about the process that wrote it."""

    host: str
    pid: int
    pid_namespace: str  # the inode of its pid namespace ('-' where unknown): a pid means something only inside it


def holder_id() -> str:
    """``host:pid:random:pidns``: names one daemon process; the random part tells a restarted process (same
    pid in a fresh container) from the one before it, and the pid namespace says where the pid is valid."""
    tail = f":{os.getpid()}:{secrets.token_hex(4)}:{pid_namespace()}"
    return socket.gethostname()[: _HOLDER_MAX - len(tail)] + tail


def parse_holder(holder: str) -> Holder | None:
    """The parts of a ``holder_id``; None for any other name (a test's, an operator's, an older format)."""
    parts = holder.rsplit(":", 3)
    if len(parts) != 4 or not parts[1].isdigit() or not re.fullmatch(r"[0-9a-f]{8}", parts[2]):
        return None
    return Holder(host=parts[0], pid=int(parts[1]), pid_namespace=parts[3])


def pid_namespace() -> str:
    """This process's pid namespace, as the inode of /proc/self/ns/pid ('-' where there is no /proc)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


def acquire(session: Session, name: str, holder: str, now: datetime, duration: timedelta) -> Lease:
    """Take the lease ``name`` for ``holder`` until ``now + duration``, or renew it: one compare-and-set.

    Returns the row as it stands afterwards, in the caller's transaction: ``holder`` leads when
    ``lease.holder == holder``. A holder renewing its own lease keeps its term (and ``acquired_at``),
    even if it had expired meanwhile, since nobody else held it in between; taking it from another
    holder, or from nobody, starts the next term.
    """
    if duration <= timedelta(0):
        raise ValueError("a lease lasts more than zero seconds")
    if not holder or len(holder) > _HOLDER_MAX:
        raise ValueError(f"a lease holder is 1 to {_HOLDER_MAX} characters")
    now = utc(now)
    _ensure_row(session, name)
    mine = _T.c.holder == holder
    at = literal(now, type_=_T.c.acquired_at.type)
    session.execute(
        update(_T)
        .where(_T.c.name == name, or_(mine, _T.c.expires_at <= now))
        # SET reads the row as it was before the UPDATE: ``mine`` is about the old holder.
        .values(holder=holder,
                term=case((mine, _T.c.term), else_=_T.c.term + 1),
                acquired_at=case((mine, _T.c.acquired_at), else_=at),
                renewed_at=now,
                expires_at=now + duration)
    )
    lease = read(session, name)
    assert lease is not None  # _ensure_row made it
    return lease


def take_over(session: Session, name: str, dead: Lease, holder: str, now: datetime, duration: timedelta) -> Lease:
    """Take the lease from ``dead``, a holder the caller has seen die, before its lease runs out.

    A compare-and-set on the dead holder and its term: if anyone renewed or took the lease since the
    caller read ``dead``, nothing changes. The dead process's open transaction died with it (its
    connection closed), so there is nothing of its to fence off. Returns the row as it stands afterwards.
    """
    if duration <= timedelta(0):
        raise ValueError("a lease lasts more than zero seconds")
    now = utc(now)
    session.execute(
        update(_T)
        .where(_T.c.name == name, _T.c.holder == dead.holder, _T.c.term == dead.term)
        .values(holder=holder, term=_T.c.term + 1, acquired_at=now, renewed_at=now, expires_at=now + duration)
    )
    lease = read(session, name)
    assert lease is not None
    return lease


def release(session: Session, name: str, holder: str, now: datetime) -> bool:
    """Let the lease go at once (a daemon stopping cleanly), so the next daemon need not wait it out.

    Only the holder's own, unexpired lease is released; the term stays, so the next holder starts a new one.
    """
    now = utc(now)
    done = session.execute(
        update(_T).where(_T.c.name == name, _T.c.holder == holder, _T.c.expires_at > now).values(expires_at=now)
    )
    return bool(done.rowcount)


def read(session: Session, name: str, *, share_lock: bool = False, idle_limit_at: datetime | None = None
         ) -> Lease | None:
    """The lease row, or None before anyone asked for it.

    ``share_lock`` (PostgreSQL) holds the row against any change until the transaction ends: a
    takeover waits for the fenced transaction to commit. SQLite ignores it; its write transactions
    already exclude each other. ``idle_limit_at`` (PostgreSQL, with the lock) also sets, in the same
    statement, how long the transaction may idle: the lease's time left at that moment (``check_fence``).
    """
    query = select(_T).where(_T.c.name == name)
    if share_lock:
        query = query.with_for_update(read=True)
        if idle_limit_at is not None and session.get_bind().dialect.name == "postgresql":
            query = query.add_columns(_idle_limit(idle_limit_at))
    row = session.execute(query).one_or_none()
    if row is None:
        return None
    return Lease(name=row.name, holder=row.holder, term=row.term, acquired_at=row.acquired_at,
                 renewed_at=row.renewed_at, expires_at=row.expires_at)


def _idle_limit(now: datetime) -> ColumnElement:
    """``SET LOCAL idle_in_transaction_session_timeout`` to the lease row's time left at ``now`` (at least a
    second), as a column of the statement that share-locks the row.

    The share lock lasts as long as the transaction. A leader frozen in it (SIGSTOP, a paused VM, a long
    GC) would hold it, and the takeover's UPDATE would wait behind it, for ever: the server ends the
    frozen transaction's session once it idles past the lease it holds, so the lock goes with the lease.
    In the locking statement itself: set by a second one, a leader frozen between the two held the lock
    for ever (tests/app/test_failover.py's SIGSTOP caught it there about one run in ten)."""
    left = _T.c.expires_at - bindparam("idle_limit_at", utc(now), type_=_T.c.expires_at.type)
    left_ms = func.least(func.greatest(func.trunc(func.extract("epoch", left) * 1000), 1000), _MAX_IDLE_MS)
    return func.set_config("idle_in_transaction_session_timeout", cast(cast(left_ms, BigInteger), Text), True)


_MAX_IDLE_MS = 2**31 - 1  # the setting's largest value


def check_fence(session: Session, name: str, holder: str, term: int, now: datetime) -> Lease:
    """Raise ``LeadershipLost`` unless ``holder`` still holds ``name`` in ``term``, unexpired at ``now``.

    Run inside a transaction that is about to write: the row stays share-locked to its end, so on
    PostgreSQL no other daemon can take the lease between this check and the commit.
    """
    lease = read(session, name, share_lock=True, idle_limit_at=now)
    if lease is None or lease.holder != holder or lease.term != term:
        who = "nobody" if lease is None or not lease.holder else f"{lease.holder} (term {lease.term})"
        raise LeadershipLost(f"the {name} lease of term {term} is lost: now held by {who}")
    if now >= lease.expires_at:
        raise LeadershipLost(f"the {name} lease of term {term} expired at {lease.expires_at.isoformat()}")
    return lease


def _ensure_row(session: Session, name: str) -> None:
    """The lease's row, expired and held by nobody, if it does not exist yet (two first daemons race here
    harmlessly: ON CONFLICT DO NOTHING)."""
    values = dict(name=name, holder="", term=0, acquired_at=NEVER, renewed_at=NEVER, expires_at=NEVER)
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    session.execute(insert(_T).values(**values).on_conflict_do_nothing(index_elements=["name"]))
