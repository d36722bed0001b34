"""The demo's November as FOCUS 1.0, checked by focus-validator (the FinOps Foundation's own tool)."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from rich.console import Console

from scheduler.accounting.reports import monthly_report, write_monthly_report
from scheduler.models import ReservedCapacity
from scheduler.money import Money
from scheduler.simulation.demo import DemoResult, demo_settings, run_demo

MONTH = "2026-11"
SEED = 7


@dataclass(frozen=True)
class Verdict:
    checks: int
    failed: list[str]
    console: str


def validator() -> Path:
    path = os.environ.get("GPUSCHED_FOCUS_VALIDATOR", "")
    if not path or not Path(path).exists():
        pytest.fail(f"focus-validator not found at {path!r}: run scripts/test-focus, which installs it "
                    "into .venv-focus")
    return Path(path)


def validate(data: Path, tmp: Path) -> Verdict:
    exe = validator()
    # focus-validator 1.0.0 opens its currency-code list by a path relative to the working directory: run it
    # from the folder that holds its package.
    home = subprocess.run([str(exe.parent / "python"), "-c", "import focus_validator, os; "
                           "print(os.path.dirname(os.path.dirname(focus_validator.__file__)))"],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    xml = tmp / f"{data.stem}-verdict.xml"
    args = [str(exe), "--data-file", str(data.resolve()), "--validate-version", "1.0"]
    console = subprocess.run(args, cwd=home, capture_output=True, text=True, timeout=300)
    subprocess.run([*args, "--output-type", "unittest", "--output-destination", str(xml)], cwd=home,
                   check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    root = ET.parse(xml).getroot()
    failed = [case.get("name", "?") for case in root.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]  # fmt: skip
    return Verdict(int(root.get("tests", "0")), failed, console.stdout + console.stderr)


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoResult]:
    out = tmp_path_factory.mktemp("demo")
    return out, run_demo(out_dir=out, seed=SEED, console=Console(file=io.StringIO()))


def test_report_focus_from_the_command_line_passes_the_validator(
    demo: tuple[Path, DemoResult], tmp_path: Path
) -> None:
    out, _ = demo
    env = {**os.environ, "GPUSCHED_DATA_DIR": str(out)}
    done = subprocess.run([sys.executable, "-m", "scheduler.app.cli", "report", "--month", MONTH, "--focus"],
                          env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    focus = out / "reports" / f"focus-{MONTH}.csv"
    assert f"focus: {focus}" in " ".join(done.stdout.split())
    assert (out / "reports" / f"report-{MONTH}.html").exists()  # beside the other report files
    assert len(rows(focus)) > 10
    verdict = validate(focus, tmp_path)
    assert verdict.failed == [], verdict.console
    assert verdict.checks > 100 and "Validation succeeded" in verdict.console


def test_reservations_purchases_and_unused_parts_pass_the_validator(
    demo: tuple[Path, DemoResult], tmp_path: Path
) -> None:
    out, result = demo
    settings = demo_settings(out, SEED)
    monthly = ReservedCapacity(
        provider="tencent", region="ap-guangzhou", instance_type="GN7.2XLARGE32", count=2,
        start=datetime(2026, 11, 2, tzinfo=timezone.utc), until=datetime(2027, 5, 2, tzinfo=timezone.utc),
        monthly_fee=Money(amount=Decimal(3000), currency="CNY"),
    )  # fmt: skip
    settings = settings.model_copy(update={"reserved": [*settings.reserved, monthly]})
    paths = write_monthly_report(settings, MONTH, out_dir=tmp_path / "reports", now=result.report.generated_at,
                                 focus=True)  # fmt: skip
    got = rows(paths["focus"])
    kinds = {(r["ChargeCategory"], r["ChargeFrequency"], r["CommitmentDiscountStatus"]) for r in got}
    assert {("Usage", "Usage-Based", "Used"), ("Usage", "Usage-Based", "Unused"),
            ("Purchase", "Recurring", "")} <= kinds  # fmt: skip
    # The amortized view is the report's: EffectiveCost adds up to its total, the new reservation's fee within.
    report = monthly_report(settings, MONTH, now=result.report.generated_at)
    assert report.reserved_fees.amount > result.report.reserved_fees.amount
    effective = sum((Decimal(r["EffectiveCost"]) for r in got), Decimal(0))
    assert abs(effective - report.total.amount) < Decimal("0.000001")
    verdict = validate(paths["focus"], tmp_path)
    assert verdict.failed == [], verdict.console


def test_the_validator_finds_a_broken_file(demo: tuple[Path, DemoResult], tmp_path: Path) -> None:
    """The check above can fail: a file without BilledCost and with a made-up currency is refused."""
    out, result = demo
    paths = write_monthly_report(demo_settings(out, SEED), MONTH, out_dir=tmp_path / "reports",
                                 now=result.report.generated_at, focus=True)  # fmt: skip
    good = rows(paths["focus"])
    broken = tmp_path / "broken.csv"
    with broken.open("w", newline="", encoding="utf-8") as fh:
        fields = [c for c in good[0] if c != "BilledCost"]
        writer = csv.DictWriter(fh, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "BillingCurrency": "XYZ"} for r in good)
    verdict = validate(broken, tmp_path)
    assert any(name.startswith("BilledCost_Required") for name in verdict.failed), verdict.failed
    assert any(name.startswith("BillingCurrency_IsCurrencyCode") for name in verdict.failed), verdict.failed
