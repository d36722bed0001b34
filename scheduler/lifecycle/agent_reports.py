"""Reports from the on-instance agent: it is up (hello), what it should do (work), it is alive
(heartbeat), an epoch finished (a new resume point), the cloud gave notice that it takes the
machine back (a spot reclaim), the job exited.

One long-lived agent runs on each machine and speaks for that instance row (its token names the
instance, not a job). The HTTP routes (``scheduler/app/api.py``, ``/v1/agent/...``) are thin over
these functions: they check the token, then ask ``assigned_attempt`` whether the job and attempt
a report names are the ones assigned to that instance (409 otherwise), then call the same
``report_*`` function the simulated agent (``scheduler/simulation/simagent.py``) calls directly.
Stale reports from an earlier attempt are fenced off by the attempt number as well.

A machine's token is trusted only as far as its job and attempt allow (``*_refusal`` below; the routes
call them before the ``report_*`` effect, and every refusal is an ``agent_refused`` event on the job):
checkpoint and output URIs only under the job's own output prefix (``agent.outputs.outputs_prefix``),
progress that only goes forward and stays within the job's epochs or shards, one rendezvous per
attempt from rank 0 of a multi-node job with a routable address. A job that ended (cancelled,
failed, succeeded) is no machine's work any more, and a terminated machine's token opens nothing.
Text from machines is stored without control characters (``printable``).
"""

from __future__ import annotations

import ipaddress
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import structlog
from sqlalchemy import bindparam, update
from sqlalchemy.orm import Session

from scheduler.accounting import ledger
from scheduler.agent.outputs import outputs_prefix
from scheduler.jobs.infer_shards import work_units
from scheduler.lifecycle import gang
from scheduler.lifecycle.perf_learning import learn_from_progress
from scheduler.lifecycle.transitions import (
    current_attempt,
    job_to_move,
    make_idle,
    release_nodes,
    requeue_after_loss,
    set_job,
)
from scheduler.models import JobSpec
from scheduler.states import (
    ATTEMPT_MOVES,
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
    if J(job.state) in JOB_TERMINAL:
        return None  # cancelled (its attempt ends on the next tick), failed or done: no machine's work any more
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


# --- what a machine's agent may write --------------------------------------------------

# The cloud gives a spot machine minutes of notice (AWS two, Alibaba and Tencent about five): a notice
# further than this from the daemon's clock is not one.
RECLAIM_NOTICE_WINDOW = timedelta(hours=6)
# Addresses no peer should dial: the clouds' metadata services that are not link-local already
# (Alibaba's 100.100.100.200, AWS's IPv6 fd00:ec2::254).
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("fd00:ec2::254")})


@dataclass(frozen=True)
class Refusal:
    """Why a machine may not write what it sent. ``kind``: ``forbidden`` (not its job's to write, 403),
    ``invalid`` (a value its job does not allow, 400), ``conflict`` (already said otherwise, 409)."""

    kind: Literal["forbidden", "invalid", "conflict"]
    error: str
    fix: str


def machine_refusal(s: Session, instance_id: str) -> str | None:
    """Why a (genuine, unexpired) machine token opens nothing any more, or None: its instance row is
    unknown or terminated. A stopping or stopped machine still hears ``exit`` from ``work_for``."""
    row = s.get(InstanceRow, instance_id)
    if row is None:
        return f"instance {instance_id} is unknown to this daemon"
    if I(row.state) is I.terminated:
        return f"instance {instance_id} is terminated"
    return None


def printable(text: str) -> str:
    """Text from a machine without control characters (terminal escapes, NULs): shown as it is stored."""
    return "".join(c if c in "\n\t" or unicodedata.category(c)[0] != "C" else " " for c in text)


def _refused(s: Session, assigned: Assigned, instance_id: str, refusal: Refusal, now: datetime) -> Refusal:
    add_event(s, now, "agent_refused", printable(f"from {instance_id}: {refusal.error}"), job_id=assigned.job.id,
              instance_id=instance_id)
    log.warning("agent_refused", instance=instance_id, job_id=assigned.job.id, attempt=assigned.attempt.number,
                why=refusal.error)
    return refusal


def _spec(job: JobRow) -> JobSpec:
    return JobSpec.model_validate(job.spec_json)


def _uri_refusal(spec: JobSpec, field: str, uri: str) -> Refusal | None:
    """``uri`` must lie under the job's own output prefix (its job file says where: the dataset's
    ``runs/<name>/``, ``infer.output``, the exported weights' folder), with no ``.``/``..`` step."""
    prefix = outputs_prefix(spec)
    if prefix is None:
        return Refusal("forbidden", f"{field} {uri}: job {spec.name} writes nothing to object storage",
                       f"send no {field}")
    rest = uri[len(prefix):] if uri.startswith(prefix) else None
    if rest is None and uri == prefix.rstrip("/"):
        rest = ""
    steps = (rest or "").split("/")
    if rest is None or any(step in (".", "..") for step in steps) or any(c in rest for c in "\\?#"):
        return Refusal("forbidden", f"{field} {uri} is outside job {spec.name}'s output prefix {prefix}",
                       f"write under {prefix} and report a URI there")
    return None


def progress_refusal(s: Session, assigned: Assigned, instance_id: str, epochs_done: int,
                     checkpoint_uri: str | None, now: datetime) -> Refusal | None:
    """Whether ``report_progress`` may take this report: the count goes forward (the same count again
    is a retry, taken as a no-op), within the job's epochs or shards, and the resume point lies under
    the job's output prefix. A refusal is an ``agent_refused`` event."""
    job = assigned.job
    spec = _spec(job)
    total = work_units(spec) or 0
    unit = "shards" if total and spec.infer is not None else "epochs"
    refusal: Refusal | None = None
    if epochs_done > total:
        refusal = Refusal("invalid", f"epochs_done {epochs_done} is more than job {job.id}'s {total} {unit}",
                          f"report the {unit} finished, at most {total}")
    elif epochs_done < job.epochs_done:
        refusal = Refusal("invalid", f"epochs_done {epochs_done} is behind job {job.id}'s {job.epochs_done} "
                                     f"{unit}: progress only goes forward", "report the count of finished units")
    elif checkpoint_uri is not None:
        refusal = _uri_refusal(spec, "checkpoint_uri", checkpoint_uri)
    elif epochs_done > job.epochs_done and outputs_prefix(spec) is not None:
        refusal = Refusal("invalid", f"epochs_done {epochs_done} comes without its checkpoint_uri",
                          "send the resume point the finished units were uploaded to")
    return _refused(s, assigned, instance_id, refusal, now) if refusal else None


def finished_refusal(s: Session, assigned: Assigned, instance_id: str, outputs: str | None,
                     now: datetime) -> Refusal | None:
    """Whether ``report_finished`` may take the outputs prefix: under the job's own output prefix."""
    refusal = _uri_refusal(_spec(assigned.job), "outputs", outputs) if outputs else None
    return _refused(s, assigned, instance_id, refusal, now) if refusal else None


def address_problem(addr: str) -> str | None:
    """Why the other nodes must not dial ``addr``, or None: it must be a unicast address a peer in the
    same network reaches (not loopback, link-local such as 169.254.169.254, unspecified, multicast,
    reserved, or a cloud's metadata service)."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return f"{addr!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        return f"{addr} names a network interface: give the address alone"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for bad, what in ((ip.is_loopback, "loopback"), (ip.is_link_local, "link-local"),
                      (ip.is_unspecified, "unspecified"), (ip.is_multicast, "multicast"),
                      (ip.is_reserved, "reserved"), (ip in METADATA_ADDRESSES, "a cloud metadata service")):
        if bad:
            return f"{addr} is {what}: the other nodes cannot reach rank 0 there"
    return None


def rendezvous_refusal(s: Session, assigned: Assigned, instance_id: str, addr: str,
                       now: datetime) -> Refusal | None:
    """Whether rank 0 may advertise ``addr``: a multi-node job, a routable address, once per attempt
    (the same address again is a retry)."""
    refusal: Refusal | None = None
    problem = address_problem(addr)
    if assigned.nodes <= 1:
        refusal = Refusal("invalid", f"job {assigned.job.id} runs on one node: it has no rendezvous",
                          "a single-node attempt starts without one")
    elif problem is not None:
        refusal = Refusal("invalid", problem, "advertise the machine's private address in its network "
                                              "(GPUSCHED_NODE_ADDR in the agent's environment)")
    elif assigned.attempt.master_addr not in (None, addr):
        refusal = Refusal("conflict", f"attempt {assigned.attempt.number} of job {assigned.job.id} already has "
                                      f"its rendezvous at {assigned.attempt.master_addr}",
                          "a gang meets at one address per attempt")
    return _refused(s, assigned, instance_id, refusal, now) if refusal else None


def reclaim_refusal(at: datetime, now: datetime) -> Refusal | None:
    """A reclaim notice names a moment near now (``RECLAIM_NOTICE_WINDOW``)."""
    if abs(at - now) > RECLAIM_NOTICE_WINDOW:
        return Refusal("invalid", f"a reclaim notice for {at.isoformat()} is not near the daemon's time "
                                  f"{now.isoformat()}", "pass on the time the cloud's notice gives")
    return None


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_HEARD = (update(InstanceRow).where(InstanceRow.id.in_(bindparam("ids", expanding=True)))
          .values(last_heartbeat_at=bindparam("heard", type_=InstanceRow.last_heartbeat_at.type)))


def report_heartbeat(s: Session, instance_ids: Iterable[str], now: datetime) -> None:
    """The agents of these instances were heard at ``now`` (any call of theirs counts).

    One UPDATE that leaves the row version alone, like ``reconcile._mark_seen``: it is advisory
    (the silence watch reads it), and a heartbeat racing the tick must never make its write stale."""
    ids = list(instance_ids)
    if ids:
        s.execute(_HEARD, {"ids": ids, "heard": now}, execution_options={"synchronize_session": False})


def report_hello(s: Session, instance_id: str, now: datetime, *, gpu_name: str, gpu_model: str | None,
                 gpu_count: int, gpu_memory_mib: int | None, source: str) -> bool | None:
    """The agent is up and says what GPUs it sees: an event on the instance, and a warning when the
    machine is not what its offer sold. Returns whether it agrees (None: the instance is not live)."""
    row = s.get(InstanceRow, instance_id)
    if row is None or I(row.state) not in AGENT_LIVE:
        return None
    report_heartbeat(s, [instance_id], now)
    memory = f", {gpu_memory_mib / 1024:.1f} GiB each" if gpu_memory_mib else ""
    seen = f"{gpu_count} x {printable(gpu_name) or 'no GPU'}{memory} ({source})"
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
                    physical_batch: int | None = None, attempt: AttemptRow | None = None) -> None:
    """The agent finished an epoch and uploaded ``last.pt``: that is the new resume point.

    The time the epochs took is a sample for the performance model (``perf_learning``).
    ``physical_batch``: the images per GPU that trained an epoch on this machine (the agent says it
    once per run, and again after halving the batch for CUDA running out of memory), recorded as a
    ``batch_fitted`` event for the memory model to learn from.
    ``attempt``: the job's current attempt where the caller loaded it in ``s`` already (``current_attempt``).
    """
    job = job_to_move(s, job_id)
    attempt = attempt if attempt is not None else current_attempt(s, job_id)
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
                    outputs: str | None = None, *, attempt: AttemptRow | None = None) -> None:
    """The agent says the job's process exited; its machine becomes idle and warm. ``outputs``: the
    object-store prefix the agent uploaded what the job made to (``gpusched status JOB`` shows it).
    ``attempt``: as for ``report_progress``."""
    job = job_to_move(s, job_id)
    attempt = attempt if attempt is not None else current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return
    message = printable(message)
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
