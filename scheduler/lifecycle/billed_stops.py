"""Stops that do not stop the bill: the cloud stopped an idle machine but charges for it on.

ECS stops a type it cannot stop economically (local disks, or economical mode off) in KeepCharging mode
without an error; the adapter reports that as ``Instance.stop_keeps_billing``. Such a machine costs what a
running one does and does nothing: its hours go back into the ledger (as idle time, from the moment its
billing was closed) and it is terminated. A machine with a job on it is not this module's business
(reconcile treats a machine stopped under a job as lost).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from scheduler.accounting import ledger
from scheduler.lifecycle.transitions import set_instance
from scheduler.states import InstanceRowState
from scheduler.store.database import add_event
from scheduler.store.tables import InstanceRow

__all__ = ["bill_stopped"]

I = InstanceRowState


def bill_stopped(s: Session, row: InstanceRow, now: datetime) -> bool:
    """Record that ``row``'s stopped machine still bills; True when it should now be terminated."""
    if I(row.state) is I.stopping:
        set_instance(row, I.stopped)
        row.stopped_at = now
    if ledger.open_interval_of(s, row.id) is None:
        since = ledger.billed_until(s, row.id) or now
        ledger.open_interval(s, row, kind="idle", job_id=None, team=row.team, project=row.project, at=since)
        add_event(s, now, "stop_keeps_billing",
                  "the cloud stopped it but bills it on (no economical stop for this type): "
                  "its hours count as idle and it is terminated", instance_id=row.id)
    return row.job_id is None
