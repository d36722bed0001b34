"""Training samples say what share of the GPU-bound rate their machine's data loader let through.

Since this revision ``perf_samples.rate_img_s`` is the GPU's rate: the observed one divided by
``loader_share`` (``perf_rates.loader_share``, from the machine's vCPUs), so that samples from a 4-vCPU and
a 32-vCPU machine of one GPU pool. Rows written before it hold the machine's rate and get NULL here; the
share needs the instance catalog and the performance model, which the store does not import, so the
daemon's start divides them (``perf_learning.rebase_samples``), once.

Revision: 0016
Follows: 0015
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("perf_samples") as batch:
        batch.add_column(sa.Column("loader_share", sa.Float(), nullable=True))


def downgrade() -> None:
    # Back to the machine's rate, which the older code reads.
    op.execute("UPDATE perf_samples SET rate_img_s = rate_img_s * loader_share WHERE loader_share IS NOT NULL")
    with op.batch_alter_table("perf_samples") as batch:
        batch.drop_column("loader_share")
