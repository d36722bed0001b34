"""The month's audit log as ``audit-YYYY-MM.csv``, written beside the monthly report's files.

One row per audit entry of the month (UTC), oldest first: when, who (name, token, role), what (action,
target, team), from where, and whether it was allowed. A cell that a spreadsheet would read as a
formula (a job file named ``=HYPERLINK(...)``) is written with a leading apostrophe, so opening the file
runs nothing.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.orm import Session

from scheduler.accounting.report_render import write_atomic
from scheduler.accounting.reports import month_bounds
from scheduler.settings import Settings
from scheduler.store import audit
from scheduler.store.audit import AuditEntry
from scheduler.store.database import Store

COLUMNS = ("at", "actor", "token_id", "role", "action", "target", "team", "client", "outcome", "status", "detail")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def render_audit_csv(entries: Sequence[AuditEntry]) -> str:
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(COLUMNS)
    for e in entries:
        out.writerow([e.at.isoformat(), *(_cell(getattr(e, c)) for c in COLUMNS[1:])])
    return buf.getvalue()


def month_entries(session: Session, month: str) -> list[AuditEntry]:
    start, end = month_bounds(month)
    return audit.entries(session, since=start, until=end)


def write_audit(settings: Settings, month: str, out_dir: Path, *, store: Store | None = None) -> Path:
    """Write audit-<month>.csv into ``out_dir`` from ``store`` (or the settings' store); returns its path."""
    own = store is None
    store = store or Store(settings.db_url)
    try:
        if own:
            store.migrate()
        with store.session(write=False) as s:
            entries = month_entries(s, month)
    finally:
        if own:
            store.dispose()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"audit-{month}.csv"
    write_atomic(path, render_audit_csv(entries))
    return path
