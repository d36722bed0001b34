"""The ledger: usage intervals, month splits, exact Decimal costs, idempotent accounting."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from scheduler.accounting.ledger import (
    CostLine,
    account,
    close_interval,
    cost_lines,
    exact_seconds,
    open_costs,
    open_interval,
    open_interval_of,
    price_span,
    record_idle_stop,
    spent_by_job,
    split_by_month,
)
from scheduler.money import FxRates, Money, total
from scheduler.store.database import Store
from scheduler.store.tables import CostRecordRow, IdleStopRow, InstanceRow, UsageIntervalRow
from scheduler.times import utc

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def add_instance(
    session: Session,
    instance_id: str = "inst-000000000001",
    *,
    price: str = "7.5",
    on_demand: str = "20",
    currency: str = "CNY",
    capacity: str = "spot",
) -> InstanceRow:
    row = InstanceRow(
        id=instance_id,
        provider="alibaba",
        region="cn-hangzhou",
        zone="cn-hangzhou-i",
        instance_type="ecs.gn7i-c8g1.2xlarge",
        gpu="A10",
        gpu_count=1,
        capacity=capacity,
        reserved=capacity == "reserved",
        client_token=f"tok-{instance_id}",
        state="running",
        team="vision-qa",
        project="safety-helmet",
        price_amount=Decimal(price),
        price_currency=currency,
        on_demand_amount=Decimal(on_demand),
        created_at=at("2026-11-01T00:00:00"),
    )
    session.add(row)
    session.flush()
    return row


def use(session: Session, instance: InstanceRow, start: str, end: str | None, kind: str = "busy") -> None:
    open_interval(session, instance, kind=kind, job_id="job-1" if kind == "busy" else None,  # type: ignore[arg-type]
                  team="vision-qa", project="safety-helmet", at=at(start))
    if end is not None:
        close_interval(session, instance.id, at(end))


def records(session: Session) -> list[tuple[str, Decimal, Decimal, Decimal, str]]:
    rows = session.scalars(select(CostRecordRow).order_by(CostRecordRow.start)).all()
    return [(r.month, r.hours, r.amount, r.on_demand_amount, r.currency) for r in rows]


# --- intervals


def test_opening_an_interval_closes_the_open_one(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s)
        busy = open_interval(s, inst, kind="busy", job_id="job-1", team="vision-qa", project=None,
                             at=at("2026-11-10T08:00:00"))
        idle = open_interval(s, inst, kind="idle", job_id=None, team="vision-qa", project=None,
                             at=at("2026-11-10T09:30:00"))
        assert utc(busy.end) == at("2026-11-10T09:30:00")  # type: ignore[arg-type]
        assert idle.end is None
        assert open_interval_of(s, inst.id) is idle
        assert (idle.provider, idle.gpu, idle.capacity) == ("alibaba", "A10", "spot")


def test_closing_without_an_open_interval_returns_none(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s)
        assert close_interval(s, inst.id, at("2026-11-10T08:00:00")) is None


def test_time_does_not_run_backwards_in_an_interval(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s)
        use(s, inst, "2026-11-10T08:00:00", None)
        with pytest.raises(ValueError, match="started later"):
            close_interval(s, inst.id, at("2026-11-10T07:59:59"))


def test_usage_kind_is_busy_or_idle(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s)
        with pytest.raises(ValueError, match="usage kind"):
            open_interval(s, inst, kind="warm", job_id=None, team="t", project=None,  # type: ignore[arg-type]
                          at=at("2026-11-10T08:00:00"))


# --- accounting


def test_an_interval_across_a_month_end_is_split_at_midnight_utc(any_store: Store) -> None:
    with any_store.session() as s:
        inst = add_instance(s, price="7.5", on_demand="20")
        use(s, inst, "2026-11-30T23:00:00", "2026-12-01T02:00:00")
        assert account(s, at("2026-12-01T03:00:00")) == 2
    with any_store.session(write=False) as s:
        assert records(s) == [
            ("2026-11", Decimal(1), Decimal("7.5"), Decimal(20), "CNY"),
            ("2026-12", Decimal(2), Decimal(15), Decimal(40), "CNY"),
        ]
        starts = [utc(r.start) for r in s.scalars(select(CostRecordRow).order_by(CostRecordRow.start))]
        assert starts == [at("2026-11-30T23:00:00"), at("2026-12-01T00:00:00")]


def test_a_reserved_machine_costs_nothing_but_keeps_its_on_demand_equivalent(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s, price="0", on_demand="4.1", currency="USD", capacity="reserved")
        use(s, inst, "2026-11-10T08:00:00", "2026-11-10T10:30:00", kind="idle")
        account(s, at("2026-11-10T11:00:00"))
        assert records(s) == [("2026-11", Decimal("2.5"), Decimal(0), Decimal("10.25"), "USD")]
        line = cost_lines(s, "2026-11", at("2026-11-10T11:00:00"))[0]
        assert line.savings == Money(amount=Decimal("10.25"), currency="USD")


def test_accounting_twice_writes_nothing_twice(any_store: Store) -> None:
    with any_store.session() as s:
        inst = add_instance(s)
        use(s, inst, "2026-11-30T23:00:00", "2026-12-01T02:00:00")
        first = account(s, at("2026-12-01T03:00:00"))
    with any_store.session() as s:
        assert account(s, at("2026-12-01T04:00:00")) == 0
        assert s.scalar(select(func.count()).select_from(CostRecordRow)) == first == 2
        assert s.scalars(select(UsageIntervalRow.accounted)).all() == [True]


def test_only_intervals_closed_by_now_are_accounted(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s)
        use(s, inst, "2026-11-10T08:00:00", "2026-11-10T09:00:00")
        use(s, add_instance(s, "inst-000000000002"), "2026-11-10T08:00:00", None)
        assert account(s, at("2026-11-10T08:30:00")) == 0
        assert account(s, at("2026-11-10T09:00:00")) == 1


def test_a_zero_length_interval_is_marked_accounted_without_a_record(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s)
        use(s, inst, "2026-11-10T08:00:00", "2026-11-10T08:00:00")
        assert account(s, at("2026-11-10T09:00:00")) == 0
        assert s.scalars(select(UsageIntervalRow.accounted)).all() == [True]


def test_costs_are_exact_decimals_that_add_up(any_store: Store) -> None:
    # Prices and spans chosen so a float sum would drift: 1/3 hours, thirds of a cent.
    spans = [
        ("2026-11-03T10:00:00", "2026-11-03T10:20:00"),
        ("2026-11-03T11:00:00", "2026-11-03T11:00:01"),
        ("2026-11-30T23:40:00", "2026-12-01T00:20:00"),
    ]
    price, on_demand = Decimal("3.33333333"), Decimal("9.99999999")
    with any_store.session() as s:
        inst = add_instance(s, price=str(price), on_demand=str(on_demand))
        for start, end in spans:
            use(s, inst, start, end)
        account(s, at("2026-12-02T00:00:00"))
    with any_store.session(write=False) as s:
        rows = s.scalars(select(CostRecordRow)).all()
        assert all(isinstance(r.amount, Decimal) and isinstance(r.hours, Decimal) for r in rows)
        seconds = sum((exact_seconds(at(e) - at(b)) for b, e in spans), Decimal(0))
        # Each interval is rounded to 8 places once; the sum of records equals the sum of those.
        expected = sum(
            ((exact_seconds(at(e) - at(b)) * price / 3600).quantize(Decimal("1e-8")) for b, e in spans),
            Decimal(0),
        )
        assert sum((r.amount for r in rows), Decimal(0)) == expected
        assert abs(expected - seconds * price / 3600) < Decimal("1e-7")
        assert sorted({r.month for r in rows}) == ["2026-11", "2026-12"]
        # 40 minutes round to 0.66666667 h once; the last month takes the remainder.
        split = sorted((r.month, r.hours) for r in rows if utc(r.end) > at("2026-11-30T23:00:00"))
        assert split == [("2026-11", Decimal("0.33333333")), ("2026-12", Decimal("0.33333334"))]


# --- running machines


def test_an_open_interval_shows_up_in_open_costs_and_nowhere_else(store: Store) -> None:
    with store.session() as s:
        inst = add_instance(s, price="7.5", on_demand="20")
        use(s, inst, "2026-11-10T10:00:00", None)
        lines = open_costs(s, at("2026-11-10T12:30:00"))
        assert account(s, at("2026-11-10T12:30:00")) == 0
        assert s.scalar(select(func.count()).select_from(CostRecordRow)) == 0
    assert [(x.month, x.hours, x.cost, x.final) for x in lines] == [
        ("2026-11", Decimal("2.5"), Money(amount=Decimal("18.75"), currency="CNY"), False)
    ]
    assert lines[0].end == at("2026-11-10T12:30:00")


def test_accounting_rolls_an_open_interval_over_a_month_end(any_store: Store) -> None:
    with any_store.session() as s:
        inst = add_instance(s, price="7.5", on_demand="20")
        use(s, inst, "2026-10-31T22:00:00", None)
        # Four UTC months later the machine still runs: Oct, Nov, Dec become final.
        assert account(s, at("2027-01-01T03:00:00")) == 3
        assert account(s, at("2027-01-01T03:00:00")) == 0
        still_open = open_interval_of(s, inst.id)
        assert still_open is not None and utc(still_open.start) == at("2027-01-01T00:00:00")
        assert [m for m, *_ in records(s)] == ["2026-10", "2026-11", "2026-12"]
        assert records(s)[0][1:3] == (Decimal(2), Decimal(15))
        assert [(x.month, x.hours) for x in open_costs(s, at("2027-01-01T03:00:00"))] == [("2027-01", Decimal(3))]


def test_cost_lines_give_a_month_with_final_records_and_running_machines(store: Store) -> None:
    now = at("2026-12-01T02:00:00")
    with store.session() as s:
        a = add_instance(s, "inst-00000000000a", price="7.5", on_demand="20")
        b = add_instance(s, "inst-00000000000b", price="2", on_demand="6", currency="USD")
        c = add_instance(s, "inst-00000000000c", price="1", on_demand="1")
        use(s, a, "2026-11-30T22:00:00", "2026-11-30T23:00:00")
        account(s, now)
        use(s, b, "2026-11-30T23:30:00", None)  # open, crosses into December
        use(s, c, "2026-11-30T20:00:00", "2026-11-30T21:00:00")  # closed, not yet accounted
        november = cost_lines(s, "2026-11", now)
        december = cost_lines(s, "2026-12", now)
    assert [(x.instance_id, x.final, x.hours) for x in november] == [
        ("inst-00000000000a", True, Decimal(1)),
        ("inst-00000000000b", False, Decimal("0.5")),
        ("inst-00000000000c", False, Decimal(1)),
    ]
    assert [(x.instance_id, x.hours) for x in december] == [("inst-00000000000b", Decimal(2))]
    cny = total((x.cost for x in november if x.currency == "CNY"), "CNY")
    assert cny == Money(amount=Decimal("8.5"), currency="CNY")  # 7.5 written + 1 not yet written
    assert [x.cost for x in november if x.currency == "USD"] == [Money(amount=Decimal(1), currency="USD")]


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "Nov 2026", ""])
def test_cost_lines_want_a_yyyy_mm_month(store: Store, month: str) -> None:
    with store.session(write=False) as s, pytest.raises(ValueError, match="month"):
        cost_lines(s, month, at("2026-12-01T00:00:00"))


# --- pricing, as pure functions


@pytest.mark.parametrize(
    ("start", "end", "months"),
    [
        ("2026-11-30T23:00:00", "2026-12-01T02:00:00", ["2026-11", "2026-12"]),
        ("2026-12-31T23:59:59", "2027-01-01T00:00:01", ["2026-12", "2027-01"]),
        ("2026-11-01T00:00:00", "2026-12-01T00:00:00", ["2026-11"]),
        ("2026-01-15T00:00:00", "2026-04-02T00:00:00", ["2026-01", "2026-02", "2026-03", "2026-04"]),
        ("2026-11-10T08:00:00", "2026-11-10T08:00:00", []),
    ],
)
def test_split_by_month(start: str, end: str, months: list[str]) -> None:
    pieces = split_by_month(at(start), at(end))
    assert [m for m, _, _ in pieces] == months
    if pieces:
        assert pieces[0][1] == at(start) and pieces[-1][2] == at(end)
        assert all(a[2] == b[1] for a, b in zip(pieces, pieces[1:]))


@given(
    start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 1, 1)),
    length=st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=100)),
    price=st.decimals(min_value=0, max_value=10_000, places=8),
)
def test_month_pieces_add_up_to_the_whole_exactly(start: datetime, length: timedelta, price: Decimal) -> None:
    start = start.replace(tzinfo=UTC)
    pieces = price_span(start, start + length, price, price * 2)
    seconds = exact_seconds(length)
    assert sum((p.amount for p in pieces), Decimal(0)) == (seconds * price / 3600).quantize(Decimal("1e-8"))
    assert sum((p.on_demand_amount for p in pieces), Decimal(0)) == (seconds * price * 2 / 3600).quantize(
        Decimal("1e-8")
    )
    assert sum((p.hours for p in pieces), Decimal(0)) == (seconds / 3600).quantize(Decimal("1e-8"))
    assert all(p.amount >= 0 and p.hours >= 0 for p in pieces)
    assert all(p.month == f"{p.start.year:04d}-{p.start.month:02d}" for p in pieces)
    assert len({p.month for p in pieces}) == len(pieces)


def test_cost_line_is_frozen_strict_and_gives_money() -> None:
    line = CostLine(
        month="2026-11", usage_interval_id=1, instance_id="inst-1", job_id=None, team="t", project=None,
        kind="idle", provider="aws", region="us-east-1", gpu="L4", instance_type="g6.xlarge", capacity="spot",
        start=at("2026-11-10T08:00:00"), end=at("2026-11-10T09:00:00"), hours=Decimal(1),
        amount=Decimal("0.3"), on_demand_amount=Decimal("0.8"), currency="USD", final=False,
    )
    assert line.savings == Money(amount=Decimal("0.5"), currency="USD")
    with pytest.raises(ValueError):
        line.month = "2026-12"  # type: ignore[misc]
    with pytest.raises(ValueError):
        CostLine.model_validate({**line.model_dump(), "surprise": 1})


# --- budgets and idle stops


def test_spent_by_job_adds_written_and_unwritten_usage_per_job(store: Store) -> None:
    with store.session() as s:
        a = add_instance(s, "inst-00000000000a", price="7.5")
        b = add_instance(s, "inst-00000000000b", price="2")
        use(s, a, "2026-11-10T08:00:00", "2026-11-10T10:00:00")  # job-1: 15, accounted below
        account(s, at("2026-11-10T10:00:00"))
        use(s, b, "2026-11-10T11:00:00", "2026-11-10T11:30:00")  # job-1: 1, not yet accounted
        use(s, a, "2026-11-10T12:00:00", "2026-11-10T13:00:00", kind="idle")  # no job: not counted
        use(s, b, "2026-11-10T14:00:00", None)  # job-1, still running
        assert spent_by_job(s, ["job-1", "job-never-ran"]) == {"job-1": Money(amount=Decimal(16), currency="CNY")}
        with_running = spent_by_job(s, ["job-1"], now=at("2026-11-10T15:00:00"))
        assert with_running == {"job-1": Money(amount=Decimal(18), currency="CNY")}
        assert spent_by_job(s, []) == {}


def test_spent_by_job_needs_fx_to_mix_currencies(store: Store) -> None:
    with store.session() as s:
        use(s, add_instance(s, "inst-00000000000a", price="7.2"), "2026-11-10T08:00:00", "2026-11-10T09:00:00")
        use(s, add_instance(s, "inst-00000000000b", price="1", currency="USD"),
            "2026-11-10T10:00:00", "2026-11-10T11:00:00")
        with pytest.raises(ValueError, match="CNY and USD"):
            spent_by_job(s, ["job-1"])
        fx = FxRates(base="CNY", rates={"USD": Decimal("7.1")})
        assert spent_by_job(s, ["job-1"], fx=fx) == {"job-1": Money(amount=Decimal("14.3"), currency="CNY")}


@pytest.mark.parametrize("action", ["stopped", "terminated"])
def test_record_idle_stop_keeps_what_the_machine_would_have_billed(store: Store, action: str) -> None:
    with store.session() as s:
        inst = add_instance(s, price="7.5", capacity="on-demand")
        beijing = at("2026-11-10T08:00:00").astimezone(timezone(timedelta(hours=8)))
        record_idle_stop(s, inst, beijing, action)  # type: ignore[arg-type]
    with store.session(write=False) as s:
        row = s.scalars(select(IdleStopRow)).one()
        assert (row.instance_id, row.action, row.team, row.capacity) == (inst.id, action, "vision-qa", "on-demand")
        assert (row.price_amount, row.price_currency, row.at) == (Decimal("7.5"), "CNY", at("2026-11-10T08:00:00"))


def test_record_idle_stop_refuses_other_actions(store: Store) -> None:
    with store.session() as s, pytest.raises(ValueError, match="idle stop action"):
        record_idle_stop(s, add_instance(s), at("2026-11-10T08:00:00"), "paused")  # type: ignore[arg-type]
