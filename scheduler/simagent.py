"""The on-instance agent, simulated: runs jobs on sandbox instances in simulated time.

On a real cloud the agent started by cloud-init runs the YOLOv9 command, uploads
``last.pt`` after every epoch and reports each epoch and the exit to the daemon,
which calls ``lifecycle.report_progress`` / ``report_finished``. Here the same
two functions are called from a model of the job's true speed: the performance
model's estimate times a seeded per-(job, GPU) factor, so estimates and reality
differ the way they do in the field. An agent only makes progress while the
cloud says its instance is running: a reclaimed spot machine reports nothing,
and the partial epoch it was in is lost, exactly as with a real preemption.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select

from providers.base import TAG_INSTANCE, TAG_MANAGED, InstanceState, Provider
from scheduler import perf
from scheduler.agent_reports import report_finished, report_progress
from scheduler.clock import utc
from scheduler.models import JobSpec, Kind
from scheduler.states import AttemptState
from scheduler.store import Store
from scheduler.tables import AttemptRow, InstanceRow, JobRow


class SimAgents:
    def __init__(self, store: Store, providers: Mapping[str, Provider], cluster: str, *, seed: int = 0,
                 speed_spread: float = 0.12) -> None:
        self.store = store
        self.providers = providers
        self.cluster = cluster
        self.seed = seed
        self.spread = speed_spread

    def true_factor(self, job_id: str, gpu: str) -> float:
        """How much slower (>1) or faster (<1) than estimated this job really runs on this GPU."""
        rng = random.Random(f"{self.seed}:{job_id}:{gpu}")
        return math.exp(rng.gauss(0.0, self.spread))

    def _alive(self) -> set[str]:
        alive: set[str] = set()
        for provider in self.providers.values():
            for inst in provider.instances({TAG_MANAGED: self.cluster}):
                if inst.state is InstanceState.running and not inst.preempted:
                    alive.add(inst.tags.get(TAG_INSTANCE, ""))
        return alive

    def step(self, now: datetime) -> int:
        """Advance every running attempt to ``now``; returns how many jobs finished."""
        finished = 0
        with self.store.session() as s:
            running = s.execute(
                select(AttemptRow, JobRow, InstanceRow)
                .join(JobRow, JobRow.id == AttemptRow.job_id)
                .join(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
                .where(AttemptRow.state == AttemptState.running.value)
            ).all()
            if not running:
                return 0
            alive = self._alive()
            for attempt, job, inst in running:
                if inst.id not in alive or attempt.started_at is None:
                    continue
                spec = JobSpec.model_validate(job.spec_json)
                est = perf.estimate(spec, inst.gpu, inst.gpu_count, epochs_done=attempt.start_epoch,
                                    nodes=spec.resources.nodes)
                factor = self.true_factor(job.id, inst.gpu)
                elapsed_h = (now - utc(attempt.started_at)).total_seconds() / 3600
                work_h = elapsed_h - est.setup_hours * factor
                if work_h < 0:
                    continue
                if spec.kind is Kind.train and est.epoch_hours:
                    total = spec.train.epochs if spec.train else 0
                    epochs = min(total, attempt.start_epoch + int(work_h // (est.epoch_hours * factor)))
                    if epochs > job.epochs_done:
                        uri = f"{spec.data.uri.rstrip('/')}/runs/{job.name}/weights/last.pt" if spec.data else None
                        report_progress(s, job.id, attempt.number, epochs, uri, now)
                    if epochs >= total:
                        report_finished(s, job.id, attempt.number, True, now, f"{total} epochs")
                        finished += 1
                elif elapsed_h >= est.hours * factor:
                    report_finished(s, job.id, attempt.number, True, now)
                    finished += 1
        return finished
