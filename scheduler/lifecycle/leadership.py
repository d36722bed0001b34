"""Which daemon leads, for daemons sharing one database: the lease, its renewal and the fence on the tick.

Every daemon serves the API (reads, submissions, the agents' reports). Only the holder of the leader
lease (``scheduler/store/lease.py``) runs the tick, the monthly report and the budget alerts. The
daemon renews every ``renew_seconds`` (a third of the lease by default); a follower tries to take the
lease on the same beat, so when a leader dies the next one leads at most ``lease + renew`` seconds
after its last renewal.

A leader may stop without knowing it: paused (a long GC, a frozen VM, SIGSTOP), or cut off from the
database while its tick goes on. So the tick's store is *fenced* (``Store.fenced(leadership.fence)``):
each of its transactions first reads the lease row under a share lock and carries on only while this
daemon still holds it, in the term it last renewed, unexpired. A takeover waits for such a transaction
to commit; a transaction begun after one raises ``LeadershipLost`` and rolls back, and the tick stops.
Launches repeat the intent's client token, so a launch a deposed leader sent for an intent it wrote
while it led makes the same instance the new leader's re-issue does, never a second one.

A daemon restarted on the same machine after a crash (systemd's Restart=, a kill -9) need not wait out
the lease its dead predecessor left: when the holder names this host and pid namespace and that process
is gone, the lease is taken over at once (``died_here``; a compare-and-set on the dead holder's term).
Whatever cannot be told for sure (another host, another namespace, a pid now reused) waits for expiry.

The lease's clock is the real one even when the sandbox runs sped up: renewals are scheduled in real
seconds, and the lease is about whether a process is alive.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy.orm import Session

from scheduler.clock import Clock
from scheduler.errors import LeadershipLost
from scheduler.store.database import Store
from scheduler.store.lease import (
    Lease,
    acquire,
    check_fence,
    holder_id,
    parse_holder,
    pid_namespace,
    release,
    take_over,
)

log = structlog.get_logger("gpusched.leader")

LEASE_NAME = "tick"

__all__ = ["LEASE_NAME", "Leadership", "Renewal", "died_here"]


def died_here(holder: str) -> bool:
    """Whether ``holder`` names a process of this host and pid namespace that no longer runs.

    False whenever that cannot be known: another host or namespace, a holder name of another form, a
    pid that runs (even if reused by some other program: then the lease is waited out, as before).
    A zombie (killed, not yet reaped by its parent) counts as gone.
    """
    parsed = parse_holder(holder)
    if parsed is None or parsed.pid == os.getpid() or parsed.pid_namespace == "-":
        return False
    if parsed.host != socket.gethostname() or parsed.pid_namespace != pid_namespace():
        return False
    try:
        os.kill(parsed.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # runs, as another user
    try:
        with open(f"/proc/{parsed.pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class Renewal:
    """What one renewal found."""

    leads: bool  # this daemon holds the lease now
    lease: Lease
    changes: int  # times the lease changed hands since this daemon last read it (term steps)


class Leadership:
    """One daemon's side of the election. Thread-safe: the renewal job, the tick and /healthz share it."""

    def __init__(self, store: Store, clock: Clock, *, lease_seconds: float, renew_seconds: float | None = None,
                 holder: str | None = None, name: str = LEASE_NAME,
                 is_dead: Callable[[str], bool] = died_here) -> None:
        if lease_seconds <= 0:
            raise ValueError("a lease lasts more than zero seconds")
        renew = renew_seconds if renew_seconds is not None else lease_seconds / 3
        if not 0 < renew < lease_seconds:
            raise ValueError("renew more often than the lease lasts")
        self.store = store
        self.clock = clock
        self.name = name
        self.holder = holder or holder_id()
        self.duration = timedelta(seconds=lease_seconds)
        self.renew_seconds = renew
        self.is_dead = is_dead
        self._lock = threading.Lock()
        self._lease: Lease | None = None  # as last read
        self._held_term: int | None = None  # the term this daemon holds, when it leads
        self._changes = 0
        self._last_error: str | None = None

    # --- the renewal (every renew_seconds)

    def renew(self) -> Renewal:
        """Take or renew the lease: one compare-and-set. Raises what the database raises (the daemon logs it);
        until the next success this daemon leads only as long as the lease it last got lasts."""
        try:
            now = self.clock.now()
            with self.store.session() as s:
                lease = acquire(s, self.name, self.holder, now, self.duration)
                if lease.holder != self.holder and lease.live(now) and self.is_dead(lease.holder):
                    dead = lease
                    lease = take_over(s, self.name, dead, self.holder, now, self.duration)
                    if lease.holder == self.holder:
                        log.info("leadership_taken_from_dead_process", holder=self.holder, dead=dead.holder,
                                 dead_term=dead.term, lease_left_s=(dead.expires_at - now).total_seconds())
        except Exception as exc:
            with self._lock:
                self._last_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            raise
        with self._lock:
            before, was_term = self._lease, self._held_term
            leads = lease.holder == self.holder
            changes = max(0, lease.term - before.term) if before is not None else 0
            self._lease, self._held_term = lease, lease.term if leads else None
            self._changes += changes
            self._last_error = None
        if leads and was_term != lease.term:
            log.info("leadership_acquired", holder=self.holder, term=lease.term,
                     previous=before.holder if before is not None and before.holder != self.holder else None)
        elif was_term is not None and not leads:
            log.warning("leadership_lost", holder=self.holder, term=was_term, now_held_by=lease.holder,
                        new_term=lease.term)
        return Renewal(leads=leads, lease=lease, changes=changes)

    def release(self) -> bool:
        """Hand the lease back at once (a clean stop): the next daemon takes it at its next renewal."""
        with self._lock:
            term = self._held_term
            self._held_term = None
        if term is None:
            return False
        with self.store.session() as s:
            released = release(s, self.name, self.holder, self.clock.now())
        if released:
            log.info("leadership_released", holder=self.holder, term=term)
        return released

    # --- asking

    def leads(self) -> bool:
        """Whether this daemon holds the lease, as of its last renewal, and that lease has not run out."""
        with self._lock:
            return self._leads_locked()

    def _leads_locked(self) -> bool:
        lease = self._lease
        return self._held_term is not None and lease is not None and self.clock.now() < lease.expires_at

    @property
    def term(self) -> int | None:
        """The term this daemon leads in, or None when it does not lead."""
        with self._lock:
            return self._held_term if self._leads_locked() else None

    @property
    def changes(self) -> int:
        with self._lock:
            return self._changes

    def lease(self) -> Lease | None:
        with self._lock:
            return self._lease

    def fence(self, session: Session) -> None:
        """For ``Store.fenced``: raise ``LeadershipLost`` unless this daemon still holds the lease in its term.

        The row stays share-locked until the session's transaction ends, so no takeover commits in between.
        """
        with self._lock:
            term = self._held_term
        if term is None:
            raise LeadershipLost(f"{self.holder} does not hold the {self.name} lease")
        check_fence(session, self.name, self.holder, term, self.clock.now())

    def view(self) -> dict[str, Any]:
        """For /healthz: whether this daemon leads, and who does as of its last read of the lease."""
        now = self.clock.now()
        with self._lock:
            lease, leads = self._lease, self._leads_locked()
            live = lease is not None and lease.live(now)
            return {
                "leads": leads,
                "me": self.holder,
                "holder": lease.holder if live and lease is not None else None,
                "term": lease.term if lease is not None else None,
                "acquired_at": lease.acquired_at.isoformat() if live and lease is not None else None,
                "renewed_at": lease.renewed_at.isoformat() if live and lease is not None else None,
                "expires_at": lease.expires_at.isoformat() if live and lease is not None else None,
                "changes_seen": self._changes,
                "lease_seconds": self.duration.total_seconds(),
                "renew_seconds": self.renew_seconds,
                "error": self._last_error,
            }
