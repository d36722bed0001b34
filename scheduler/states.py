"""The job, attempt and instance state machines. Every state write goes through ``move``.

job:       queued -> planned -> provisioning -> running -> succeeded | failed | cancelled
           running -> preempted -> queued (attempt+1, resume from the last checkpoint)
instance:  requested -> pending -> running -> stopping -> stopped -> terminating -> terminated
"""

from __future__ import annotations

from enum import StrEnum

from scheduler.errors import IllegalTransition


class JobState(StrEnum):
    queued = "queued"
    planned = "planned"
    provisioning = "provisioning"
    running = "running"
    preempted = "preempted"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


class AttemptState(StrEnum):
    launching = "launching"  # intent written, cloud call made or about to be
    running = "running"
    preempted = "preempted"
    launch_failed = "launch_failed"  # the cloud refused (no capacity, quota): try another offer
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


class InstanceRowState(StrEnum):
    requested = "requested"  # intent written; the cloud may or may not have it yet
    pending = "pending"
    running = "running"
    stopping = "stopping"
    stopped = "stopped"
    terminating = "terminating"
    terminated = "terminated"


J, A, I = JobState, AttemptState, InstanceRowState

JOB_MOVES: dict[JobState, frozenset[JobState]] = {
    J.queued: frozenset({J.planned, J.failed, J.cancelled}),
    J.planned: frozenset({J.provisioning, J.running, J.queued, J.cancelled}),
    J.provisioning: frozenset({J.running, J.queued, J.preempted, J.failed, J.cancelled}),
    J.running: frozenset({J.succeeded, J.failed, J.cancelled, J.preempted}),
    J.preempted: frozenset({J.queued, J.failed, J.cancelled}),
    J.succeeded: frozenset(),
    J.failed: frozenset(),
    J.cancelled: frozenset(),
}

ATTEMPT_MOVES: dict[AttemptState, frozenset[AttemptState]] = {
    A.launching: frozenset({A.running, A.preempted, A.launch_failed, A.failed, A.cancelled}),
    A.running: frozenset({A.succeeded, A.failed, A.preempted, A.cancelled}),
    A.preempted: frozenset(),
    A.launch_failed: frozenset(),
    A.succeeded: frozenset(),
    A.failed: frozenset(),
    A.cancelled: frozenset(),
}

INSTANCE_MOVES: dict[InstanceRowState, frozenset[InstanceRowState]] = {
    I.requested: frozenset({I.pending, I.running, I.terminating, I.terminated}),
    I.pending: frozenset({I.running, I.stopping, I.terminating, I.terminated}),
    I.running: frozenset({I.stopping, I.stopped, I.terminating, I.terminated}),
    I.stopping: frozenset({I.stopped, I.terminating, I.terminated}),
    I.stopped: frozenset({I.pending, I.running, I.terminating, I.terminated}),
    I.terminating: frozenset({I.terminated}),
    I.terminated: frozenset(),
}

JOB_TERMINAL = frozenset({J.succeeded, J.failed, J.cancelled})
# Asked as ``state IN (open)``, not ``NOT IN (terminal)``: the index on the state then finds the few open jobs
# instead of a scan of every job the store kept.
JOB_OPEN = tuple(sorted(x.value for x in J if x not in JOB_TERMINAL))
INSTANCE_LIVE = frozenset({I.requested, I.pending, I.running, I.stopping, I.stopped, I.terminating})
# Live and not stopped: a machine with something still to happen. Values, asked as ``state IN``, which the state
# index answers (``NOT IN (stopped, terminated)`` read every machine the store kept).
INSTANCE_AWAKE = tuple(sorted(x.value for x in INSTANCE_LIVE if x is not I.stopped))
# States in which the cloud bills for compute.
INSTANCE_BILLING = frozenset({I.pending, I.running, I.stopping, I.terminating})


def can_move(table: dict, src: StrEnum, dst: StrEnum) -> bool:
    return src == dst or dst in table[src]


def move(table: dict, src: StrEnum, dst: StrEnum, what: str = "") -> StrEnum:
    """Return ``dst`` if ``src -> dst`` is allowed (staying put is allowed), else raise."""
    if not can_move(table, src, dst):
        raise IllegalTransition(f"illegal {what} transition {src} -> {dst}".replace("  ", " "))
    return dst
