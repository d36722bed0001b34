"""Two indexes for questions asked while the history grows: the usage intervals still open (``ledger``'s
month roll-over asks every tick; partial, only rows with no ``end``), and cost records by job (a job's spend,
asked each time a job with a budget is planned).

Without them both read every row the store ever kept: a month of simulation, or a daemon's whole life.

Revision: 0015
Follows: 0014
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_usage_intervals_open", "usage_intervals", ["start"],
                    sqlite_where=sa.text('"end" IS NULL'), postgresql_where=sa.text('"end" IS NULL'))
    op.create_index("ix_cost_records_job_id", "cost_records", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_cost_records_job_id", table_name="cost_records")
    op.drop_index("ix_usage_intervals_open", table_name="usage_intervals")
