"""Jobs count apart the machine losses that spend their restart budget (``max_restarts``): a loss after
which the job had checkpointed no further than its attempt began spends one; a reclaim that the job
resumes from a later checkpoint does not (``lifecycle.transitions.requeue_after_loss``).

Revision: 0008
Follows: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        # Jobs stored before counted every loss: they keep that count.
        batch.add_column(sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE jobs SET restarts = preemptions")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("restarts")
