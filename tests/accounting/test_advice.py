"""Advice: commitments replayed over the ledger's hours, and right-sizing from measured epoch rates."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy.orm import Session

from scheduler.accounting.advice import GpuUse, Sample, advise, best_commitment, right_sizing
from scheduler.accounting.reports import render_csv, render_html, render_markdown
from scheduler.store.tables import PerfSampleRow
from tests.accounting.test_reports import FX, Ledger, report_for

UTC = timezone.utc
H = 720  # hours in the replayed window
D = Decimal("0.3")


def hours(*pattern: tuple[int, Decimal]) -> list[Decimal]:
    """``(count, machines)`` runs, repeated to H hours."""
    one = [m for count, m in pattern for _ in range(count)]
    return (one * (H // len(one) + 1))[:H]


@pytest.mark.parametrize(
    ("usage", "level", "saving", "utilisation"),
    [
        pytest.param(hours((1, Decimal(1))), 1, H * D, 1, id="one machine all month"),
        pytest.param(hours((9, Decimal(2)), (1, Decimal(3))), 2, 2 * H * D, 1, id="two steady, a third at 10%"),
        pytest.param(hours((8, Decimal(1)), (2, Decimal(0))), 1, Decimal("0.8") * H - Decimal("0.7") * H,
                     Decimal("0.8"), id="80% of hours: above break-even"),
        pytest.param(hours((1, Decimal("0.5"))), 1, Decimal("0.5") * H - Decimal("0.7") * H, None,
                     id="half a machine: no whole one pays"),
        pytest.param(hours((7, Decimal(1)), (3, Decimal(0))), 1, Decimal(0), None, id="70%: exactly break-even"),
        pytest.param(hours((1, Decimal(1)), (4, Decimal(0))), 1, None, None, id="bursty: 20% of hours"),
        pytest.param([], 0, None, None, id="no usage"),
    ],
)  # fmt: skip
def test_reservation_replay(usage: list[Decimal], level: int, saving: Decimal | None,
                            utilisation: Decimal | None) -> None:
    best = best_commitment(usage, D, whole=True)
    if utilisation is None:
        assert best is None  # nothing saves: no advice
        return
    assert best is not None and best.level == level and best.saving == saving
    assert best.covered / (best.level * len(usage)) == utilisation


def test_savings_plan_replay_covers_the_steady_spend() -> None:
    spend = hours((20, Decimal(10)), (4, Decimal(30)))  # 10 per hour always, 30 for 4 hours a day
    best = best_commitment(spend, Decimal("0.2"), whole=False)
    assert best is not None and best.level == 10  # the bursts do not pay for a bigger plan
    assert best.saving == 10 * H * Decimal("0.2")


def nov(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def on_demand_month(ledger: Ledger, hours_a_day: int) -> None:
    inst = ledger.instance("i-od", provider="alibaba", capacity="on-demand", currency="CNY", price="10",
                           on_demand="10")  # fmt: skip
    for day in range(1, 31):
        ledger.cost(inst, nov(day), nov(day) + timedelta(hours=hours_a_day), amount=str(10 * hours_a_day),
                    on_demand=str(10 * hours_a_day), job_id=f"job-{day}")  # fmt: skip


def test_steady_on_demand_usage_gets_a_reservation_and_a_savings_plan(session: Session, ledger: Ledger) -> None:
    on_demand_month(ledger, 24)
    advice = advise(session, datetime(2026, 12, 1, tzinfo=UTC), currency="CNY", fx=FX)
    by_kind = {a.term.kind: a for a in advice.commitments}
    res, plan = by_kind["reservation"], by_kind["savings plan"]
    assert res.scope == "alibaba r1 g5.xlarge" and res.level == 1
    assert res.saving.amount == 720 * 10 * Decimal("0.3") and res.saving_per_month == res.saving
    assert res.utilisation == 1 and res.break_even == Decimal("0.7")
    assert res.hourly_commitment.amount == 7
    assert plan.scope == "alibaba" and plan.saving.amount == 720 * 10 * Decimal("0.2")
    assert "Assumed terms" in advice.note


def test_bursty_usage_gets_no_commitment(session: Session, ledger: Ledger) -> None:
    on_demand_month(ledger, 4)  # 4 h a day: 17% of the hours
    advice = advise(session, datetime(2026, 12, 1, tzinfo=UTC), currency="CNY", fx=FX)
    assert advice.commitments == ()


def test_spot_usage_is_not_advised_a_commitment(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-spot", currency="CNY", price="3", on_demand="10")
    ledger.cost(inst, nov(1), datetime(2026, 12, 1, tzinfo=UTC), amount="2160", on_demand="7200")
    assert advise(session, datetime(2026, 12, 1, tzinfo=UTC), currency="CNY", fx=FX).commitments == ()


def test_too_little_history_says_so(session: Session, ledger: Ledger) -> None:
    on_demand_month(ledger, 24)
    advice = advise(session, nov(5), currency="CNY", fx=FX)
    assert advice.commitments == () and "needs 7 days" in advice.note


def test_lookback_outside_30_to_90_days_is_refused(session: Session) -> None:
    with pytest.raises(ValueError, match="30 to 90"):
        advise(session, nov(5), currency="CNY", fx=FX, lookback_days=7)


def samples(job: str, gpu: str, rate: str, n: int = 2) -> list[Sample]:
    return [Sample(job_id=job, model="yolov9-s", img_size=640, gpu=gpu, rate=Decimal(rate)) for _ in range(n)]


@pytest.mark.parametrize(
    ("l4_rate", "l4_samples", "l4_price", "want"),
    [
        pytest.param("98", 2, "8", "L4", id="as fast (98%) and cheaper"),
        pytest.param("90", 2, "8", None, id="slower than 95%"),
        pytest.param("98", 1, "8", None, id="one sample is not a measurement"),
        pytest.param("98", 2, "31", None, id="dearer"),
    ],
)
def test_right_sizing(l4_rate: str, l4_samples: int, l4_price: str, want: str | None) -> None:
    measured = samples("j1", "A100", "100") + samples("j2", "L4", l4_rate, l4_samples) + samples("j3", "T4", "40")
    use = [GpuUse("j1", "A100", Decimal(10), Decimal(30)), GpuUse("j2", "L4", Decimal(1), Decimal(l4_price)),
           GpuUse("j3", "T4", Decimal(1), Decimal(4))]  # fmt: skip
    found = right_sizing(measured, use, "CNY")
    if want is None:
        assert [f for f in found if f.gpu == "A100"] == []
        return
    [advice] = [f for f in found if f.gpu == "A100"]
    assert advice.cheaper_gpu == want  # not T4: cheaper per hour, but not as fast
    assert advice.saving.amount == 10 * 30 - 10 * Decimal(100) / Decimal(l4_rate) * Decimal(l4_price)


def test_right_sizing_reads_the_measured_epochs(session: Session, ledger: Ledger) -> None:
    a100 = ledger.instance("i-a100", gpu="A100", capacity="on-demand", currency="CNY", price="30", on_demand="30")
    l4 = ledger.instance("i-l4", gpu="L4", capacity="on-demand", currency="CNY", price="8", on_demand="8")
    ledger.cost(a100, nov(2), nov(2, 10), amount="300", on_demand="300", job_id="j1")
    ledger.cost(l4, nov(20), nov(20, 1), amount="8", on_demand="8", job_id="j2")
    for job, gpu, rate in (("j1", "A100", 100.0), ("j1", "A100", 100.0), ("j2", "L4", 99.0), ("j2", "L4", 99.0)):
        session.add(PerfSampleRow(at=nov(20), job_id=job, attempt=1, model="yolov9-s", gpu=gpu, gpu_count=1, nodes=1,
                                  img_size=640, train_images=1000, val_images=100, epoch_seconds=10.0,
                                  rate_img_s=rate, source="agent"))  # fmt: skip
    session.flush()
    [advice] = advise(session, datetime(2026, 12, 1, tzinfo=UTC), currency="CNY", fx=FX).right_sizing
    assert (advice.gpu, advice.cheaper_gpu, advice.gpu_hours) == ("A100", "L4", 10)
    assert advice.saving.amount == 300 - 10 * Decimal(100) / Decimal(99) * 8


def test_the_report_shows_the_advice(session: Session, ledger: Ledger) -> None:
    on_demand_month(ledger, 24)
    report = report_for(session)
    assert report.advice is not None and len(report.advice.commitments) == 2
    md = render_markdown(report)
    section = md[md.index("## Advice"):md.index("## By team")]
    assert "1-year reservation, no upfront | alibaba r1 g5.xlarge | 1 machine(s) | 7.00 CNY/h | 100.0% | 70.0% " \
           "| 2,160.00 CNY" in section
    html = render_html(report)
    assert "<h2>Advice</h2>" in html and "2,160.00 CNY" in html[html.index("<h2>Advice</h2>"):]
    rows = [r for r in csv.DictReader(io.StringIO(render_csv(report))) if r["section"] == "advice_commitment"]
    assert {r["savings"] for r in rows} == {"2160.00", "1440.00"}


def test_the_report_says_when_nothing_would_save(session: Session, ledger: Ledger) -> None:
    on_demand_month(ledger, 4)
    md = render_markdown(report_for(session))
    assert "No commitment or GPU change would have saved over the window." in md
