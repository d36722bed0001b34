"""Budget alerts sent: one row per team, month and threshold crossed, so none is sent twice.

Revision: 0007
Follows: 0006

Written out in full rather than imported from scheduler.store.tables, like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_alerts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("month", sa.String(7), nullable=False),
        sa.Column("threshold_pct", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actual_amount", sa.Numeric(20, 8), nullable=False),
        sa.Column("budget_amount", sa.Numeric(20, 8), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("delivered", sa.Text(), nullable=False),
        sa.UniqueConstraint("team", "month", "threshold_pct", name="uq_budget_alerts_team_month_pct"),
    )


def downgrade() -> None:
    op.drop_table("budget_alerts")
