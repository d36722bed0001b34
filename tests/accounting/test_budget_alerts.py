"""Team-month budgets: in the report (budget vs actual vs forecast) and alerts at 50 / 80 / 100%, once each."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from scheduler.accounting.budget_alerts import check_budget_alerts
from scheduler.accounting.reports import monthly_report
from scheduler.settings import Settings
from scheduler.store.database import Store
from scheduler.store.tables import BudgetAlertRow
from tests.accounting.receivers import smtp_server, webhook_receiver
from tests.accounting.test_reports import Ledger, nov


@pytest.fixture
def store(tmp_path: Path):
    s = Store(f"sqlite:///{tmp_path / 'g.db'}")
    s.migrate()
    yield s
    s.dispose()


def spend(store: Store, iid: str, amount: str, *, team: str = "vision", start: datetime = nov(2)) -> None:
    """One billed record of ``amount`` CNY for ``team`` (ten hours on an instance of its own)."""
    with store.session() as s:
        ledger = Ledger(s)
        inst = ledger.instance(iid, team=team, price="1", on_demand="2", currency="CNY")
        ledger.cost(inst, start, start.replace(hour=start.hour + 10), amount=amount, on_demand=amount)


def settings_for(tmp_path: Path, **kw) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, team_budgets='{"vision": "100 CNY", "retail": "20 USD"}',
                    **kw)


def sent_thresholds(store: Store) -> list[tuple[str, int]]:
    with store.session(write=False) as s:
        return sorted((r.name, r.threshold_pct) for r in s.scalars(select(BudgetAlertRow)))


# --- in the report ----------------------------------------------------------------------------------


def test_the_report_shows_each_team_budget_against_actual_and_forecast(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "30")
    spend(store, "i-2", "9", team="retail")
    settings = settings_for(tmp_path, fx_usd_cny="7.5")
    report = monthly_report(settings, "2026-11", now=nov(16), store=store)  # 15 of 30 days
    rows = {t.team: t for t in report.team_budgets}
    assert set(rows) == {"vision", "retail"}
    v, r = rows["vision"], rows["retail"]
    assert (v.budget.amount, v.actual.amount, v.forecast.amount) == (Decimal(100), Decimal(30), Decimal(60))
    assert (v.used_pct, v.forecast_pct, v.over_budget, v.forecast_over) == (30, 60, False, False)
    assert r.budget.amount == Decimal(150) and r.budget.currency == "CNY"  # 20 USD at 7.5
    assert (r.actual.amount, r.forecast.amount, r.forecast_over) == (Decimal(9), Decimal(18), False)
    # The same rows in every rendering.
    from scheduler.accounting.report_render import render_csv, render_html, render_markdown

    assert "| vision | 100.00 CNY | 30.00 CNY | 30.0% | 60.00 CNY | 60.0% |" in render_markdown(report)
    assert "team_forecast,vision,,,,,,,60.00,CNY,60.00" in render_csv(report)
    assert "<h2>Team budgets</h2>" in render_html(report)


def test_a_team_with_a_budget_and_no_spend_is_shown_at_zero(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "30")
    report = monthly_report(settings_for(tmp_path), "2026-11", now=nov(30), store=store)
    retail = next(t for t in report.team_budgets if t.team == "retail")
    assert retail.actual.amount == 0 and retail.used_pct == 0 and not retail.over_budget


# --- alerts -------------------------------------------------------------------------------------------


def test_each_threshold_is_announced_once_even_across_a_restart(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "30")
    with webhook_receiver() as (base, posts):
        settings = settings_for(tmp_path, webhooks=f"slack={base}/slack/x,wecom={base}/wecom/y?key=k")
        assert check_budget_alerts(settings, store, nov(16)) == []  # 30%: below every threshold

        spend(store, "i-2", "25", start=nov(3))  # 55%
        [alert] = check_budget_alerts(settings, store, nov(16))
        assert (alert.scope, alert.name, alert.thresholds, alert.recorded) == ("team", "vision", (50,), True)
        assert [o.channel for o in alert.outcomes if o.ok] == ["slack", "wecom"]
        [slack] = posts.for_service("slack")
        assert slack["blocks"][0]["text"]["text"] == "Budget alert: team vision passed 50% of its 2026-11 GPU budget"
        assert "*Spent (billed)*: 55.00 CNY of 100.00 CNY (55.0%)" in slack["text"]

        assert check_budget_alerts(settings, store, nov(16, 1)) == []  # nothing new
        restarted = Store(store.url.render_as_string(hide_password=False))
        try:
            assert check_budget_alerts(settings, restarted, nov(16, 2)) == []  # a restart remembers
        finally:
            restarted.dispose()

        spend(store, "i-3", "50", start=nov(4))  # 105%: past 80 and 100 at once, one message for 100
        [alert] = check_budget_alerts(settings, store, nov(17))
        assert alert.thresholds == (80, 100)
        wecom = posts.for_service("wecom")
        assert len(wecom) == 2 and "passed 100%" in wecom[1]["markdown"]["content"]
        assert "new jobs of the team wait" in wecom[1]["markdown"]["content"]
    assert sent_thresholds(store) == [("vision", 50), ("vision", 80), ("vision", 100)]


def test_an_alert_no_channel_took_is_tried_again(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "85")
    with webhook_receiver() as (base, posts):
        refusing = settings_for(tmp_path, webhooks=f"dingtalk={base}/refuse/dingtalk/robot?access_token=t0k3n99")
        [alert] = check_budget_alerts(refusing, store, nov(16))
        assert not alert.recorded and not alert.outcomes[0].ok and "310000" in alert.outcomes[0].detail
        assert sent_thresholds(store) == []  # released: the next check tries again
        working = settings_for(tmp_path, webhooks=f"dingtalk={base}/dingtalk/robot?access_token=t0k3n99")
        [again] = check_budget_alerts(working, store, nov(16, 1))
        assert again.recorded and again.thresholds == (50, 80)
        assert len(posts.for_service("dingtalk")) == 1 and "passed 80%" in posts.for_service("dingtalk")[0][
            "markdown"]["title"]
    assert sent_thresholds(store) == [("vision", 50), ("vision", 80)]


def test_an_alert_is_mailed_too(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "60")
    with smtp_server() as (smtp, box):
        settings = settings_for(tmp_path, smtp_url=smtp, report_mail_to="lead@example.com")
        [alert] = check_budget_alerts(settings, store, nov(16))
    assert alert.recorded and [o.channel for o in alert.outcomes] == ["mail"]
    [(_, rcpts, msg)] = box.mails
    assert rcpts == ["lead@example.com"]
    assert msg["Subject"] == "Budget alert: team vision passed 50% of its 2026-11 GPU budget"
    assert "Spent (billed): 60.00 CNY of 100.00 CNY (60.0%)" in msg.get_content()


def test_without_channels_an_alert_is_recorded_as_going_nowhere(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "60")
    [alert] = check_budget_alerts(settings_for(tmp_path), store, nov(16))
    assert alert.recorded and alert.outcomes == ()
    with store.session(write=False) as s:
        [row] = s.scalars(select(BudgetAlertRow)).all()
    assert row.delivered.startswith("no channel is set up") and row.actual_amount == Decimal(60)


def test_thresholds_are_configurable_and_a_new_month_starts_over(tmp_path: Path, store: Store) -> None:
    spend(store, "i-1", "95")
    settings = settings_for(tmp_path, budget_alert_thresholds="90")
    [alert] = check_budget_alerts(settings, store, nov(16))
    assert alert.thresholds == (90,)
    spend(store, "i-2", "95", start=datetime.fromisoformat("2026-12-02T00:00:00+00:00"))
    [december] = check_budget_alerts(settings, store, datetime.fromisoformat("2026-12-10T00:00:00+00:00"))
    assert (december.month, december.thresholds) == ("2026-12", (90,))


def test_bad_threshold_and_webhook_settings_say_what_is_wrong(tmp_path: Path) -> None:
    from scheduler.errors import SettingsError
    from scheduler.settings import load_settings

    with pytest.raises(SettingsError, match="between 1 and 1000"):
        load_settings(_env_file=None, budget_alert_thresholds="0,50")
    with pytest.raises(SettingsError) as info:
        load_settings(_env_file=None, webhooks="teams=https://example.com/hook/s3cr3tt0ken")
    assert "unknown webhook service 'teams'" in info.value.message and "s3cr3tt0ken" not in info.value.message


def test_a_machine_still_running_counts_and_the_check_writes_no_ledger_row(tmp_path: Path, store: Store) -> None:
    from scheduler.store.tables import CostRecordRow

    with store.session() as s:
        ledger = Ledger(s)
        inst = ledger.instance("i-live", team="vision", price="10", on_demand="20", currency="CNY")
        ledger.interval(inst, nov(16))  # open: the tick has not written its cost yet
    [alert] = check_budget_alerts(settings_for(tmp_path), store, nov(16, 6))  # 6 h at 10 CNY: 60%
    assert alert.thresholds == (50,) and alert.used_pct == "60.0%"
    with store.session(write=False) as s:
        assert s.scalars(select(CostRecordRow)).all() == []


# --- project budgets ----------------------------------------------------------------------------------


def project_spend(store: Store, iid: str, amount: str, project: str | None, *, team: str = "vision",
                  start: datetime = nov(2)) -> None:
    with store.session() as s:
        ledger = Ledger(s)
        inst = ledger.instance(iid, team=team, price="1", on_demand="2", currency="CNY")
        ledger.cost(inst, start, start.replace(hour=start.hour + 10), amount=amount, on_demand=amount,
                    job_id=None, project=project)


def project_settings(tmp_path: Path, **kw) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path, project_budgets='{"helmet": "200 CNY", "vision": "10 USD"}',
                    **kw)


def test_the_report_shows_each_project_budget_against_actual_and_forecast(tmp_path: Path, store: Store) -> None:
    project_spend(store, "i-1", "50", "helmet")
    project_spend(store, "i-2", "40", "helmet", team="retail")  # a project spans teams
    project_spend(store, "i-3", "70", None)  # no project: in no project's budget
    report = monthly_report(project_settings(tmp_path, fx_usd_cny="7.5"), "2026-11", now=nov(16), store=store)
    rows = {p.project: p for p in report.project_budgets}
    assert set(rows) == {"helmet", "vision"} and report.team_budgets == ()
    helmet, vision = rows["helmet"], rows["vision"]
    assert (helmet.budget.amount, helmet.actual.amount, helmet.forecast.amount) == (200, 90, 180)
    assert (helmet.used_pct, helmet.forecast_pct, helmet.over_budget, helmet.forecast_over) == (45, 90, False, False)
    assert (vision.budget.amount, vision.actual.amount) == (75, 0)  # the team "vision" is not the project
    from scheduler.accounting.report_render import render_csv, render_html, render_markdown
    from scheduler.accounting.report_xlsx import render_xlsx

    md = render_markdown(report)
    assert "## Project budgets" in md and "| helmet | 200.00 CNY | 90.00 CNY | 45.0% | 180.00 CNY | 90.0% |" in md
    assert "project_forecast,helmet,,,,,,,180.00,CNY,90.00" in render_csv(report)
    assert "<h2>Project budgets</h2>" in render_html(report, phone_charts=False)
    import io

    from openpyxl import load_workbook

    sheet = list(load_workbook(io.BytesIO(render_xlsx(report)))["Budgets"].iter_rows(values_only=True))
    assert ("project", "helmet", 200, 90) in {tuple(r[:4]) for r in sheet}


def test_a_project_is_alerted_at_the_same_thresholds_apart_from_a_team_of_its_name(tmp_path: Path,
                                                                                   store: Store) -> None:
    project_spend(store, "i-1", "110", "helmet", team="retail")
    project_spend(store, "i-2", "60", "vision", team="vision")  # 60 CNY: 80% of the project's 75, 60% of the team's
    with webhook_receiver() as (base, posts):
        settings = project_settings(tmp_path, fx_usd_cny="7.5", team_budgets='{"vision": "100 CNY"}',
                                    webhooks=f"slack={base}/slack/x")
        alerts = {(a.scope, a.name): a for a in check_budget_alerts(settings, store, nov(16))}
        assert {k: a.thresholds for k, a in alerts.items()} == {
            ("team", "vision"): (50,), ("project", "helmet"): (50,), ("project", "vision"): (50, 80)}
        titles = sorted(p["blocks"][0]["text"]["text"] for p in posts.for_service("slack"))
        assert "Budget alert: project vision passed 80% of its 2026-11 GPU budget" in titles
        assert check_budget_alerts(settings, store, nov(16, 1)) == []  # each once

        project_spend(store, "i-3", "100", "helmet", team="retail", start=nov(3))  # 210 of 200
        [alert] = check_budget_alerts(settings, store, nov(17))
        assert (alert.scope, alert.name, alert.thresholds) == ("project", "helmet", (80, 100))
        last = posts.for_service("slack")[-1]["text"]
        assert "a project's budget is watched, not enforced" in last and "GPUSCHED_PROJECT_BUDGETS" in last
    with store.session(write=False) as s:
        sent = sorted((r.scope, r.name, r.threshold_pct) for r in s.scalars(select(BudgetAlertRow)))
    assert sent == [("project", "helmet", 50), ("project", "helmet", 80), ("project", "helmet", 100),
                    ("project", "vision", 50), ("project", "vision", 80), ("team", "vision", 50)]


def test_a_bad_project_budget_names_the_project(tmp_path: Path) -> None:
    from scheduler.errors import SettingsError
    from scheduler.settings import load_settings

    with pytest.raises(SettingsError, match="GPUSCHED_PROJECT_BUDGETS: .*project 'helmet': a monthly budget is more"):
        load_settings(_env_file=None, project_budgets='{"helmet": "0 CNY"}')
