"""The jobs' output, per attempt, as their agents ship it (``gpusched logs``): one row per piece of whole
lines, the oldest dropped past the per-attempt limit (``scheduler/lifecycle/job_logs.py``).

Revision: 0010
Follows: 0009

Written out in full rather than imported from scheduler.store.tables, like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_logs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_job_logs_attempt", "job_logs", ["job_id", "attempt", "start"])


def downgrade() -> None:
    op.drop_index("ix_job_logs_attempt", table_name="job_logs")
    op.drop_table("job_logs")
