"""An index on when attempts were created: the warm-machine memo (``lifecycle/idle_window.py``) asks for
the last week's attempts every ten minutes, and without it read every attempt the store ever kept.

Revision: 0014
Follows: 0013
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_attempts_created_at", "attempts", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_attempts_created_at", table_name="attempts")
