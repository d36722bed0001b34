"""The store's tables (SQLAlchemy 2 declarative). Alembic migrations mirror these.

Money columns are Numeric with a separate currency column; times are ``UtcDateTime``:
written as UTC and read back as aware UTC on every backend (SQLite keeps no offset).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from scheduler.times import utc

MONEY = Numeric(20, 8)


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that is UTC both ways: SQLite stores the wall-clock
    digits and returns naive values, so parameters are converted to UTC on the way in
    (query parameters too) and results come back aware. Done per value by the type,
    which is far cheaper than fixing every loaded row afterwards."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), index=True)
    team: Mapped[str] = mapped_column(String(63), index=True)
    project: Mapped[str | None] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(16))
    spec_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)
    priority: Mapped[int] = mapped_column(Integer, default=50)
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime())
    deadline_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    budget_amount: Mapped[Decimal | None] = mapped_column(MONEY)
    budget_currency: Mapped[str | None] = mapped_column(String(3))
    # Who queued it: the name on the API token that submitted it (None: stored before tokens had names).
    submitted_by: Mapped[str | None] = mapped_column(String(63))
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # number of the latest attempt
    preemptions: Mapped[int] = mapped_column(Integer, default=0)  # every machine lost to the job
    # The losses in a row that spend max_restarts: none made checkpointed progress; an attempt
    # that did clears it (lifecycle.transitions).
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    epochs_done: Mapped[int] = mapped_column(Integer, default=0)
    epochs_total: Mapped[int | None] = mapped_column(Integer)
    checkpoint_uri: Mapped[str | None] = mapped_column(Text)
    # Where the agent uploaded what the job made (weights, metrics, exports, labels): an object-store prefix.
    outputs_uri: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)  # why it waits, was refused or failed
    plan_json: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # last decision, with alternatives
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    version: Mapped[int] = mapped_column(Integer, default=1)

    __mapper_args__ = {"version_id_col": version}


class AttemptRow(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    client_token: Mapped[str] = mapped_column(String(64), unique=True)
    provider: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(32))
    zone: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    capacity: Mapped[str] = mapped_column(String(16))
    instance_id: Mapped[str | None] = mapped_column(ForeignKey("instances.id"), index=True)
    start_epoch: Mapped[int] = mapped_column(Integer, default=0)
    end_epoch: Mapped[int | None] = mapped_column(Integer)
    est_hours: Mapped[float | None] = mapped_column()
    est_cost_amount: Mapped[Decimal | None] = mapped_column(MONEY)
    est_cost_currency: Mapped[str | None] = mapped_column(String(3))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)  # migration 0014
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    reason: Mapped[str | None] = mapped_column(Text)
    # Multi-node: the address rank 0's agent advertised for this attempt; the other ranks
    # wait for it to start PyTorch's launcher (agent_reports.report_rendezvous).
    master_addr: Mapped[str | None] = mapped_column(String(45))


class InstanceRow(Base):
    __tablename__ = "instances"
    __table_args__ = (Index("ix_instances_cloud", "provider", "region", "cloud_id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    provider: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(32))
    zone: Mapped[str] = mapped_column(String(32))
    instance_type: Mapped[str] = mapped_column(String(64))
    gpu: Mapped[str] = mapped_column(String(16))
    gpu_count: Mapped[int] = mapped_column(Integer)
    capacity: Mapped[str] = mapped_column(String(16))
    reserved: Mapped[bool] = mapped_column(Boolean, default=False)
    cloud_id: Mapped[str | None] = mapped_column(String(64))
    client_token: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    job_id: Mapped[str | None] = mapped_column(String(40), index=True)  # busy with; None = idle
    team: Mapped[str] = mapped_column(String(63))  # idle time is charged to the team that launched it
    project: Mapped[str | None] = mapped_column(String(63))
    price_amount: Mapped[Decimal] = mapped_column(MONEY)  # per hour, at launch; 0 for reserved
    price_currency: Mapped[str] = mapped_column(String(3))
    on_demand_amount: Mapped[Decimal] = mapped_column(MONEY)  # per hour, same currency, for savings
    idle_since: Mapped[datetime | None] = mapped_column(UtcDateTime())
    idle_stop_minutes: Mapped[int] = mapped_column(Integer, default=10)
    # "fixed": warm idle_stop_minutes; "learned": at most that, and only where it pays (idle_window.py).
    idle_window: Mapped[str] = mapped_column(String(8), default="fixed", server_default="fixed")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    running_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    stopped_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    terminated_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    last_seen_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    # When its on-instance agent last said anything (hello, work, heartbeat, a report); None: never.
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    preempted: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str | None] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, default=1)

    __mapper_args__ = {"version_id_col": version}


class UsageIntervalRow(Base):
    """A span during which one instance billed, busy with one job or idle."""

    __tablename__ = "usage_intervals"
    # ``ledger.account`` asks every tick for the closed intervals not yet accounted: a handful, found by
    # this index instead of a scan of every interval the store ever kept (migration 0013).
    # Open intervals (no ``end``): the month roll-over asks for them every tick (migration 0015).
    __table_args__ = (Index("ix_usage_intervals_unaccounted", "end", sqlite_where=text("accounted IS 0"),
                            postgresql_where=text("accounted IS false")),
                      Index("ix_usage_intervals_open", "start", sqlite_where=text('"end" IS NULL'),
                            postgresql_where=text('"end" IS NULL')))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    job_id: Mapped[str | None] = mapped_column(String(40), index=True)
    team: Mapped[str] = mapped_column(String(63))
    project: Mapped[str | None] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(8))  # busy | idle
    provider: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(32))
    gpu: Mapped[str] = mapped_column(String(16))
    instance_type: Mapped[str] = mapped_column(String(64))
    capacity: Mapped[str] = mapped_column(String(16))
    start: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    end: Mapped[datetime | None] = mapped_column(UtcDateTime())  # None = still open
    accounted: Mapped[bool] = mapped_column(Boolean, default=False)


class CostRecordRow(Base):
    """Priced usage, split at month boundaries. Amounts are in the price's own currency."""

    __tablename__ = "cost_records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    usage_interval_id: Mapped[int] = mapped_column(ForeignKey("usage_intervals.id"), index=True)
    month: Mapped[str] = mapped_column(String(7), index=True)  # YYYY-MM
    instance_id: Mapped[str] = mapped_column(String(40))
    job_id: Mapped[str | None] = mapped_column(String(40), index=True)  # a job's spend (migration 0015)
    team: Mapped[str] = mapped_column(String(63))
    project: Mapped[str | None] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(8))  # busy | idle
    provider: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(32))
    gpu: Mapped[str] = mapped_column(String(16))
    instance_type: Mapped[str] = mapped_column(String(64))
    capacity: Mapped[str] = mapped_column(String(16))
    start: Mapped[datetime] = mapped_column(UtcDateTime())
    end: Mapped[datetime] = mapped_column(UtcDateTime())
    hours: Mapped[Decimal] = mapped_column(MONEY)
    amount: Mapped[Decimal] = mapped_column(MONEY)
    on_demand_amount: Mapped[Decimal] = mapped_column(MONEY)  # the same hours at on-demand price
    currency: Mapped[str] = mapped_column(String(3))


class IdleStopRow(Base):
    """The idle reaper stopped or terminated a machine nobody was using."""

    __tablename__ = "idle_stops"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    action: Mapped[str] = mapped_column(String(16))  # stopped | terminated
    team: Mapped[str] = mapped_column(String(63))
    project: Mapped[str | None] = mapped_column(String(63))
    provider: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(16))
    capacity: Mapped[str] = mapped_column(String(16))
    price_amount: Mapped[Decimal] = mapped_column(MONEY)  # per hour the machine would have kept billing
    price_currency: Mapped[str] = mapped_column(String(3))


class EventRow(Base):
    """Audit trail: what happened to a job or instance, in words, for `status` and debugging."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    job_id: Mapped[str | None] = mapped_column(String(40), index=True)
    instance_id: Mapped[str | None] = mapped_column(String(40), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)


class PerfSampleRow(Base):
    """One observed training epoch time: the performance model learns from these.

    ``rate_img_s`` is per GPU (``perf.observed_rate``), so samples from 1, 4 or
    8 GPUs of one model pool under one (model, gpu, img_size) key, and GPU-bound:
    divided by the share its machine's data loader let through
    (``perf_rates.loader_share``), so samples from 4 and 32 vCPUs pool too.
    ``loader_share`` is that share (1 where the loader kept up or the machine is
    not in the catalog); ``epoch_seconds`` is what was observed. Rows written
    before migration 0016 have no share until the daemon's start divides them
    (``perf_learning.rebase_samples``).
    """

    __tablename__ = "perf_samples"
    # measured_rates() reads the newest samples of each key.
    __table_args__ = (Index("ix_perf_samples_key", "model", "gpu", "img_size", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    job_id: Mapped[str] = mapped_column(String(40), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(16))
    gpu: Mapped[str] = mapped_column(String(16))
    gpu_count: Mapped[int] = mapped_column(Integer)
    nodes: Mapped[int] = mapped_column(Integer)
    img_size: Mapped[int] = mapped_column(Integer)
    batch: Mapped[int | None] = mapped_column(Integer)  # physical batch per GPU, when known
    train_images: Mapped[int] = mapped_column(Integer)
    val_images: Mapped[int] = mapped_column(Integer)
    epoch_seconds: Mapped[float] = mapped_column()  # one epoch, train + val
    rate_img_s: Mapped[float] = mapped_column()
    source: Mapped[str] = mapped_column(String(16))  # agent | simulated
    loader_share: Mapped[float | None] = mapped_column(Float)  # migration 0016


class BudgetAlertRow(Base):
    """A monthly budget threshold (a team's or a project's) that was crossed and announced: each is sent once,
    a restart or a second daemon included (the unique key is claimed before sending and released only when no
    channel took it)."""

    __tablename__ = "budget_alerts"
    __table_args__ = (UniqueConstraint("scope", "name", "month", "threshold_pct",
                                       name="uq_budget_alerts_scope_name_month_pct"),)  # fmt: skip

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(16), default="team", server_default="team")  # team | project
    name: Mapped[str] = mapped_column(String(63))  # the team's or the project's
    month: Mapped[str] = mapped_column(String(7))  # YYYY-MM, UTC
    threshold_pct: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    actual_amount: Mapped[Decimal] = mapped_column(MONEY)  # billed this month when it was crossed
    budget_amount: Mapped[Decimal] = mapped_column(MONEY)
    currency: Mapped[str] = mapped_column(String(3))
    delivered: Mapped[str] = mapped_column(Text, default="")  # the channels that took it, in words


class ApiTokenRow(Base):
    """A person's or a service's API token: a role, the teams it acts for, an expiry. Only the SHA-256 of
    the token is kept; the token itself is shown once, when it is made (``scheduler.store.tokens``)."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # tok-<12 hex>, also inside the token
    name: Mapped[str] = mapped_column(String(63))  # the person or service, as jobs and the audit log name it
    role: Mapped[str] = mapped_column(String(16))  # admin | team-admin | member | viewer
    teams: Mapped[list[str]] = mapped_column(JSON)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    created_by: Mapped[str] = mapped_column(String(63))
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime())  # None: never
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_by: Mapped[str | None] = mapped_column(String(63))


class AuditRow(Base):
    """Who did what to which job or token, when, from where, and whether it was allowed: every change
    made through the API and every call it refused."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    actor: Mapped[str] = mapped_column(String(63))  # a token's name; "api-token" for GPUSCHED_API_TOKEN
    token_id: Mapped[str | None] = mapped_column(String(40))
    role: Mapped[str | None] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(32))  # job.submit, job.cancel, token.create ...
    target: Mapped[str | None] = mapped_column(String(128))  # a job or token id, or a path
    team: Mapped[str | None] = mapped_column(String(63), index=True)  # the team the target belongs to
    client: Mapped[str | None] = mapped_column(String(64))  # the caller's address as the daemon saw it
    outcome: Mapped[str] = mapped_column(String(8))  # allowed | refused
    status: Mapped[int] = mapped_column(Integer)  # the HTTP status answered
    detail: Mapped[str] = mapped_column(Text, default="")


class JobLogRow(Base):
    """A piece of one attempt's output (the job's stdout and stderr as its agent shipped it): whole lines,
    ``start`` bytes (UTF-8) into the attempt's output. ``gpusched logs`` reads them; past
    ``GPUSCHED_JOB_LOG_BYTES`` per attempt the oldest pieces are dropped (``lifecycle/job_logs.py``)."""

    __tablename__ = "job_logs"
    __table_args__ = (Index("ix_job_logs_attempt", "job_id", "attempt", "start"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(40))
    attempt: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(BigInteger)  # bytes of this attempt's output before this piece
    size: Mapped[int] = mapped_column(Integer)  # bytes of ``text``, UTF-8
    text: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UtcDateTime())  # when it last grew


class LeaderLeaseRow(Base):
    """Who leads: one row per lease name (the daemons' is ``tick``), taken and renewed by a compare-and-set
    (``scheduler/store/lease.py``). ``term`` grows by one each time another holder takes it: the fence a
    deposed leader's writes are checked against."""

    __tablename__ = "leader_lease"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(160))  # host:pid:random of the daemon; '' before the first
    term: Mapped[int] = mapped_column(Integer)
    acquired_at: Mapped[datetime] = mapped_column(UtcDateTime())  # when this holder took it
    renewed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ReportDeliveryRow(Base):
    """The monthly report of a month, claimed by one daemon before it is sent, so replicas send it once
    (``scheduler/accounting/report_once.py``). A claim left undelivered by a leader that lost its lease may
    be taken by a later term."""

    __tablename__ = "report_deliveries"

    month: Mapped[str] = mapped_column(String(7), primary_key=True)  # YYYY-MM
    holder: Mapped[str] = mapped_column(String(160))
    term: Mapped[int] = mapped_column(Integer)
    claimed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    outcome: Mapped[str] = mapped_column(Text, default="")  # the channels and what each did, in words
