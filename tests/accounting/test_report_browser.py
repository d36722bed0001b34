"""The HTML report in a real browser (the system's Chromium via Playwright): nothing cut off, charts loaded,
readable on a phone.

Two viewports: a 1280 px desktop, where nothing may reach past the screen and no table may need scrolling,
and a 390 px phone (an iPhone 14's CSS width, with touch and the viewport meta honoured), where the page
must not scroll sideways, the tables scroll inside their own containers and the text stays at a readable
size. A full-page screenshot of each is saved under the test's tmp dir (the path is printed) so a person
can look at what the checks passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from scheduler.accounting.report_charts import DESKTOP as DESKTOP_CHARTS
from scheduler.accounting.report_charts import PHONE as PHONE_CHARTS
from scheduler.accounting.report_charts import ChartStyle
from scheduler.accounting.reports import MonthlyReport, render_html
from scheduler.money import Money
from scheduler.store.tables import JobRow
from tests.accounting.browser import (
    MIN_FONT_PX,
    chromium,
    images,
    layout_problems,
    sync_playwright,
    viewport_meta,
)
from tests.accounting.test_reports import Ledger, mixed_month, nov, report_for

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
CHARTS = 3  # team x capacity, daily, clouds


def busy_month(session: Session, ledger: Ledger) -> MonthlyReport:
    """The mixed month, plus what stretches a layout: many teams, a 63-character job name, team and project
    budgets, a job over its budget, an idle stop, a month still running (forecast and trend rows) with work
    queued."""
    mixed_month(ledger)
    for i in range(6):
        team = f"team-{i}-with-a-rather-long-name-for-attribution"[: 40 + i]
        inst = ledger.instance(f"i-x{i}", provider=("aws", "alibaba", "tencent")[i % 3], team=team,
                               price="3.5", on_demand="9.1", currency="CNY")  # fmt: skip
        jid = f"job-long-{i}"
        session.add(JobRow(id=jid, name=("helmet-detector-v9-" * 4)[:63].rstrip("-"), team=team,
                           project=f"project-{i}", kind="train" if i % 2 else "infer", model="yolov9-e", spec_json={},
                           state="running", submitted_at=nov(1), budget_amount=Decimal(10), budget_currency="CNY",
                           updated_at=nov(1)))  # fmt: skip
        ledger.cost(inst, nov(4 + i, 2), nov(4 + i, 9), amount=str(24 + i), on_demand="63.7", job_id=jid,
                    project=f"project-{i}")  # fmt: skip
    ledger.idle_stop(ledger.instance("i-stop", currency="CNY", price="3"), nov(9, 3))
    # Waiting work: one planned (its estimate from the stored plan), one not planned yet.
    plan = {"choice": {"est_cost": {"amount": "80", "currency": "USD"}, "est_hours": 30}, "alternatives": []}
    for jid, stored in (("job-queued-planned", plan), ("job-queued-unplanned", None)):
        session.add(JobRow(id=jid, name=("queued-helmet-retrain-" * 3)[:63].rstrip("-"), team="vision",
                           project="project-0", kind="train", model="yolov9-c", spec_json={}, state="queued",
                           submitted_at=nov(16), plan_json=stored, updated_at=nov(16)))  # fmt: skip
    budgets = {"vision": Money.parse("100 CNY"), "ocr": Money.parse("50 CNY"),
               "team-0-with-a-rather-long-name-for-attrib": Money.parse("20 USD")}  # fmt: skip
    projects = {"project-0": Money.parse("500 CNY"), "a-project-with-a-name-of-many-words-in-it": Money.parse("1 CNY")}
    return report_for(session, now=nov(16, 12), team_budgets=budgets, project_budgets=projects)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    path = chromium()
    with sync_playwright() as p:
        # --no-sandbox: CI runs the tests as root, where Chromium's sandbox refuses to start.
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def report_file(session: Session, ledger: Ledger, tmp_path: Path) -> Path:
    path = tmp_path / "report-2026-11.html"
    path.write_text(render_html(busy_month(session, ledger)), encoding="utf-8")
    return path


def open_page(browser, report: Path, viewport: dict, **context: object):  # noqa: ANN001, ANN201
    ctx = browser.new_context(viewport=viewport, **context)
    page = ctx.new_page()
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(report.as_uri(), wait_until="load")
    return ctx, page, fetched


def chart_text_px(img: dict, style: ChartStyle) -> float:
    """The size a chart's smallest type is shown at, in CSS px: its size in the PNG, scaled as the page scales it."""
    return style.font_pt * style.dpi / 72 * img["shown"] / img["natural"]


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_at_1280_px_nothing_is_cut_off_and_the_charts_load(browser, report_file: Path, tmp_path: Path) -> None:
    ctx, page, fetched = open_page(browser, report_file, DESKTOP)
    try:
        shot = tmp_path / "report-1280.png"
        page.screenshot(path=str(shot), full_page=True)
        problems = layout_problems(page, wide_tables=True)
        charts = images(page)
    finally:
        ctx.close()
    print(f"screenshot: {shot}")
    width, height = png_size(shot)
    assert width == 1280 and height > DESKTOP["height"]  # the whole page, not the first screen
    assert problems == []
    assert len(charts) == CHARTS
    for img in charts:
        assert img["complete"] and img["natural"] > 0, img
        assert 0 < img["shown"] <= DESKTOP["width"] and not img["phone"], img
        assert chart_text_px(img, DESKTOP_CHARTS) >= MIN_FONT_PX, img
    assert fetched == []  # self-contained: it opens offline and in a mail client


def test_on_a_390_px_phone_it_reads_without_scrolling_sideways(browser, report_file: Path, tmp_path: Path) -> None:
    ctx, page, _ = open_page(browser, report_file, PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    try:
        shot = tmp_path / "report-390.png"
        page.screenshot(path=str(shot), full_page=True)
        meta = viewport_meta(page)
        inner = page.evaluate("() => window.innerWidth")
        problems = layout_problems(page)
        charts = images(page)
        scrolling_tables = page.evaluate(
            "() => [...document.querySelectorAll('.scroll')].filter((s) => s.scrollWidth > s.clientWidth).length")
    finally:
        ctx.close()
    print(f"screenshot: {shot}")
    assert meta is not None and "width=device-width" in meta.replace(" ", "")
    # With the meta tag a phone lays the page out at its own width; without it, at 980 px, shrunk to fit.
    assert inner == PHONE["width"]
    assert png_size(shot)[0] == PHONE["width"] * 2
    assert problems == []
    # The check above would pass on a page with no wide table; this one has some, and they scroll in place.
    assert scrolling_tables > 0
    assert len(charts) == CHARTS
    for img in charts:
        assert img["complete"] and img["natural"] > 0 and 0 < img["shown"] <= PHONE["width"], img
        # The charts drawn for a phone, whose labels stay readable at its width (the wide ones would shrink
        # to half size).
        assert img["phone"], img
        assert chart_text_px(img, PHONE_CHARTS) >= MIN_FONT_PX, img


def test_the_layout_check_finds_what_it_looks_for(browser, tmp_path: Path) -> None:
    """The checks can fail: a page with each fault is caught, fault by fault."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body style='margin:0'>"
        "<div style='width:1500px'>too wide</div>"
        "<table><tr><td>a table left to stretch the page</td></tr></table>"
        "<p style='font-size:9px'>tiny print</p>"
        "<div style='width:200px'>unbreakable" + "x" * 300 + "</div>"
        "<img alt='broken' src='data:image/png;base64,AAAA'>"
        "</body></html>",
        encoding="utf-8",
    )
    ctx, page, _ = open_page(browser, bad, DESKTOP)
    try:
        problems = layout_problems(page)
        charts = images(page)
        meta = viewport_meta(page)
    finally:
        ctx.close()
    text = "\n".join(problems)
    assert "the page scrolls sideways" in text
    assert 'div "too wide" reaches past the viewport' in text
    assert "is not inside a container that scrolls sideways" in text
    assert 'p "tiny print": text at 9px' in text
    assert "its content is" in text  # the unbreakable word spills out of its box
    assert [(c["alt"], c["complete"], c["natural"]) for c in charts] == [("broken", True, 0)]
    assert meta is None
