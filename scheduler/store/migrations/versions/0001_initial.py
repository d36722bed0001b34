"""The first schema: jobs, attempts, instances, usage, costs, idle stops, events.

Revision: 0001
Follows: (none)

Written out in full rather than imported from scheduler.store.tables, so this
revision keeps meaning the same schema after tables.py moves on.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONEY = sa.Numeric(precision=20, scale=8)
TIME = sa.DateTime(timezone=True)

# Tables in creation order (a table only references tables above it).
TABLES = ("events", "instances", "jobs", "attempts", "idle_stops", "usage_intervals", "cost_records")


def _indexes(table: str, *columns: str) -> None:
    for column in columns:
        op.create_index(f"ix_{table}_{column}", table, [column])


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("instance_id", sa.String(40), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("events", "at", "instance_id", "job_id")

    op.create_table(
        "instances",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("zone", sa.String(32), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("gpu", sa.String(16), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("capacity", sa.String(16), nullable=False),
        sa.Column("reserved", sa.Boolean(), nullable=False),
        sa.Column("cloud_id", sa.String(64), nullable=True),
        sa.Column("client_token", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("price_amount", MONEY, nullable=False),
        sa.Column("price_currency", sa.String(3), nullable=False),
        sa.Column("on_demand_amount", MONEY, nullable=False),
        sa.Column("idle_since", TIME, nullable=True),
        sa.Column("idle_stop_minutes", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("running_at", TIME, nullable=True),
        sa.Column("stopped_at", TIME, nullable=True),
        sa.Column("terminated_at", TIME, nullable=True),
        sa.Column("last_seen_at", TIME, nullable=True),
        sa.Column("preempted", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("client_token"),
    )
    op.create_index("ix_instances_cloud", "instances", ["provider", "region", "cloud_id"])
    _indexes("instances", "job_id", "state")

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("model", sa.String(16), nullable=False),
        sa.Column("spec_json", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("submitted_at", TIME, nullable=False),
        sa.Column("deadline_at", TIME, nullable=True),
        sa.Column("budget_amount", MONEY, nullable=True),
        sa.Column("budget_currency", sa.String(3), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("epochs_done", sa.Integer(), nullable=False),
        sa.Column("epochs_total", sa.Integer(), nullable=True),
        sa.Column("checkpoint_uri", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("plan_json", sa.JSON(), nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("jobs", "name", "state", "team")

    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("client_token", sa.String(64), nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("zone", sa.String(32), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("capacity", sa.String(16), nullable=False),
        sa.Column("instance_id", sa.String(40), nullable=True),
        sa.Column("start_epoch", sa.Integer(), nullable=False),
        sa.Column("end_epoch", sa.Integer(), nullable=True),
        sa.Column("est_hours", sa.Float(), nullable=True),
        sa.Column("est_cost_amount", MONEY, nullable=True),
        sa.Column("est_cost_currency", sa.String(3), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("ended_at", TIME, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("client_token"),
        sa.UniqueConstraint("job_id", "number"),
    )
    _indexes("attempts", "instance_id", "job_id", "state")

    op.create_table(
        "idle_stops",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(40), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("gpu", sa.String(16), nullable=False),
        sa.Column("capacity", sa.String(16), nullable=False),
        sa.Column("price_amount", MONEY, nullable=False),
        sa.Column("price_currency", sa.String(3), nullable=False),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("idle_stops", "at", "instance_id")

    op.create_table(
        "usage_intervals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(40), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("gpu", sa.String(16), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("capacity", sa.String(16), nullable=False),
        sa.Column("start", TIME, nullable=False),
        sa.Column("end", TIME, nullable=True),
        sa.Column("accounted", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("usage_intervals", "instance_id", "job_id", "start")

    op.create_table(
        "cost_records",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("usage_interval_id", sa.Integer(), nullable=False),
        sa.Column("month", sa.String(7), nullable=False),
        sa.Column("instance_id", sa.String(40), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("region", sa.String(32), nullable=False),
        sa.Column("gpu", sa.String(16), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("capacity", sa.String(16), nullable=False),
        sa.Column("start", TIME, nullable=False),
        sa.Column("end", TIME, nullable=False),
        sa.Column("hours", MONEY, nullable=False),
        sa.Column("amount", MONEY, nullable=False),
        sa.Column("on_demand_amount", MONEY, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.ForeignKeyConstraint(["usage_interval_id"], ["usage_intervals.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("cost_records", "month", "usage_interval_id")


def downgrade() -> None:
    # Dropping a table drops its indexes with it.
    for table in reversed(TABLES):
        op.drop_table(table)
