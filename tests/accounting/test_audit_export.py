"""The monthly report's audit file (audit-YYYY-MM.csv) and who submitted each job in the report."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone
from pathlib import Path

from scheduler.accounting.audit_export import render_audit_csv, write_audit
from scheduler.accounting.report_delivery import write_and_send
from scheduler.accounting.report_render import render_html, render_markdown
from scheduler.settings import Settings
from scheduler.store import audit
from scheduler.store.database import Store
from scheduler.store.tables import JobRow
from tests.accounting.test_reports import Ledger, nov, report_for

UTC = timezone.utc


def _rows(store: Store) -> None:
    with store.session() as s:
        audit.record(s, datetime(2026, 10, 31, 23, 59, tzinfo=UTC), actor="alice", action="job.submit",
                     outcome="allowed", status=201, target="job-october", team="vision")
        audit.record(s, nov(2, 9), actor="alice", token_id="tok-0123456789ab", role="member", action="job.submit",
                     outcome="allowed", status=201, target="job-1", team="vision", client="10.0.0.7",
                     detail="train yolov9-s from =HYPERLINK(\"http://x\")")
        audit.record(s, nov(3, 9), actor="bob", role="member", action="job.cancel", outcome="refused", status=403,
                     target="job-1", team="vision", client="10.0.0.8", detail="bob acts for team retail")
        audit.record(s, datetime(2026, 12, 1, tzinfo=UTC), actor="alice", action="job.cancel", outcome="allowed",
                     status=200, target="job-december", team="vision")


def test_the_audit_file_holds_the_months_entries_oldest_first(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    store.migrate()
    _rows(store)
    path = write_audit(Settings(_env_file=None, data_dir=tmp_path), "2026-11", tmp_path / "out", store=store)
    store.dispose()
    assert path.name == "audit-2026-11.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert [(r["actor"], r["action"], r["target"], r["outcome"], r["status"], r["client"]) for r in rows] == [
        ("alice", "job.submit", "job-1", "allowed", "201", "10.0.0.7"),
        ("bob", "job.cancel", "job-1", "refused", "403", "10.0.0.8"),
    ]
    assert rows[0]["at"] == "2026-11-02T09:00:00+00:00" and rows[0]["token_id"] == "tok-0123456789ab"


def test_a_cell_a_spreadsheet_would_run_as_a_formula_is_written_as_text(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    store.migrate()
    with store.session() as s:
        audit.record(s, nov(2), actor="alice", action="job.submit", outcome="allowed", status=201,
                     target="=cmd|' /C calc'!A0", detail="@SUM(1)")
    with store.session(write=False) as s:
        text = render_audit_csv(audit.entries(s))
    store.dispose()
    [row] = list(csv.DictReader(io.StringIO(text)))
    assert row["target"] == "'=cmd|' /C calc'!A0" and row["detail"] == "'@SUM(1)"


def test_write_and_send_writes_the_audit_file_beside_the_report(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'g.db'}")
    store.migrate()
    _rows(store)
    sent = write_and_send(Settings(_env_file=None, data_dir=tmp_path), "2026-11", now=datetime(2026, 12, 2, tzinfo=UTC),
                          store=store, send=False)
    store.dispose()
    assert sent.paths["audit"] == tmp_path / "reports" / "audit-2026-11.csv"
    assert sent.paths["audit"].parent == sent.paths["html"].parent
    assert "job-1" in sent.paths["audit"].read_text(encoding="utf-8")


def test_the_report_says_who_submitted_each_job(store: Store) -> None:
    with store.session() as s:
        ledger = Ledger(s)
        ledger.job("job-a", team="vision")
        ledger.job("job-b", team="vision")
        s.get(JobRow, "job-a").submitted_by = "alice@example.com"  # type: ignore[union-attr]
        inst = ledger.instance("i-1", team="vision", price="2", on_demand="4", currency="CNY")
        ledger.cost(inst, nov(2), nov(2, 10), amount="20", on_demand="40", job_id="job-a")
        ledger.cost(inst, nov(3), nov(3, 5), amount="10", on_demand="20", job_id="job-b")
    with store.session() as s:
        report = report_for(s, "2026-11")
    by_job = {j.id: j.submitted_by for j in report.jobs}
    assert by_job == {"job-a": "alice@example.com", "job-b": None}
    md = render_markdown(report)
    assert "| submitted by |" in md and "| alice@example.com |" in md
    assert "by alice@example.com" in render_html(report)
