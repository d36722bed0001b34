"""``gpusched bills`` and ``gpusched report --reconcile`` from the command line, and the dated FX settings.

The bills come from the BSS and Billing emulators, reached through settings alone (GPUSCHED_BILLS and each
cloud's GPUSCHED_<CLOUD>_* variables), as an operator points a daemon at its accounts.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.app import cli
from scheduler.errors import SettingsError
from scheduler.settings import load_settings

OK, FAILED, BAD_INPUT = 0, 1, 2


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("GPUSCHED_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def run(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(cli.app, list(args), env=env)
    assert "Traceback" not in result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def test_bills_without_clouds_configured_says_how_to_configure_them() -> None:
    result = run("bills", "--month", "2026-11")
    assert result.exit_code == BAD_INPUT
    assert "GPUSCHED_BILLS is empty" in result.stderr and "fix: set GPUSCHED_BILLS=" in result.stderr


def test_report_reconcile_without_clouds_configured_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    result = run("report", "--month", "2026-11", "--reconcile", "--out", str(tmp_path / "out"))
    assert result.exit_code == BAD_INPUT
    assert "GPUSCHED_BILLS is empty" in result.stderr
    assert not list((tmp_path / "out").glob("report-*"))


def test_bills_on_the_sandbox_backend_are_refused() -> None:
    result = run("bills", "--month", "2026-11", env={"GPUSCHED_BILLS": "alibaba", "GPUSCHED_BACKEND": "sandbox"})
    assert result.exit_code == BAD_INPUT
    assert "GPUSCHED_BACKEND is sandbox" in result.stderr


def test_a_malformed_month_is_one_line() -> None:
    result = run("bills", "--month", "November", env={"GPUSCHED_BILLS": "alibaba", "GPUSCHED_BACKEND": "live"})
    assert result.exit_code == BAD_INPUT
    assert "like 2026-11" in result.stderr


@pytest.fixture
def emulated_accounts(tmp_path: Path) -> Iterator[dict[str, str]]:
    pytest.importorskip("aliyunsdkbssopenapi", reason="the Alibaba billing SDK: pip install '.[alibaba]'")
    pytest.importorskip("tencentcloud.billing.v20180709", reason="the Tencent billing SDK: pip install '.[tencent]'")
    from providers.catalog import filter_offers, load_catalog
    from providers.emulators.alibaba_bss import AlibabaBssEmulator, PlantedItem
    from providers.emulators.tencent_billing import PlantedRow, TencentBillingEmulator
    from providers.sandbox.cloud import SandboxCloud
    from scheduler.clock import SimClock

    # Bills of last month: the machines ran then, the command runs now (real time, as an operator's).
    month = (datetime.now(UTC).replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    clock = SimClock(datetime.strptime(month, "%Y-%m").replace(day=2, tzinfo=UTC))
    ali = SandboxCloud(clock, filter_offers(load_catalog(), providers=["alibaba"], regions=["cn-hangzhou"]), seed=1)
    bss = AlibabaBssEmulator(ali, {"ak": "sk"})
    bss.plant(PlantedItem(month=month, instance_id="i-stranger", amount=Decimal("10.50")))
    ten = SandboxCloud(clock, filter_offers(load_catalog(), providers=["tencent"]), seed=2)
    billing = TencentBillingEmulator(ten, {"sid": "skey"}, currency="USD")
    billing.plant(PlantedRow(month=month, resource_id="ins-stranger", amount=Decimal("2.25")))
    env = {
        "GPUSCHED_BACKEND": "live", "GPUSCHED_BILLS": "alibaba,tencent", "GPUSCHED_DATA_DIR": str(tmp_path / "data"),
        "GPUSCHED_ALIBABA_ACCESS_KEY_ID": "ak", "GPUSCHED_ALIBABA_ACCESS_KEY_SECRET": "sk",
        "GPUSCHED_ALIBABA_BSS_ENDPOINT": bss.endpoint, "GPUSCHED_ALIBABA_PROTOCOL": "http",
        "GPUSCHED_TENCENT_SECRET_ID": "sid", "GPUSCHED_TENCENT_SECRET_KEY": "skey",
        "GPUSCHED_TENCENT_REGIONS": '["ap-guangzhou"]', "GPUSCHED_TENCENT_BILLING_ENDPOINT": billing.endpoint,
        "GPUSCHED_TENCENT_PROTOCOL": "http", "GPUSCHED_TENCENT_CURRENCY": "USD", "MONTH": month,
    }
    try:
        yield env
    finally:
        bss.close()
        billing.close()


def test_bills_prints_the_table_and_writes_every_instance(emulated_accounts: dict[str, str], tmp_path: Path) -> None:
    month = emulated_accounts.pop("MONTH")
    result = run("bills", "--month", month, "--out", str(tmp_path / "out"), env=emulated_accounts)
    assert result.exit_code == OK, result.output + result.stderr
    for text in ("Bills vs ledger", "alibaba", "tencent", "i-stranger", "ins-stranger", "not gpusched's"):
        assert text in result.output
    rows = list(csv.DictReader((tmp_path / "out" / f"bills-{month}.csv").open()))
    unknown = {r["instance"] or r["cloud_id"]: r for r in rows if r["kind"] == "unknown"}
    assert unknown["i-stranger"]["billed"] == "10.50" and unknown["i-stranger"]["currency"] == "CNY"
    assert unknown["ins-stranger"]["billed"] == "2.25" and unknown["ins-stranger"]["currency"] == "USD"
    assert "sk" not in result.output.split() and "skey" not in result.output


def test_a_refused_key_is_a_row_saying_why_and_exit_status_1(emulated_accounts: dict[str, str]) -> None:
    month = emulated_accounts.pop("MONTH")
    env = {**emulated_accounts, "GPUSCHED_TENCENT_SECRET_KEY": "not-the-key"}
    result = run("bills", "--month", month, env=env)
    assert result.exit_code == FAILED
    text = " ".join(result.output.split())  # as read, whatever the terminal's width wrapped
    assert "NOT READ" in text and "AuthFailure.SignatureFailure" in text
    assert "fix: check GPUSCHED_TENCENT_SECRET_KEY" in text
    assert "not-the-key" not in result.output
    assert "i-stranger" in result.output  # Alibaba's bill still reconciles


def test_report_reconciles_when_bills_are_configured(emulated_accounts: dict[str, str], tmp_path: Path) -> None:
    month = emulated_accounts.pop("MONTH")
    out = tmp_path / "reports"
    result = run("report", "--month", month, "--out", str(out), env=emulated_accounts)
    assert result.exit_code == OK, result.output + result.stderr
    md = (out / f"report-{month}.md").read_text()
    assert "## Bills vs ledger" in md and "i-stranger" in md and "ins-stranger" in md
    assert (out / f"bills-{month}.csv").exists()
    skipped = run("report", "--month", month, "--out", str(tmp_path / "plain"), "--no-reconcile",
                  env=emulated_accounts)
    assert skipped.exit_code == OK
    assert "Bills vs ledger" not in (tmp_path / "plain" / f"report-{month}.md").read_text()


# --- dated FX rates ------------------------------------------------------------------


@pytest.mark.parametrize("text, rates", [
    ("2026-11:USD/CNY=7.12", {"2026-11": Decimal("7.12")}),
    ("2026-11:USD/CNY=7.12,2026-10:USD/CNY=7.09", {"2026-11": Decimal("7.12"), "2026-10": Decimal("7.09")}),
    ("2026-11:CNY/USD=0.125", {"2026-11": Decimal(8)}),
    ("2026-11 USD/CNY 7.2", {"2026-11": Decimal("7.2")}),
    ("", {}),
])
def test_fx_rates_pairs(text: str, rates: dict[str, Decimal]) -> None:
    settings = load_settings(_env_file=None, fx_rates=text)
    assert settings.fx_by_month == rates
    for month, rate in rates.items():
        assert settings.fx_dated(month) and settings.fx_for(month).rate("USD", "CNY") == rate
    assert settings.fx_for("1999-01").rate("USD", "CNY") == settings.fx_usd_cny


@pytest.mark.parametrize("text, words", [
    ("2026-11:USD/EUR=1", "USD and CNY only"),
    ("2026-11=7.1", "not like 2026-11:USD/CNY=7.12"),
    ("2026-13:USD/CNY=7.1", "not a month"),
    ("2026-11:USD/CNY=7.1,2026-11:USD/CNY=7.2", "given twice"),
    ("2026-11:USD/CNY=0", "above 0"),
    ("2026-11:USD/CNY=5000", "at most 1000"),
])
def test_fx_rates_refused_with_the_setting_and_the_entry(text: str, words: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(_env_file=None, fx_rates=text)
    assert "GPUSCHED_FX_RATES" in str(refused.value) and words in str(refused.value)


def test_fx_rates_file_and_its_agreement_with_the_other_settings(tmp_path: Path) -> None:
    path = tmp_path / "rates.txt"
    path.write_text("# from finance\n2026-09:USD/CNY=7.15\n\n2026-10 USD/CNY 7.09  # October\n")
    settings = load_settings(_env_file=None, fx_rates_file=str(path), fx_usd_cny_by_month='{"2026-08": "7.2"}')
    assert settings.fx_by_month == {"2026-08": Decimal("7.2"), "2026-09": Decimal("7.15"), "2026-10": Decimal("7.09")}
    with pytest.raises(SettingsError, match="two USD/CNY rates"):
        load_settings(_env_file=None, fx_rates_file=str(path), fx_rates="2026-10:USD/CNY=7.3")
    with pytest.raises(SettingsError, match="GPUSCHED_FX_RATES_FILE: .*cannot read"):
        load_settings(_env_file=None, fx_rates_file=str(tmp_path / "missing.txt"))
    path.write_text("2026-10:USD/JPY=150\n")
    with pytest.raises(SettingsError, match=r"rates.txt: entry 1"):
        load_settings(_env_file=None, fx_rates_file=str(path))
