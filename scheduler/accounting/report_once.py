"""The daemon's monthly report, sent once however many daemons share the store.

Only the leader sends it (``scheduler/app/daemon.py``), but leadership can change hands while a report is
being written, and a follower that comes to lead within the hour sends a report the dead leader owed. So
before anything goes out the sender claims the month's row in ``report_deliveries``: a row that exists
means another daemon sent the month, or is sending it, and this one sends nothing. A claim whose sender
lost the lease before it finished (its term is older than the claimer's) may be taken again: better a
report sent twice after a crash mid-send than none. ``gpusched report --send`` is a person asking, and
does not come here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from scheduler.accounting.report_delivery import SentReport
from scheduler.logs import get_logger
from scheduler.store.database import Store
from scheduler.store.tables import ReportDeliveryRow

__all__ = ["claim", "send_once"]

log = get_logger(__name__)
_T = ReportDeliveryRow.__table__


def claim(store: Store, month: str, holder: str, term: int, now: datetime) -> bool:
    """Claim the month's report for ``holder`` (leading in ``term``); False when another daemon has it."""
    with store.session() as s:
        insert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
        s.execute(insert(_T).values(month=month, holder=holder, term=term, claimed_at=now, delivered_at=None,
                                    outcome="").on_conflict_do_nothing(index_elements=["month"]))
        # Ours now (just inserted, or an earlier claim of ours), or undelivered by a leader since deposed.
        s.execute(update(_T).where(_T.c.month == month, _T.c.delivered_at.is_(None), _T.c.holder != holder,
                                   _T.c.term < term)
                  .values(holder=holder, term=term, claimed_at=now))
        row = s.execute(select(_T.c.holder, _T.c.delivered_at).where(_T.c.month == month)).one()
    return row.holder == holder and row.delivered_at is None


def send_once(store: Store, month: str, *, holder: str, term: int, now: Callable[[], datetime],
              send: Callable[[], SentReport]) -> SentReport | None:
    """``send()`` the month's report if this daemon claims it; None when another daemon sent it or is sending.

    A ``send`` that raises gives the claim back (the files may be half written; nothing was delivered).
    """
    if not claim(store, month, holder, term, now()):
        with store.session(write=False) as s:
            other = s.execute(select(_T.c.holder, _T.c.delivered_at).where(_T.c.month == month)).one()
        log.info("monthly_report_skipped", month=month, why="another daemon sent it or is sending it",
                 by=other.holder, delivered_at=other.delivered_at.isoformat() if other.delivered_at else None)
        return None
    try:
        sent = send()
    except BaseException:
        with store.session() as s:
            s.execute(delete(_T).where(_T.c.month == month, _T.c.holder == holder, _T.c.delivered_at.is_(None)))
        raise
    outcome = "; ".join(f"{o.channel}: {'sent' if o.ok else 'failed'}" for o in sent.outcomes) or "files only"
    with store.session() as s:
        s.execute(update(_T).where(_T.c.month == month, _T.c.holder == holder)
                  .values(delivered_at=now(), outcome=outcome))
    return sent
