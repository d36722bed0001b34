"""State writes shared by the tick's phases and the agent's reports.

Every job, attempt and instance state change goes through ``scheduler.states.move``,
so an illegal transition is a loud bug, never a silently wrong row.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session, defer

from providers.base import Capability, Provider
from scheduler.accounting import ledger
from scheduler.lifecycle import gang
from scheduler.models import JobSpec
from scheduler.states import (
    ATTEMPT_MOVES,
    INSTANCE_MOVES,
    JOB_MOVES,
    JOB_TERMINAL,
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


# A job row without its last plan (``plan_json``: the decision with its runners-up, the row's largest
# column, read only by ``gpusched status JOB``): what the hot paths that load a job to move it load.
# Read inside the session, it still loads on first access; these paths never hand the row out.
_NO_PLAN = (defer(JobRow.plan_json),)


def job_to_move(s: Session, job_id: str) -> JobRow | None:
    """``s.get(JobRow, job_id)``, leaving ``plan_json`` unloaded until read (see ``_NO_PLAN``)."""
    return s.get(JobRow, job_id, options=_NO_PLAN)

# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_LATEST_ATTEMPT = (select(AttemptRow).where(AttemptRow.job_id == bindparam("job_id"))
                   .order_by(AttemptRow.number.desc()).limit(1))


def current_attempt(s: Session, job_id: str) -> AttemptRow | None:
    return s.scalars(_LATEST_ATTEMPT, {"job_id": job_id}).first()


def set_job(job: JobRow, state: JobState, now: datetime, reason: str | None = "") -> None:
    job.state = move(JOB_MOVES, J(job.state), state, "job")
    job.updated_at = now
    if reason != "":
        job.reason = reason


def set_instance(row: InstanceRow, state: InstanceRowState) -> None:
    row.state = move(INSTANCE_MOVES, I(row.state), state, "instance")


def bills_boot(provider: Provider | None) -> bool:
    """Whether the cloud bills a machine from its creation, boot included (Alibaba, Tencent), rather than
    from the moment it first runs (AWS: ``Capability.bills_from_running``). The ledger opens a machine's
    billing at launch for the first, at the first sighting of it running for the second, so that it
    counts the hours the cloud bills. A provider not built (a cloud no longer configured) bills as most do."""
    return provider is None or Capability.bills_from_running not in provider.capabilities


def open_billing(s: Session, row: InstanceRow, now: datetime) -> None:
    kind = "busy" if row.job_id else "idle"
    ledger.open_interval(s, row, kind=kind, job_id=row.job_id, team=row.team, project=row.project, at=now)


def start_job_on(s: Session, row: InstanceRow, now: datetime) -> None:
    """The machine is up: the job's attempt starts (the on-instance agent picks it up)."""
    job = job_to_move(s, row.job_id)
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
    billing = ledger.close_interval(s, row.id, now) is not None
    row.job_id = None
    row.idle_since = now
    # A running machine bills; a booting one only where its cloud bills the boot (it was billing then).
    if I(row.state) is I.running or (I(row.state) is I.pending and billing):
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


def requeue_after_loss(s: Session, row: InstanceRow, now: datetime, *, reason: str,
                       resume: bool = True) -> JobRow | None:
    """The machine ``row`` is lost to its job: the job's attempt ends as preempted, and the job goes back
    to the queue to resume from its last checkpoint (``resume``; else from scratch), or fails once its
    losses outrun ``max_restarts``. The row is detached from the job.

    ``max_restarts`` bounds the losses in a row after which the job got nowhere: a loss the attempt
    checkpointed no progress before (or the job starts over: ``resume`` False, or a kind without
    checkpoints) adds one, and an attempt that checkpointed progress clears the count. So it stops a
    job that cannot get anywhere (a crash loop, reclaims faster than its checkpoints) after
    ``max_restarts`` losses as before, while a spot reclaim is the price of spot, which the planner
    already charges (its expected reclaims, ``planner.cost``). Counting every loss made every run
    longer than about ``max_restarts`` reclaim intervals finish on on-demand; counting the losses
    without progress over the whole run still did for a multi-day run on a market reclaimed every
    two hours, where about one attempt in four is reclaimed during its boot and first epoch (issue 17:
    the long training jobs).

    Returns the job when it counted the loss, None when there was nothing to count (the row worked
    for no job, or its job had already ended): a loss reported twice (the agent's reclaim notice,
    then the cloud's reclaim) is counted once."""
    job_id, row.job_id = row.job_id, None
    if not job_id:
        return None
    job = job_to_move(s, job_id)
    attempt = current_attempt(s, job_id)
    if job is None or attempt is None or J(job.state) in JOB_TERMINAL:
        return None
    attempt.state = move(ATTEMPT_MOVES, A(attempt.state), A.preempted, "attempt")
    attempt.ended_at = now
    attempt.end_epoch = job.epochs_done
    attempt.reason = reason
    # A gang runs only whole: its other nodes are let go (idle, then reaped), not reused for the
    # next attempt, which launches a fresh gang (fleet slots are single machines).
    for other in release_nodes(s, job, attempt, now):
        add_event(s, now, "gang_released", f"node {row.id} of its gang was lost: {reason}",
                  instance_id=other.id, job_id=job.id)
    job.preemptions += 1
    progressed = resume and job.epochs_done > (attempt.start_epoch or 0)
    job.restarts = 0 if progressed else (job.restarts or 0) + 1
    spec = JobSpec.model_validate(job.spec_json)
    set_job(job, J.preempted, now)
    if job.restarts > spec.policy.max_restarts:
        set_job(job, J.failed, now,
                f"lost its machine {job.restarts} times in a row without progress (max_restarts "
                f"{spec.policy.max_restarts}; {job.preemptions} losses in all)")
        job.finished_at = now
    else:
        if not resume:
            # The skypilot-like baseline: code that does not checkpoint starts over, elsewhere.
            job.epochs_done, job.checkpoint_uri = 0, None
        unit = {"train": "epoch", "infer": "shard"}.get(job.kind)
        resumes = f"; resumes from {unit} {job.epochs_done}" if unit else ""
        set_job(job, J.queued, now, f"{reason} on {row.provider} {row.zone} {row.instance_type}{resumes}")
    add_event(s, now, "job_preempted", job.reason or reason, job_id=job.id, instance_id=row.id)
    log.info("job_preempted", job=job.id, attempt=attempt.number, instance=row.id, reason=reason,
             epochs_done=job.epochs_done)
    return job
