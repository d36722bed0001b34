"""Multi-node jobs: an attempt's gang of instance rows, one per node, all in one offer.

A job with ``resources.nodes > 1`` runs as a gang: every attempt writes one instance
row per node ahead of the launches, all in the same offer (zone) and capacity. Node 0
keeps the attempt's own client token (``gs-<job>-a<n>``), so a single-node job is a gang
of one and nothing about it changes; node k >= 1 gets ``gs-<job>-a<n>-n<k>``. The node
index lives in the token (unique and indexed), so no column is needed to find a gang:
its rows are exactly the rows whose tokens the attempt derives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.states import InstanceRowState
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow

_NODE_SUFFIX = re.compile(r"-n(\d+)$")


def node_token(job_id: str, attempt: int, node: int) -> str:
    """Deterministic per (job, attempt, node): the cloud dedupes each node's re-issued launch."""
    base = f"gs-{job_id}-a{attempt}"
    return base if node == 0 else f"{base}-n{node}"


def node_of(token: str) -> int:
    """The node index a client token carries (0 for the attempt's own token)."""
    m = _NODE_SUFFIX.search(token)
    return int(m.group(1)) if m else 0


def nodes_of(job: JobRow) -> int:
    """``resources.nodes`` of the job as submitted (the stored spec is the validated JobSpec)."""
    resources = job.spec_json.get("resources") or {}
    return int(resources.get("nodes", 1))


def gang_rows(s: Session, job: JobRow, attempt: AttemptRow) -> list[InstanceRow]:
    """The attempt's instance rows, by node, whatever their state (absent rows are skipped)."""
    nodes = nodes_of(job)
    tokens = [node_token(job.id, attempt.number, k) for k in range(nodes)]
    rows = s.scalars(select(InstanceRow).where(InstanceRow.client_token.in_(tokens))).all()
    return sorted(rows, key=lambda r: node_of(r.client_token))


def attached(rows: Sequence[InstanceRow], job_id: str) -> list[InstanceRow]:
    """The rows still working for the job (a released or lost node has no job)."""
    return [r for r in rows if r.job_id == job_id]


def all_running(s: Session, job: JobRow, attempt: AttemptRow) -> bool:
    """Whether every node of the attempt runs for the job: only then does a gang start."""
    nodes = nodes_of(job)
    if nodes == 1:
        return True  # a single machine starts as soon as it runs, as it always has
    rows = attached(gang_rows(s, job, attempt), job.id)
    return len(rows) == nodes and all(InstanceRowState(r.state) is InstanceRowState.running for r in rows)
