"""An index on the usage intervals not yet accounted: ``ledger.account`` looks for them on every tick,
and without it read every interval the store ever kept (a month of simulation, or a daemon's whole life).

Partial (only rows with ``accounted`` false), on ``end``: the query asks for closed ones that ended by now.

Revision: 0013
Follows: 0012
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_usage_intervals_unaccounted", "usage_intervals", ["end"],
                    sqlite_where=sa.text("accounted IS 0"), postgresql_where=sa.text("accounted IS false"))


def downgrade() -> None:
    op.drop_index("ix_usage_intervals_unaccounted", table_name="usage_intervals")
