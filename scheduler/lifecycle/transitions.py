"""State writes shared by the tick's phases and the agent's reports.

Every job, attempt and instance state change goes through ``scheduler.states.move``,
so an illegal transition is a loud bug, never a silently wrong row.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.accounting import ledger
from scheduler.lifecycle import gang
from scheduler.states import (
    ATTEMPT_MOVES,
    INSTANCE_MOVES,
    JOB_MOVES,
    AttemptState,
    InstanceRowState,
    JobState,
    move,
)
from scheduler.store.database import add_event
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow

log = structlog.get_logger("gpusched.tick")

A, I, J = AttemptState, InstanceRowState, JobState


# --- small helpers -----------------------------------------------------------------


def current_attempt(s: Session, job_id: str) -> AttemptRow | None:
    return s.scalars(
        select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number.desc()).limit(1)
    ).first()


def set_job(job: JobRow, state: JobState, now: datetime, reason: str | None = "") -> None:
    job.state = move(JOB_MOVES, J(job.state), state, "job")
    job.updated_at = now
    if reason != "":
        job.reason = reason


def set_instance(row: InstanceRow, state: InstanceRowState) -> None:
    row.state = move(INSTANCE_MOVES, I(row.state), state, "instance")


def open_billing(s: Session, row: InstanceRow, now: datetime) -> None:
    kind = "busy" if row.job_id else "idle"
    ledger.open_interval(s, row, kind=kind, job_id=row.job_id, team=row.team, project=row.project, at=now)


def start_job_on(s: Session, row: InstanceRow, now: datetime) -> None:
    """The machine is up: the job's attempt starts (the on-instance agent picks it up)."""
    job = s.get(JobRow, row.job_id)
    attempt = current_attempt(s, row.job_id)
    if job is None or attempt is None:
        return
    if not gang.all_running(s, job, attempt):
        return  # a multi-node job starts only once every node runs: the last one up starts it
    if J(job.state) in (J.planned, J.provisioning):
        set_job(job, J.running, now, None)
    if A(attempt.state) is A.launching:
        attempt.state = move(ATTEMPT_MOVES, A.launching, A.running, "attempt")
        attempt.started_at = now
        unit = "shard" if job.kind == "infer" else "epoch"
        add_event(s, now, "job_started", f"attempt {attempt.number} from {unit} {attempt.start_epoch}",
                  job_id=job.id, instance_id=row.id)


def make_idle(s: Session, row: InstanceRow, now: datetime) -> None:
    ledger.close_interval(s, row.id, now)
    row.job_id = None
    row.idle_since = now
    if I(row.state) in (I.running, I.pending):
        ledger.open_interval(s, row, kind="idle", job_id=None, team=row.team, project=row.project, at=now)


def release_nodes(s: Session, job: JobRow, attempt: AttemptRow, now: datetime) -> list[InstanceRow]:
    """A multi-node attempt ended: every node still working for it becomes idle (warm, then reaped).

    Single-node attempts are left to their callers, whose paths are unchanged. Returns the rows released.
    """
    if gang.nodes_of(job) == 1:
        return []
    rows = gang.attached(gang.gang_rows(s, job, attempt), job.id)
    for row in rows:
        make_idle(s, row, now)
    return rows
