"""Leader election: the lease row the daemons on one database take and renew, and the monthly report's
delivery claim, so a report is sent once whichever replica sends it.

Revision: 0012
Follows: 0011

Written out in full rather than imported from scheduler.store.tables, like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "leader_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(160), nullable=False),
        sa.Column("term", sa.Integer(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "report_deliveries",
        sa.Column("month", sa.String(7), primary_key=True),
        sa.Column("holder", sa.String(160), nullable=False),
        sa.Column("term", sa.Integer(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("report_deliveries")
    op.drop_table("leader_lease")
