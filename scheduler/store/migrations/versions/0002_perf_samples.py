"""Observed epoch times, so the performance model learns real training rates.

Revision: 0002
Follows: 0001

Written out in full rather than imported from scheduler.store.tables, so this
revision keeps meaning the same schema after tables.py moves on.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "perf_samples",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(16), nullable=False),
        sa.Column("gpu", sa.String(16), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("img_size", sa.Integer(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=True),
        sa.Column("train_images", sa.Integer(), nullable=False),
        sa.Column("val_images", sa.Integer(), nullable=False),
        sa.Column("epoch_seconds", sa.Float(), nullable=False),
        sa.Column("rate_img_s", sa.Float(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_perf_samples_at", "perf_samples", ["at"])
    op.create_index("ix_perf_samples_job_id", "perf_samples", ["job_id"])
    op.create_index("ix_perf_samples_key", "perf_samples", ["model", "gpu", "img_size", "at"])


def downgrade() -> None:
    # Dropping the table drops its indexes with it.
    op.drop_table("perf_samples")
