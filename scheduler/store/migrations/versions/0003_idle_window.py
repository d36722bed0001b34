"""Instances remember whether their warm time after a job is fixed or learned (idle_window.py).

Revision: 0003
Follows: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("idle_window", sa.String(8), nullable=False, server_default="fixed"))


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("idle_window")
