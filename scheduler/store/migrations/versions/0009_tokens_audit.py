"""People and services get API tokens of their own (a role, teams, an expiry; only a hash is kept), the API
keeps an audit log of changes and refused calls, and each job records who submitted it.

Revision: 0009
Follows: 0008

Written out in full rather than imported from scheduler.store.tables, like 0001.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("teams", sa.JSON(), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(63), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(63), nullable=True),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(63), nullable=False),
        sa.Column("token_id", sa.String(40), nullable=True),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(128), nullable=True),
        sa.Column("team", sa.String(63), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])
    op.create_index("ix_audit_log_team", "audit_log", ["team"])
    with op.batch_alter_table("jobs") as batch:
        # Jobs stored before keep None: nobody recorded who sent them.
        batch.add_column(sa.Column("submitted_by", sa.String(63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("submitted_by")
    op.drop_index("ix_audit_log_team", table_name="audit_log")
    op.drop_index("ix_audit_log_at", table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_table("api_tokens")
