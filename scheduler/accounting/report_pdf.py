"""The monthly report as a PDF (ReportLab), for the mail: the headline, team budgets, breakdowns, charts,
and the clouds' bills against the ledger when the report has them.

Not WeasyPrint (HTML to PDF): it needs the system's Pango library, which ``pip`` cannot install, so a
machine with Python alone could not make the PDF. ReportLab installs from wheels only; the PDF is built
from the same ``MonthlyReport`` and the same chart PNGs as the HTML page, with the same rounding
(``report_render``'s formatters), so the two agree figure for figure.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from xml.sax.saxutils import escape

from scheduler.accounting.bill_render import (
    BILL_HEADERS,
    MISSING_HEADERS,
    UNKNOWN_HEADERS,
    bill_cells,
    bills_notes,
    missing_cells,
    unknown_cells,
)
from scheduler.accounting.report_models import MonthlyReport
from scheduler.accounting.report_render import (
    BREAKDOWN_HEADERS,
    BREAKDOWNS,
    BUDGET_HEADERS,
    breakdown_cells,
    budget_cells,
    fmt_money,
    fmt_pct,
    render_charts,
    summary_rows,
)

__all__ = ["render_pdf", "write_pdf"]

_GRID = "#d9dee4"
_HEAD = "#eef1f4"


def render_pdf(report: MonthlyReport) -> bytes:
    """The report as PDF bytes (A4, landscape: the breakdown tables are wide)."""
    # Imported here: only a report that is mailed or written as PDF pays ReportLab's import time.
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4, landscape
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.units import cm
    from reportlab.platypus import Image, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    styles = getSampleStyleSheet()
    small = styles["BodyText"].clone("small", fontSize=8, leading=10)
    cell = styles["BodyText"].clone("cell", fontSize=7.5, leading=9)
    r = report
    story: list = []

    def para(text: str, style=styles["BodyText"]) -> Paragraph:
        return Paragraph(escape(text), style)

    def table(headers: tuple[str, ...], rows: list[tuple[str, ...]], widths: list[float] | None = None) -> Table:
        data = [[Paragraph(f"<b>{escape(h)}</b>", cell) for h in headers]]
        data += [[Paragraph(escape(v), cell) for v in row] for row in rows]
        t = Table(data, colWidths=widths, repeatRows=1, hAlign="LEFT")
        t.setStyle(TableStyle([
            ("GRID", (0, 0), (-1, -1), 0.4, colors.HexColor(_GRID)),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor(_HEAD)),
            ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ]))  # fmt: skip
        return t

    story.append(Paragraph(escape(f"GPU spend report - {r.month}"), styles["Title"]))
    story.append(para(f"Generated {r.generated_at:%Y-%m-%d %H:%M} UTC; all amounts in {r.currency}.", small))
    story.append(Spacer(1, 0.3 * cm))
    if r.empty:
        story.append(para(f"No spend recorded for {r.month}."))
    else:
        story.append(table(("figure", "value"), summary_rows(r), [9 * cm, 9 * cm]))
    if r.team_budgets:
        story.append(Paragraph("Team budgets", styles["Heading2"]))
        story.append(para("Billed this month against each team's monthly budget, and the forecast to the month's "
                          "end; at 100% a team's new jobs wait.", small))
        story.append(table(
            ("team", "budget", "actual", "used", "forecast", "forecast used"),
            [(t.team, fmt_money(t.budget), fmt_money(t.actual), fmt_pct(t.used_pct), fmt_money(t.forecast),
              fmt_pct(t.forecast_pct) + (" (over)" if t.forecast_over else "")) for t in r.team_budgets],
        ))  # fmt: skip
    if r.project_budgets:
        story.append(Paragraph("Project budgets", styles["Heading2"]))
        story.append(para("Billed this month against each project's monthly budget, and the forecast; alerted "
                          "as team budgets are, no job held back.", small))
        story.append(table(("project", *BUDGET_HEADERS), [budget_cells(t) for t in r.project_budgets]))
    if not r.empty:
        for _, attr, title in BREAKDOWNS:
            story.append(Paragraph(f"By {title.lower()}", styles["Heading2"]))
            story.append(table((title, *BREAKDOWN_HEADERS), [breakdown_cells(b) for b in getattr(r, attr)]))
        charts = render_charts(r)
        if charts:
            story.append(Paragraph("Charts", styles["Heading2"]))
        for uri in charts.values():
            png = base64.b64decode(uri.split(",", 1)[1])
            img = Image(io.BytesIO(png))
            scale = min(1.0, 24 * cm / img.drawWidth)  # layout, not money: floats are fine
            img.drawWidth, img.drawHeight = img.drawWidth * scale, img.drawHeight * scale
            story += [img, Spacer(1, 0.3 * cm)]
    if r.bills is not None:  # a month without spend can still be billed (a leak)
        story.append(Paragraph("Bills vs ledger", styles["Heading2"]))
        story.append(para(f"Each cloud's own bill for {r.bills.month}, matched to the ledger instance by instance, "
                          f"in the cloud's currency; a difference within {r.bills.tolerance_pct.normalize():f}% "
                          "is expected.", small))
        story.append(table(BILL_HEADERS, [bill_cells(c) for c in r.bills.clouds]))
        unknown = [unknown_cells(c.cloud, u) for c in r.bills.clouds for u in c.unknown]
        if unknown:
            story.append(para("Billed instances gpusched does not know:", small))
            story.append(table(UNKNOWN_HEADERS, unknown))
        lacking = [missing_cells(c.cloud, m) for c in r.bills.clouds for m in c.missing]
        if lacking:
            story.append(para("Ledger instances the bills lack:", small))
            story.append(table(MISSING_HEADERS, lacking))
        story += [para(n, small) for n in bills_notes(r.bills)]
    story.append(Paragraph("Notes", styles["Heading2"]))
    story += [para(f"- {n}", small) for n in r.notes]

    buf = io.BytesIO()
    doc = SimpleDocTemplate(buf, pagesize=landscape(A4), title=f"GPU spend report {r.month}", author="gpusched",
                            leftMargin=1.5 * cm, rightMargin=1.5 * cm, topMargin=1.5 * cm, bottomMargin=1.5 * cm)
    doc.build(story)
    return buf.getvalue()


def write_pdf(report: MonthlyReport, out_dir: Path) -> Path:
    """Write ``report-<month>.pdf`` into ``out_dir`` (whole or not at all) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"report-{report.month}.pdf"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(render_pdf(report))
    tmp.replace(path)
    return path
