"""Budget alerts for projects too: each sent alert row says whose budget it was, a team's or a project's.

``team`` becomes ``name`` beside a new ``scope`` ("team" | "project"); rows stored before are teams'. The
unique key that makes each alert go out once is now (scope, name, month, threshold): a team and a project
of the same name are alerted apart.

Revision: 0011
Follows: 0010
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budget_alerts") as batch:
        batch.drop_constraint("uq_budget_alerts_team_month_pct", type_="unique")
        batch.add_column(sa.Column("scope", sa.String(16), nullable=False, server_default="team"))
        batch.alter_column("team", new_column_name="name", existing_type=sa.String(63), existing_nullable=False)
    with op.batch_alter_table("budget_alerts") as batch:  # apart: SQLite's copy-and-move drops it otherwise
        batch.create_unique_constraint("uq_budget_alerts_scope_name_month_pct",
                                       ["scope", "name", "month", "threshold_pct"])


def downgrade() -> None:
    op.execute("DELETE FROM budget_alerts WHERE scope <> 'team'")  # the old table has no place for them
    with op.batch_alter_table("budget_alerts") as batch:
        batch.drop_constraint("uq_budget_alerts_scope_name_month_pct", type_="unique")
        batch.alter_column("name", new_column_name="team", existing_type=sa.String(63), existing_nullable=False)
        batch.drop_column("scope")
    with op.batch_alter_table("budget_alerts") as batch:
        batch.create_unique_constraint("uq_budget_alerts_team_month_pct", ["team", "month", "threshold_pct"])
