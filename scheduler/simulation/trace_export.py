"""``gpusched trace export``: the store's jobs of one month as a trace ``gpusched simulate`` replays.

A team's own month, replayed under other settings or policies, is a what-if on its real work.
Each job is written as it was submitted: its job file (the store keeps it, with a relative
deadline already resolved to the time it stood for) at the moment it arrived. Every job submitted
in the month (UTC, as the monthly report counts) is written, whatever became of it: a what-if
replays the demand, not one policy's results.
"""

from __future__ import annotations

from sqlalchemy import select

from scheduler.accounting.reports import month_bounds
from scheduler.errors import UserError
from scheduler.jobs.jobfile import parse_job
from scheduler.simulation.trace_file import TraceEntry
from scheduler.store.database import Store
from scheduler.store.tables import JobRow
from scheduler.times import utc

__all__ = ["export_trace"]


def export_trace(store: Store, month: str) -> list[TraceEntry]:
    """The jobs submitted in ``month`` (``YYYY-MM``), in the order they arrived.

    Raises ``UserError`` when the month has none, and a ``JobFileError`` naming the job when a
    stored job file no longer validates (a store from an older gpusched).
    """
    start, end = month_bounds(month)
    with store.session(write=False) as s:
        rows = s.execute(select(JobRow.id, JobRow.submitted_at, JobRow.spec_json)
                         .where(JobRow.submitted_at >= start, JobRow.submitted_at < end)
                         .order_by(JobRow.submitted_at, JobRow.id)).all()
    if not rows:
        where = store.url.render_as_string(hide_password=True)
        raise UserError(f"no job was submitted in {month} in the store at {where}",
                        fix="check the month and GPUSCHED_DATA_DIR (or GPUSCHED_DATABASE_URL)")
    return [TraceEntry(at=utc(at), job=parse_job(spec, f"job {job_id}")) for job_id, at, spec in rows]
