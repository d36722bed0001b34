"""Reports from the on-instance agent: it is up (hello), what it should do (work), it is alive
(heartbeat), an epoch finished (a new resume point), the cloud gave notice that it takes the
machine back (a spot reclaim), the job exited.

One long-lived agent runs on each machine and speaks for that instance row (its token names the
instance, not a job). The HTTP routes (``scheduler/app/api.py``, ``/v1/agent/...``) are thin over
these functions: they check the token, then ask ``assigned_attempt`` whether the job and attempt
a report names are the ones assigned to that instance (409 otherwise), then call the same
``report_*`` function the simulated agent (``scheduler/simulation/simagent.py``) calls directly.
Stale reports from an earlier attempt are fenced off by the attempt number as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import structlog
from sqlalchemy import update
from sqlalchemy.orm import Session

from scheduler.accounting import ledger
from scheduler.lifecycle import gang
from scheduler.lifecycle.perf_learning import learn_from_progress
from scheduler.lifecycle.transitions import current_attempt, make_idle, release_nodes, requeue_after_loss, set_job
from scheduler.models import JobSpec
from scheduler.states import (
    ATTEMPT_MOVES,
    AttemptState,
    InstanceRowState,
    JobState,
    move,
)
from scheduler.store.database import add_event
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow

log = structlog.get_logger("gpusched.tick")

A, I, J = AttemptState, InstanceRowState, JobState

# How long an idle agent waits before it asks for work again (also its heartbeat interval):
# well inside the daemon's silence window (``Settings.agent_silence_minutes``).
WORK_POLL_SECONDS = 30
# Instance states whose agent still has a reason to live; any other state tells it to exit.
AGENT_LIVE = frozenset({I.requested, I.pending, I.running})


# --- the machine: who is assigned what ----------------------------------------------


@dataclass(frozen=True)
class Assigned:
    """The attempt an instance works for, and its place in it (rank 0 speaks for a gang)."""

    job: JobRow
    attempt: AttemptRow
    node_rank: int
    nodes: int


def assignment_of(s: Session, row: InstanceRow) -> Assigned | None:
    """The live attempt this instance works for: its job's current attempt, if the instance is the
    attempt's own (rank 0, or a warm machine it was put on) or one of its gang's nodes."""
    if row.job_id is None:
        return None
    job = s.get(JobRow, row.job_id)
    attempt = current_attempt(s, row.job_id)
    if job is None or attempt is None or A(attempt.state) not in (A.launching, A.running):
        return None
    if attempt.instance_id == row.id:
        rank = 0
    else:
        rank = gang.node_of(row.client_token)
        if rank == 0 or row.client_token != gang.node_token(job.id, attempt.number, rank):
            return None
    return Assigned(job=job, attempt=attempt, node_rank=rank, nodes=gang.nodes_of(job))


def assigned_attempt(s: Session, instance_id: str, job_id: str, attempt_no: int) -> Assigned | None:
    """The assignment if (job, attempt) is the one this instance works for now, else None (a 409)."""
    row = s.get(InstanceRow, instance_id)
    if row is None or I(row.state) not in AGENT_LIVE:
        return None
    assigned = assignment_of(s, row)
    if assigned is None or assigned.job.id != job_id or assigned.attempt.number != attempt_no:
        return None
    return assigned


def work_for(s: Session, instance_id: str) -> dict[str, Any]:
    """What the agent of ``instance_id`` should do now: run its attempt, wait (warm, or not started
    yet: a gang starts once every node runs), or exit (the instance is stopping, gone or unknown).

    A job the agent already reported finished is never handed out again: finishing frees the machine."""
    row = s.get(InstanceRow, instance_id)
    if row is None or I(row.state) not in AGENT_LIVE or reclaim_pending(row):
        return {"action": "exit"}
    assigned = assignment_of(s, row) if I(row.state) is I.running else None
    if assigned is None or A(assigned.attempt.state) is not A.running:
        return {"action": "wait", "poll_seconds": WORK_POLL_SECONDS}
    job, attempt = assigned.job, assigned.attempt
    return {"action": "run", "job_id": job.id, "attempt": attempt.number, "spec": job.spec_json,
            "epochs_done": job.epochs_done, "checkpoint_uri": job.checkpoint_uri,
            "node_rank": assigned.node_rank, "nodes": assigned.nodes, "master_addr": attempt.master_addr,
            "capacity": row.capacity}  # a spot machine's agent watches for the cloud's reclaim notice


def reclaim_pending(row: InstanceRow) -> bool:
    """The machine's agent passed on the cloud's notice that it takes the machine back
    (``report_reclaiming``): it works for nobody, and the tick terminates it
    (``agent_watch.terminate_reclaimed``)."""
    return bool(row.preempted) and I(row.state) is I.running


def work_estimate(s: Session, instance_id: str) -> float | None:
    """For a token renewal: the estimated hours of the instance's current work (1 when idle), or
    None when the instance is not live (no renewal: the machine is going away)."""
    row = s.get(InstanceRow, instance_id)
    if row is None or I(row.state) not in AGENT_LIVE:
        return None
    assigned = assignment_of(s, row)
    return (assigned.attempt.est_hours if assigned is not None else None) or 1.0


def report_heartbeat(s: Session, instance_ids: Iterable[str], now: datetime) -> None:
    """The agents of these instances were heard at ``now`` (any call of theirs counts).

    One UPDATE that leaves the row version alone, like ``reconcile._mark_seen``: it is advisory
    (the silence watch reads it), and a heartbeat racing the tick must never make its write stale."""
    ids = list(instance_ids)
    if ids:
        s.execute(update(InstanceRow).where(InstanceRow.id.in_(ids)).values(last_heartbeat_at=now),
                  execution_options={"synchronize_session": False})


def report_hello(s: Session, instance_id: str, now: datetime, *, gpu_name: str, gpu_model: str | None,
                 gpu_count: int, gpu_memory_mib: int | None, source: str) -> bool | None:
    """The agent is up and says what GPUs it sees: an event on the instance, and a warning when the
    machine is not what its offer sold. Returns whether it agrees (None: the instance is not live)."""
    row = s.get(InstanceRow, instance_id)
    if row is None or I(row.state) not in AGENT_LIVE:
        return None
    report_heartbeat(s, [instance_id], now)
    memory = f", {gpu_memory_mib / 1024:.1f} GiB each" if gpu_memory_mib else ""
    seen = f"{gpu_count} x {gpu_name or 'no GPU'}{memory} ({source})"
    agrees = gpu_model == row.gpu and gpu_count == row.gpu_count
    message = f"agent up: {seen}"
    if not agrees:
        message += f"; the offer sold {row.gpu_count} x {row.gpu}"
        log.warning("agent_gpu_mismatch", instance=row.id, offer_gpu=row.gpu, offer_gpu_count=row.gpu_count,
                    seen_gpu=gpu_name, seen_model=gpu_model, seen_count=gpu_count, source=source)
    add_event(s, now, "agent_hello", message, instance_id=row.id, job_id=row.job_id)
    return agrees


# --- reports from the on-instance agent ---------------------------------------------


def report_progress(s: Session, job_id: str, attempt_no: int, epochs_done: int, checkpoint_uri: str | None,
                    now: datetime, source: Literal["agent", "simulated"] = "agent", *,
                    physical_batch: int | None = None) -> None:
    """The agent finished an epoch and uploaded ``last.pt``: that is the new resume point.

    The time the epochs took is a sample for the performance model (``perf_learning``).
    ``physical_batch``: the images per GPU that trained an epoch on this machine (the agent says it
    once per run, and again after halving the batch for CUDA running out of memory), recorded as a
    ``batch_fitted`` event for the memory model to learn from.
    """
    job = s.get(JobRow, job_id)
    attempt = current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return  # a stale report from an older attempt: fenced off
    if physical_batch is not None:
        _batch_fitted(s, job, attempt, physical_batch, now)
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


def _batch_fitted(s: Session, job: JobRow, attempt: AttemptRow, per_gpu: int, now: datetime) -> None:
    row = s.get(InstanceRow, attempt.instance_id) if attempt.instance_id else None
    spec = JobSpec.model_validate(job.spec_json)
    img = f", img {spec.train.img_size}" if spec.train is not None else ""
    on = f" on {row.gpu_count} x {row.gpu}" if row is not None else ""
    add_event(s, now, "batch_fitted", f"attempt {attempt.number}: a batch of {per_gpu} per GPU trains {job.model}"
              f"{img}{on}", job_id=job.id, instance_id=attempt.instance_id)


def report_finished(s: Session, job_id: str, attempt_no: int, ok: bool, now: datetime, message: str = "",
                    outputs: str | None = None) -> None:
    """The agent says the job's process exited; its machine becomes idle and warm. ``outputs``: the
    object-store prefix the agent uploaded what the job made to (``gpusched status JOB`` shows it)."""
    job = s.get(JobRow, job_id)
    attempt = current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return
    if outputs:
        job.outputs_uri = outputs
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


def report_reclaiming(s: Session, instance_id: str, job_id: str, attempt_no: int, at: datetime,
                      now: datetime) -> bool:
    """The agent read the cloud's spot reclaim notice (the machine goes at ``at``) and uploaded its last
    complete checkpoint: the preemption is taken now, not when the cloud's list shows it. The attempt
    ends preempted and the job goes back to the queue to resume from its last checkpoint (one restart
    against ``max_restarts``, like any reclaim); the machine works for nobody and is marked for
    termination (``reclaim_pending``: the tick's ``agent_watch.terminate_reclaimed`` calls the cloud).
    When the cloud's reclaim shows up later, reconcile finds the machine detached and counts nothing
    again. Returns False when (job, attempt) is not this machine's running work."""
    row = s.get(InstanceRow, instance_id)
    assigned = assigned_attempt(s, instance_id, job_id, attempt_no)
    if row is None or assigned is None or A(assigned.attempt.state) is not A.running:
        return False
    reason = f"spot reclaim notice: the cloud takes the machine at {at.strftime('%Y-%m-%d %H:%M:%S')} UTC"
    add_event(s, now, "reclaim_notice", f"{reason}; its agent stopped the job", instance_id=row.id, job_id=job_id)
    ledger.close_interval(s, row.id, now)
    requeue_after_loss(s, row, now, reason=reason)
    row.preempted, row.reason = True, reason
    # It still bills until the cloud takes it: idle time, charged to the team that launched it.
    ledger.open_interval(s, row, kind="idle", job_id=None, team=row.team, project=row.project, at=now)
    return True
