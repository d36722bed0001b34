"""Job operations shared by the HTTP API and the CLI's local mode: submit, list, show, cancel.

Each function opens its own transaction on the store and returns frozen views,
never live ORM rows, so callers cannot change the store by accident. The views
double as the API's response models.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from scheduler.accounting.ledger import spent_by_job
from scheduler.clock import Clock
from scheduler.errors import GpuschedError, JobFileError, NotFoundError, UserError
from scheduler.jobs.infer_shards import work_units
from scheduler.jobs.jobfile import submit_problems
from scheduler.lifecycle.job_logs import JobLogs, read_output
from scheduler.models import Frozen, JobSpec, Kind
from scheduler.money import FxRates, Money
from scheduler.states import JOB_MOVES, JOB_TERMINAL, InstanceRowState, JobState, move
from scheduler.store.database import Store, add_event, new_id
from scheduler.store.tables import AttemptRow, EventRow, InstanceRow, JobRow
from scheduler.times import utc

DEFAULT_EVENTS = 50
MAX_LIST = 1000
# A cancel can race the tick, which writes the same job row (optimistic versioning).
_CANCEL_TRIES = 3
# Called with the session and the job's view inside the transaction that changes the job: the API writes
# its audit row there, so the change and its row commit together or not at all.
Recorder = Callable[[Session, "JobView"], None]


class JobView(Frozen):
    """One job as `status` lists it."""

    id: str
    name: str
    team: str
    project: str | None
    kind: Kind
    model: str
    state: JobState
    priority: int
    submitted_at: datetime
    deadline_at: datetime | None
    budget: Money | None
    attempt: int
    preemptions: int
    epochs_done: int
    epochs_total: int | None
    reason: str | None
    finished_at: datetime | None
    updated_at: datetime
    submitted_by: str | None = None  # the name on the API token that submitted it


class AttemptView(Frozen):
    number: int
    state: str
    provider: str
    region: str
    zone: str
    instance_type: str
    capacity: str
    instance_id: str | None
    gpu: str | None = None  # the machine's GPU model and count, when the attempt got one
    gpu_count: int | None = None
    start_epoch: int
    end_epoch: int | None
    est_hours: float | None
    est_cost: Money | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    reason: str | None


class EventView(Frozen):
    at: datetime
    kind: str
    message: str
    instance_id: str | None


class JobDetail(JobView):
    """One job with what `status <id>` shows: the spec, the last plan, where its outputs went, attempts and
    recent events."""

    spec: dict[str, Any]
    plan: dict[str, Any] | None
    checkpoint_uri: str | None
    outputs: str | None = None  # the object-store prefix the agent uploaded the job's outputs to
    cost: Money | None = None  # what its machines have cost so far (running ones up to now); None: never ran
    attempts: list[AttemptView]
    events: list[EventView]


# --- views from rows


def _money(amount: Decimal | None, currency: str | None) -> Money | None:
    if amount is None or currency is None or not amount.is_finite():
        # Not finite: a row from before the bounds (scheduler.limits), a budget of 1e999999999 that SQLite
        # keeps as infinity. Listing every job must not fail on it; the tick sets that job aside with why.
        return None
    return Money(amount=amount, currency=currency)


def _opt_utc(dt: datetime | None) -> datetime | None:
    return utc(dt) if dt is not None else None


def _job_fields(row: JobRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "team": row.team,
        "project": row.project,
        "kind": Kind(row.kind),
        "model": row.model,
        "state": JobState(row.state),
        "priority": row.priority,
        "submitted_at": utc(row.submitted_at),
        "deadline_at": _opt_utc(row.deadline_at),
        "budget": _money(row.budget_amount, row.budget_currency),
        "attempt": row.attempt,
        "preemptions": row.preemptions,
        "epochs_done": row.epochs_done,
        "epochs_total": row.epochs_total,
        "reason": row.reason,
        "finished_at": _opt_utc(row.finished_at),
        "updated_at": utc(row.updated_at),
        "submitted_by": row.submitted_by,
    }


def job_view(row: JobRow) -> JobView:
    return JobView(**_job_fields(row))


def _attempt_view(row: AttemptRow, instance: InstanceRow | None = None) -> AttemptView:
    return AttemptView(
        number=row.number,
        state=row.state,
        provider=row.provider,
        region=row.region,
        zone=row.zone,
        instance_type=row.instance_type,
        capacity=row.capacity,
        instance_id=row.instance_id,
        gpu=instance.gpu if instance is not None else None,
        gpu_count=instance.gpu_count if instance is not None else None,
        start_epoch=row.start_epoch,
        end_epoch=row.end_epoch,
        est_hours=row.est_hours,
        est_cost=_money(row.est_cost_amount, row.est_cost_currency),
        created_at=utc(row.created_at),
        started_at=_opt_utc(row.started_at),
        ended_at=_opt_utc(row.ended_at),
        reason=row.reason,
    )


def _event_view(row: EventRow) -> EventView:
    return EventView(at=utc(row.at), kind=row.kind, message=row.message, instance_id=row.instance_id)


# --- operations


def resolve_deadline(spec: JobSpec, now: datetime) -> JobSpec:
    """The spec with a relative deadline ("36h") turned into the absolute time it means from ``now``.

    The stored spec must read back as the same job tomorrow, when "36h" would mean something else.
    """
    deadline = spec.deadline_at(now)
    if deadline is None or deadline == spec.policy.deadline:
        return spec
    policy = spec.policy.model_copy(update={"deadline": utc(deadline)})
    return spec.model_copy(update={"policy": policy})


def submit(store: Store, clock: Clock, spec: JobSpec, *, source: str, ids: random.Random | None = None,
           submitted_by: str | None = None, record: Recorder | None = None) -> JobView:
    """Queue a job. Raises JobFileError when the job cannot be accepted now (e.g. a past deadline).

    ``ids`` makes job ids repeatable (the demo and simulations); the daemon leaves it None.
    ``submitted_by`` names who sent it; ``record`` runs in the job's transaction (the API's audit row).
    """
    now = clock.now()
    problems = submit_problems(spec, now)
    if problems:
        raise JobFileError(source, problems)
    spec = resolve_deadline(spec, now)
    deadline = spec.deadline_at(now)
    budget = spec.policy.budget
    row = JobRow(
        id=new_id("job", ids),
        name=spec.name,
        team=spec.team,
        project=spec.project,
        kind=spec.kind.value,
        model=spec.model,
        spec_json=spec.model_dump(mode="json"),
        state=JobState.queued.value,
        priority=spec.policy.priority,
        submitted_at=now,
        deadline_at=utc(deadline) if deadline else None,
        budget_amount=budget.amount if budget else None,
        budget_currency=budget.currency if budget else None,
        submitted_by=submitted_by,
        attempt=0,
        preemptions=0,
        epochs_done=0,
        epochs_total=work_units(spec),
        updated_at=now,
    )
    with store.session() as s:
        s.add(row)
        by = f" by {submitted_by}" if submitted_by else ""
        add_event(s, now, "submitted", f"submitted from {source}{by}: {spec.kind.value} {spec.model}", job_id=row.id)
        s.flush()
        view = job_view(row)
        if record is not None:
            record(s, view)
        return view


def _state_filter(state: JobState | str | None) -> JobState | None:
    if state is None or isinstance(state, JobState):
        return state
    try:
        return JobState(state)
    except ValueError:
        raise UserError(
            f"unknown job state {state!r}", fix=f"use one of: {', '.join(s.value for s in JobState)}"
        ) from None


def list_jobs(
    store: Store, *, state: JobState | str | None = None, team: str | None = None, limit: int = 100,
    teams: Collection[str] | None = None,
) -> list[JobView]:
    """Newest first, optionally only one state and/or one team; ``teams``: only those teams' jobs."""
    if not 1 <= limit <= MAX_LIST:
        raise UserError(f"limit must be between 1 and {MAX_LIST}, not {limit}")
    wanted = _state_filter(state)
    query = select(JobRow).order_by(JobRow.submitted_at.desc(), JobRow.id.desc()).limit(limit)
    if wanted is not None:
        query = query.where(JobRow.state == wanted.value)
    if team:
        query = query.where(JobRow.team == team)
    if teams is not None:
        query = query.where(JobRow.team.in_(list(teams)))
    with store.session(write=False) as s:
        return [job_view(r) for r in s.scalars(query)]


def job_team(store: Store, job_id: str) -> str:
    """The team a job belongs to (NotFoundError: no such job). A job's team never changes."""
    with store.session(write=False) as s:
        return _load(s, job_id).team


def _load(s: Session, job_id: str) -> JobRow:
    row = s.get(JobRow, job_id)
    if row is None:
        raise NotFoundError(f"no job {job_id!r}", fix="list jobs with `gpusched status`")
    return row


def get_job(store: Store, job_id: str, *, events: int = DEFAULT_EVENTS, fx: FxRates | None = None,
            currency: str | None = None, now: datetime | None = None) -> JobDetail:
    """One job with every attempt and its most recent ``events`` events, oldest first, and what it has cost
    so far: in ``currency`` (converted with ``fx``), else in the currency its clouds bill in; ``now``
    counts a running machine up to then."""
    with store.session(write=False) as s:
        row = _load(s, job_id)
        attempts = s.execute(select(AttemptRow, InstanceRow)
                             .outerjoin(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
                             .where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)).tuples().all()
        recent = s.scalars(
            select(EventRow)
            .where(EventRow.job_id == job_id)
            .order_by(EventRow.at.desc(), EventRow.id.desc())
            .limit(events)
        ).all()
        return JobDetail(
            **_job_fields(row),
            spec=row.spec_json,
            plan=row.plan_json,
            checkpoint_uri=row.checkpoint_uri,
            outputs=row.outputs_uri,
            attempts=[_attempt_view(a, i) for a, i in attempts],
            events=[_event_view(e) for e in reversed(recent)],
            cost=_cost_so_far(s, job_id, fx, currency, now),
        )


def _cost_so_far(s: Session, job_id: str, fx: FxRates | None, currency: str | None,
                 now: datetime | None) -> Money | None:
    try:
        spent = spent_by_job(s, [job_id], fx=fx, now=now).get(job_id)
    except ValueError:  # billed in two currencies and no rates to add them up
        return None
    if spent is not None and currency is not None and fx is not None and spent.currency != currency:
        spent = fx.convert(spent, currency)
    return spent


def job_logs(store: Store, job_id: str, attempt: int | None = None, offset: int = 0, *, limit: int) -> JobLogs:
    """The output of one attempt of a job (the latest by default) from ``offset`` on (``job_logs.read_output``)."""
    with store.session(write=False) as s:
        job = _load(s, job_id)
        try:
            return read_output(s, job, attempt, offset, limit=limit)
        except LookupError as exc:
            numbers = ", ".join(str(n) for n in exc.args[0]) or "none yet"
            raise NotFoundError(f"job {job_id} has no attempt {attempt}",
                                fix=f"its attempts: {numbers}; leave out --attempt for the latest") from None


def _cancel_once(store: Store, now: datetime, job_id: str, record: Recorder | None) -> JobView:
    with store.session() as s:
        row = _load(s, job_id)
        current = JobState(row.state)
        if current is JobState.cancelled:
            view = job_view(row)  # a retried cancel (e.g. after a timeout) is not an error
            if record is not None:
                record(s, view)
            return view
        if current in JOB_TERMINAL:
            raise UserError(
                f"job {job_id} already {current.value}; there is nothing to cancel",
                fix="`gpusched status` shows its outcome",
            )
        row.state = move(JOB_MOVES, current, JobState.cancelled, "job").value
        row.reason = "cancelled by the user"
        row.finished_at = now
        row.updated_at = now
        if current in (JobState.queued, JobState.planned):
            message = f"cancelled while {current.value}"
        else:
            # The lifecycle's next tick frees the machine of any job that ended.
            message = f"cancelled while {current.value}; its instance is released on the next tick"
        add_event(s, now, "cancelled", message, job_id=job_id)
        s.flush()
        view = job_view(row)
        if record is not None:
            record(s, view)
        return view


def cancel(store: Store, clock: Clock, job_id: str, *, record: Recorder | None = None) -> JobView:
    """Cancel a job that has not finished. Cancelling a cancelled job again returns it unchanged.
    ``record`` runs in the cancel's transaction (the API's audit row)."""
    for _ in range(_CANCEL_TRIES):
        try:
            return _cancel_once(store, clock.now(), job_id, record)
        except StaleDataError:
            continue  # the tick changed the job between our read and write: read it again
    raise GpuschedError(
        f"job {job_id} kept changing while it was being cancelled", fix="try `gpusched cancel` again"
    )


# --- counts for /metrics


def job_counts(store: Store) -> dict[JobState, int]:
    """Jobs per state, every state present (zero included) so metric series never vanish."""
    with store.session(write=False) as s:
        rows = s.execute(select(JobRow.state, func.count()).group_by(JobRow.state)).all()
    counts = {state: 0 for state in JobState}
    for state, n in rows:
        counts[JobState(state)] = n
    return counts


def instance_counts(store: Store) -> dict[InstanceRowState, int]:
    """Instances per state, every state present."""
    with store.session(write=False) as s:
        rows = s.execute(select(InstanceRow.state, func.count()).group_by(InstanceRow.state)).all()
    counts = {state: 0 for state in InstanceRowState}
    for state, n in rows:
        counts[InstanceRowState(state)] = n
    return counts
