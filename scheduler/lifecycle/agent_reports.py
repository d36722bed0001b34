"""Reports from the on-instance agent: an epoch finished (a new resume point), the job exited.

Stale reports from an earlier attempt are fenced off by the attempt number.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import structlog
from sqlalchemy.orm import Session

from scheduler.lifecycle.perf_learning import learn_from_progress
from scheduler.lifecycle.transitions import current_attempt, make_idle, release_nodes, set_job
from scheduler.states import (
    ATTEMPT_MOVES,
    AttemptState,
    JobState,
    move,
)
from scheduler.store.database import add_event
from scheduler.store.tables import InstanceRow, JobRow

log = structlog.get_logger("gpusched.tick")

A, J = AttemptState, JobState


# --- reports from the on-instance agent ---------------------------------------------


def report_progress(s: Session, job_id: str, attempt_no: int, epochs_done: int, checkpoint_uri: str | None,
                    now: datetime, source: Literal["agent", "simulated"] = "agent") -> None:
    """The agent finished an epoch and uploaded ``last.pt``: that is the new resume point.

    The time the epochs took is a sample for the performance model (``perf_learning``).
    """
    job = s.get(JobRow, job_id)
    attempt = current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return  # a stale report from an older attempt: fenced off
    if epochs_done > job.epochs_done:
        learn_from_progress(s, job=job, attempt=attempt, epochs_done=epochs_done, now=now, source=source)
        job.epochs_done = epochs_done
        job.checkpoint_uri = checkpoint_uri
        job.updated_at = now


def report_rendezvous(s: Session, job_id: str, attempt_no: int, addr: str, now: datetime) -> bool:
    """Rank 0 of a multi-node attempt says where the other ranks reach it; False if the attempt is stale.

    Kept per attempt: a relaunched gang runs on new machines, so an earlier attempt's address
    must never reach its ranks (they would dial a reclaimed machine, or someone else's).
    """
    attempt = current_attempt(s, job_id)
    if attempt is None or attempt.number != attempt_no or A(attempt.state) not in (A.launching, A.running):
        return False
    if attempt.master_addr != addr:
        attempt.master_addr = addr
        add_event(s, now, "rendezvous", f"attempt {attempt_no}: rank 0 listens at {addr}", job_id=job_id)
    return True


def rendezvous_of(s: Session, job_id: str, attempt_no: int) -> str | None:
    """The address rank 0 advertised for this attempt, once it has."""
    attempt = current_attempt(s, job_id)
    return attempt.master_addr if attempt is not None and attempt.number == attempt_no else None


def report_finished(s: Session, job_id: str, attempt_no: int, ok: bool, now: datetime, message: str = "") -> None:
    """The agent says the job's process exited; its machine becomes idle and warm."""
    job = s.get(JobRow, job_id)
    attempt = current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return
    attempt.state = move(ATTEMPT_MOVES, A.running, A.succeeded if ok else A.failed, "attempt")
    attempt.ended_at = now
    attempt.end_epoch = job.epochs_done
    attempt.reason = message or None
    if J(job.state) is J.running:
        set_job(job, J.succeeded if ok else J.failed, now, message or None)
        job.finished_at = now
    add_event(s, now, "job_finished", f"{'succeeded' if ok else 'failed'} {message}".strip(), job_id=job.id)
    if attempt.instance_id:
        row = s.get(InstanceRow, attempt.instance_id)
        if row is not None and row.job_id == job.id:
            make_idle(s, row, now)
    release_nodes(s, job, attempt, now)  # the rest of a multi-node gang (rank 0 reports for all)
