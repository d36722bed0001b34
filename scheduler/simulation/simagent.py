"""The on-instance agent, simulated: runs jobs on sandbox instances in simulated time.

On a real cloud one long-lived agent per machine, started by cloud-init, asks the daemon
for its work, runs the YOLOv9 command, uploads ``last.pt`` after every epoch and reports
each epoch and the exit, and heartbeats while it lives; the daemon's HTTP routes
(``/v1/agent/...``) check that the attempt reported is the machine's own and then call
``agent_reports.report_progress`` / ``report_finished`` / ``report_heartbeat``. Here the
same functions are called directly (the simulated agent cannot name another machine's
attempt, so the routes' check has nothing to refuse) from a model of the job's true
speed: the performance model's estimate times a seeded per-(job, GPU) factor, so
estimates and reality differ the way they do in the field. An agent only makes progress
while its instance runs: a reclaimed spot machine's progress stops at the reclaim, and the
partial epoch it was in is lost, exactly as with a real preemption. Every running machine's
agent heartbeats each step (up to the moment its machine stopped, where that is known), so
the daemon's silence watch (``lifecycle/agent_watch.py``) only fires for an agent a test
makes silent (``silent``). Its first heartbeat stands for the real agent's hello.
A progress report is dated when its last epoch ended, not when the step that found it ran:
the real agent reports within seconds of an epoch, but the simulation jumps from event to
event, and a report dated at the step made the epoch times the daemon learns from as uneven
as those jumps (samples of one run 0.6x to 7x its true speed).

With ``output_bytes`` (the sandbox daemon and the demo) each attempt also writes output, as the real
agent ships its job's (``lifecycle/job_logs.py``), so that ``gpusched logs`` shows a sandbox job: the
command the real agent would run, a line per epoch or shard, the end; every line says it is simulated.
"""

from __future__ import annotations

import math
import random
import shlex
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pydantic import ValidationError
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session, defer

from providers.base import TAG_INSTANCE, TAG_MANAGED, InstanceState, Provider
from scheduler.agent.runner import AgentConfig, command_for, remote_checkpoint
from scheduler.jobs import infer_shards, perf, yolo
from scheduler.lifecycle import gang
from scheduler.lifecycle.agent_reports import report_finished, report_heartbeat, report_progress
from scheduler.lifecycle.job_logs import append_lines, output_end
from scheduler.lifecycle.transitions import current_attempt
from scheduler.models import JobSpec, Kind
from scheduler.states import AttemptState, InstanceRowState
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow
from scheduler.times import utc

# (provider name, cloud instance id) -> when it stopped running, or None while it runs.
EndedAt = Callable[[str, str], datetime | None]


# Kinds whose progress survives a reclaim: training (epochs, last.pt) and inference (shards).
def _resume_uri(spec: JobSpec) -> str | None:
    """What the real agent reports with a unit: the uploaded last.pt, or the labels' prefix."""
    if spec.kind is Kind.infer:
        return infer_shards.output_uri(spec)
    return remote_checkpoint(spec)


class SimAgents:
    def __init__(self, store: Store, providers: Mapping[str, Provider], cluster: str, *, seed: int = 0,
                 speed_spread: float = 0.12, ended_at: EndedAt | None = None,
                 output_bytes: int | None = None) -> None:
        """``ended_at`` (from the sandbox clouds) makes progress exact up to a reclaim even when
        the simulation steps over it; without it, agents ask the provider which instances run.
        ``output_bytes``: write each attempt's (simulated) output, keeping that much per attempt."""
        self.store = store
        self.providers = providers
        self.cluster = cluster
        self.seed = seed
        self.spread = speed_spread
        self.ended_at = ended_at
        self._vcpus = {(name, o.instance_type): o.vcpus for name, p in providers.items() for o in p.offers()}
        self._estimates: dict[tuple[str, str, int, int], perf.Estimate] = {}
        self._specs: dict[str, JobSpec] = {}  # a job's spec never changes once submitted
        self._factors: dict[tuple[str, str], float] = {}
        self._finish_at: dict[tuple[str, int], datetime] = {}
        self.silent: set[str] = set()  # instance rows whose agent says nothing at all (hung, cut off)
        self.output_bytes = output_bytes
        self._told: set[tuple[str, int]] = set()  # attempts whose output has begun
        self._beat_at: datetime | None = None

    def true_factor(self, job_id: str, gpu: str) -> float:
        """How much slower (>1) or faster (<1) than estimated this job really runs on this GPU."""
        factor = self._factors.get((job_id, gpu))
        if factor is None:  # asked for every running attempt twice a tick: a seeded Random each time added up
            rng = random.Random(f"{self.seed}:{job_id}:{gpu}")
            factor = self._factors[(job_id, gpu)] = math.exp(rng.gauss(0.0, self.spread))
        return factor

    def _spec(self, job_id: str, spec_json: dict | None = None, s: Session | None = None) -> JobSpec:
        spec = self._specs.get(job_id)
        if spec is None:
            if spec_json is None and s is not None:
                spec_json = s.scalar(select(JobRow.spec_json).where(JobRow.id == job_id))
            spec = self._specs[job_id] = JobSpec.model_validate(spec_json)
        return spec

    def _estimate_for(self, spec: JobSpec, job_id: str, provider: str, instance_type: str, gpu: str,
                      gpu_count: int, start_epoch: int) -> perf.Estimate:
        key = (job_id, instance_type, gpu_count, start_epoch)
        if key not in self._estimates:
            vcpus = self._vcpus.get((provider, instance_type), 8)
            self._estimates[key] = perf.estimate(spec, gpu, gpu_count, vcpus, epochs_done=start_epoch,
                                                 nodes=spec.resources.nodes)
        return self._estimates[key]

    def _alive(self) -> set[str]:
        alive: set[str] = set()
        for provider in self.providers.values():
            for inst in provider.instances({TAG_MANAGED: self.cluster}):
                if inst.state is InstanceState.running and not inst.preempted:
                    alive.add(inst.tags.get(TAG_INSTANCE, ""))
        return alive

    def step(self, now: datetime) -> int:
        """Advance every running attempt to ``now`` (or to its machine's end); returns jobs finished."""
        self._finish_at = {}
        with self.store.session() as s:
            if now != self._beat_at:  # once per moment: a second step at the same time adds nothing
                self._heartbeat(s, now)
                self._beat_at = now
            running = self._running(s)
            if not running:
                return 0
            alive = self._alive() if self.ended_at is None else None
            # One flush at the commit for every report of the step, not one before each next query:
            # each report touches only its own job, attempt and machine, so no later query of the
            # step reads what an earlier report wrote.
            with s.no_autoflush:
                finished = self._advance(s, now, running, alive)
        return finished

    def step_started(self, now: datetime) -> int:
        """``step`` again at the same ``now``, after a tick: only the attempts the tick started are worked
        out (their finish times, for ``next_event_after``); returns jobs finished.

        The same as a second ``step``: the attempts the first one advanced to ``now`` have nothing more to
        report at ``now`` (their reports are written, and time has not moved), so only their finish times
        are kept, and only while they still run (the second step was 6% of a busy simulation's CPU, now 4%)."""
        if now != self._beat_at:
            return self.step(now)
        with self.store.session() as s:
            running = self._running(s)
            still = {(r.job_id, r.number) for r in running}
            self._finish_at = {k: t for k, t in self._finish_at.items() if k in still}
            new = [r for r in running if (r.job_id, r.number) not in self._finish_at]
            if not new:
                return 0
            alive = self._alive() if self.ended_at is None else None
            with s.no_autoflush:
                return self._advance(s, now, new, alive)

    @staticmethod
    def _running(s: Session) -> list:
        # Plain columns, not ORM rows: this runs twice a tick over every running attempt,
        # and loading (and JSON-decoding) whole rows dominated a busy simulation.
        return s.execute(_RUNNING_ATTEMPTS).all()

    def _advance(self, s: Session, now: datetime, running: list, alive: set[str] | None) -> int:
        """Report what each running attempt did by ``now``; returns the jobs finished.

        What each agent would say is worked out first, then said in the same order: the rows the
        reports move (each job and its machine) are loaded in two queries for all of them, instead of
        two for each report. Working it out reads nothing a report writes."""
        reports = self._reports(s, now, running, alive)
        if not reports:
            return 0
        jobs = {job_id for _, job_id, *_ in reports}
        held = [*s.scalars(_JOBS_AMONG, {"ids": list(jobs)}),
                *s.scalars(_MACHINES_AMONG, {"ids": list({r.id for r in running if r.job_id in jobs})})]
        # Each job's current attempt (the one numbered as its row's ``attempt``: ``tick._act`` writes both
        # together), for all of them in one query rather than one ``current_attempt`` query per report.
        current = {a.job_id: a for a in s.scalars(_CURRENT_ATTEMPTS_OF, {"ids": list(jobs)})}
        finished = 0
        for what, job_id, number, epochs, text, at in reports:
            if what == "output":  # the sandbox's stand-in for the job's output (`gpusched logs`)
                s.flush()  # the output's offsets are read from the rows written before it
                append_lines(s, job_id, number, text or "", now, limit=self.output_bytes or 0)
            elif what == "progress":
                report_progress(s, job_id, number, epochs, text, at or now, source="simulated",
                                attempt=current.get(job_id))
            else:
                report_finished(s, job_id, number, True, now, text or "", attempt=current.get(job_id))
                finished += 1
        del held  # kept until here: the session's identity map holds its rows only while they are used
        return finished

    def _reports(self, s: Session, now: datetime, running: list,
                 alive: set[str] | None) -> list[Report]:
        """What each running attempt's agent reports at ``now``, in order: ("progress", job, attempt,
        epochs done, checkpoint, when the last of them ended), ("finished", job, attempt, 0, message) and,
        when the sandbox writes the jobs' output, ("output", job, attempt, 0, lines)."""
        out: list[Report] = []
        for r in running:
            if r.started_at is None or r.cloud_id is None or r.id in self.silent:
                continue  # not started, or a silent agent: hung, so its job makes no progress either
            until = now
            if alive is not None and r.id not in alive:
                continue
            if self.ended_at is not None:
                ended = self.ended_at(r.provider, r.cloud_id)
                until = min(now, ended) if ended is not None else now
            try:
                spec = self._spec(r.job_id, s=s)
            except ValidationError:
                continue  # a job stored before the bounds: the tick sets it aside, this machine idles
            if spec.resources.nodes > 1:
                job = s.get(JobRow, r.job_id)
                attempt = current_attempt(s, r.job_id)
                gang_until = self._gang_until(s, job, attempt, until, alive) if job and attempt else None
                if gang_until is None:
                    continue
                until = gang_until
            est = self._estimate_for(spec, r.job_id, r.provider, r.instance_type, r.gpu, r.gpu_count,
                                     r.start_epoch)
            factor = self.true_factor(r.job_id, r.gpu)
            told = self.output_bytes is not None
            if told and (r.job_id, r.number) not in self._told:
                _say(out, r, self._first_lines(s, r, spec))
            started = utc(r.started_at)
            elapsed_h = (until - started).total_seconds() / 3600
            work_h = elapsed_h - est.setup_hours * factor
            # Whether the job is done is decided on the finish *time* (the event the simulation
            # jumps to), never on float hours: those can land a hair short of the last epoch at
            # exactly that moment, and with no later event the job would idle on until an
            # unrelated tick.
            if spec.kind in infer_shards.RESUMABLE_KINDS and est.epoch_hours:
                total = infer_shards.work_units(spec) or 1
                epoch_h = est.epoch_hours * factor
                finish_at = started + timedelta(hours=est.setup_hours * factor + (total - r.start_epoch) * epoch_h)
                self._finish_at[(r.job_id, r.number)] = finish_at
                if work_h < 0:
                    continue
                epochs = total if until >= finish_at else min(total, r.start_epoch + int(work_h // epoch_h))
                if epochs > r.epochs_done:
                    if told:
                        _say(out, r, _unit_lines(spec, r.epochs_done, epochs, total, epoch_h, r.gpu))
                    ended = finish_at - timedelta(hours=(total - epochs) * epoch_h)  # its last epoch's end
                    out.append(Report("progress", r.job_id, r.number, epochs, _resume_uri(spec), min(ended, until)))
                if epochs >= total and until == now:
                    unit = "epochs" if spec.kind is Kind.train else "shards"
                    if told:
                        _say(out, r, [f"{_SIM} {total} {unit} done; the job succeeded"])
                    out.append(Report("finished", r.job_id, r.number, 0, f"{total} {unit}"))
            else:
                finish_at = started + timedelta(hours=est.hours * factor)
                self._finish_at[(r.job_id, r.number)] = finish_at
                if until >= finish_at and until == now:
                    if told:
                        _say(out, r, [f"{_SIM} {spec.kind.value} finished; the job succeeded"])
                    out.append(Report("finished", r.job_id, r.number, 0, None))
        return out

    def _first_lines(self, s: Session, r: Any, spec: JobSpec) -> list[str]:
        """The attempt's first lines (once, a daemon restart included): where it runs, what would run there."""
        self._told.add((r.job_id, r.number))
        if output_end(s, r.job_id, r.number) > 0:
            return []
        lines = [f"{_SIM} no real machine runs this job: the sandbox cloud simulates {r.provider} "
                 f"{r.instance_type} ({r.gpu_count}x {r.gpu}) and its agent"]
        command = _command(spec, r.id, r.gpu, r.gpu_count, r.start_epoch)
        if command:
            lines.append(f"{_SIM} on a real machine the agent would run: {command}")
        if r.start_epoch:
            lines.append(f"{_SIM} resuming from the checkpoint after {r.start_epoch} "
                         f"{'shards' if spec.kind is Kind.infer else 'epochs'}")
        return lines


    def _heartbeat(self, s: Session, now: datetime) -> None:
        """Every running machine's agent says it lives: as of ``now``, or of the moment its machine
        stopped running where the sandbox says (the cloud's own news of that reaches reconcile first).

        Without ``ended_at`` no cloud is asked (a listing is a cloud call): machines the store
        believes running beat, and reconcile, which lists every cloud each tick, finds the ones lost."""
        rows = s.execute(_RUNNING_MACHINES).all()
        beats: dict[datetime, list[str]] = {}
        for row_id, provider, cloud_id in rows:
            if row_id in self.silent:
                continue
            at = now
            if self.ended_at is not None and cloud_id is not None:
                ended = self.ended_at(provider, cloud_id)
                at = now if ended is None else min(now, ended)
            beats.setdefault(at, []).append(row_id)
        for at, ids in beats.items():
            report_heartbeat(s, ids, at)

    def _gang_until(self, s: Session, job: JobRow, attempt: AttemptRow, until: datetime,
                    alive: set[str] | None) -> datetime | None:
        """How far a multi-node attempt got: training stops when its first node stops (None: a node is down).

        The attempt (one row, whatever the node count) carries the progress, so the job finishes once."""
        for node in gang.gang_rows(s, job, attempt):
            if node.cloud_id is None or (alive is not None and node.id not in alive):
                return None
            if self.ended_at is not None:
                ended = self.ended_at(node.provider, node.cloud_id)
                if ended is not None:
                    until = min(until, ended)
        return until

    def next_event_after(self, now: datetime) -> datetime | None:
        """The earliest moment a job running at the last ``step`` finishes."""
        later = [t for t in self._finish_at.values() if t > now]
        return min(later) if later else None


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_RUNNING_ATTEMPTS = (
    select(AttemptRow.job_id, AttemptRow.number, AttemptRow.start_epoch, AttemptRow.started_at,
           JobRow.name, JobRow.epochs_done, InstanceRow.id, InstanceRow.provider, InstanceRow.cloud_id,
           InstanceRow.instance_type, InstanceRow.gpu, InstanceRow.gpu_count)
    .join(JobRow, JobRow.id == AttemptRow.job_id)
    .join(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
    .where(AttemptRow.state == AttemptState.running.value)
)
_RUNNING_MACHINES = select(InstanceRow.id, InstanceRow.provider, InstanceRow.cloud_id).where(
    InstanceRow.state == InstanceRowState.running.value)
_JOBS_AMONG = select(JobRow).options(defer(JobRow.plan_json)).where(JobRow.id.in_(bindparam("ids", expanding=True)))
_MACHINES_AMONG = select(InstanceRow).where(InstanceRow.id.in_(bindparam("ids", expanding=True)))
_CURRENT_ATTEMPTS_OF = (
    select(AttemptRow).join(JobRow, (JobRow.id == AttemptRow.job_id) & (JobRow.attempt == AttemptRow.number))
    .where(AttemptRow.job_id.in_(bindparam("ids", expanding=True)))
)

_SIM = "[sandbox]"
_UNIT_LINES = 200  # at most this many epoch or shard lines at once (a simulation may step over many)


def _unit_lines(spec: JobSpec, done: int, now_done: int, total: int, unit_hours: float, gpu: str) -> list[str]:
    """A line per epoch or shard finished since the last step."""
    unit = "shard" if spec.kind is Kind.infer else "epoch"
    first = max(done + 1, now_done - _UNIT_LINES + 1)
    lines = [f"{_SIM} {unit}s {done + 1}-{first - 1} of {total} done"] if first > done + 1 else []
    pace = f"{unit_hours * 60:.1f} min per {unit} on {gpu}"
    return lines + [f"{_SIM} {unit} {n}/{total} done (simulated, {pace})" for n in range(first, now_done + 1)]


def _command(spec: JobSpec, instance_id: str, gpu: str, gpu_count: int, start_epoch: int) -> str | None:
    """The YOLOv9 command line the real agent would start for this attempt (its first shard's for inference)."""
    cfg = AgentConfig(api="", instance_id=instance_id, token="", gpu=gpu, gpu_count=gpu_count)
    try:
        if spec.kind is Kind.infer:
            argv = yolo.infer_command(spec, run_name=spec.name, workdir=cfg.workdir,
                                      shard=infer_shards.shard_name(start_epoch), gpu_count=gpu_count)
        else:
            resume = f"{yolo.run_dir(cfg.workdir, 'train', spec.name)}/weights/last.pt" if start_epoch else None
            argv = command_for(spec, cfg, resume, nodes=spec.resources.nodes)
    except (ValueError, KeyError):  # a job the real agent would refuse to start: the attempt says so itself
        return None
    return shlex.join(argv)


class Report(NamedTuple):
    """One thing an agent says at a step (``SimAgents._reports``)."""

    what: str  # "progress", "finished" or "output"
    job_id: str
    number: int  # the attempt
    epochs: int  # progress: epochs (or shards) done
    text: str | None  # progress: the checkpoint; finished: the message; output: the lines
    at: datetime | None = None  # progress: when the last of those epochs ended


def _say(out: list[Report], r: Any, lines: list[str]) -> None:
    """Queue ``lines`` of output for the attempt ``r`` among its reports."""
    if lines:
        out.append(Report("output", r.job_id, r.number, 0, "".join(line + "\n" for line in lines)))
