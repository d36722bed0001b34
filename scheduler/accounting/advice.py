"""Advice from the ledger: commitments worth buying, and GPUs that do the same work for less.

**Commitments** (as AWS Cost Explorer's recommendations do): the on-demand usage of the last
``lookback_days`` is cut into hours; each candidate commitment is replayed over those hours. A
reservation of ``k`` machines of one provider, region and instance type covers up to ``k`` of the
machines running in an hour; a savings plan of ``c`` per hour covers up to ``c / (1 - discount)`` of the
hour's on-demand spend on one provider. The commitment is paid every hour, used or not, at
``(1 - discount)`` of on-demand. The best level is advised when it saves; the break-even utilisation is
``1 - discount``: below it the commitment costs more than the on-demand hours it covers. Spot hours are
left out (they are already cheaper than a commitment), and so are reserved ones (already committed).

The discounts are assumptions, not quotes: a cloud's price for the term replaces them
(``DEFAULT_TERMS``, overridable by the caller); the report says which it used.

**Right-sizing**: from the epoch times the agents measured (``perf_samples``), a job class (model and
image size) that ran on one GPU and was measured at least as fast (within ``SAME_SPEED``) on a GPU whose
on-demand GPU-hour is cheaper: the same work priced on the cheaper GPU, both at on-demand prices.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from statistics import median

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.accounting.report_lines import CostLike, convert, seconds
from scheduler.models import Frozen
from scheduler.money import FxRates, Money
from scheduler.store.tables import CostRecordRow, InstanceRow, PerfSampleRow
from scheduler.times import utc

__all__ = [
    "DEFAULT_TERMS",
    "MIN_HISTORY_DAYS",
    "SAME_SPEED",
    "Advice",
    "CommitmentAdvice",
    "CommitmentTerm",
    "RightSizing",
    "advise",
    "best_commitment",
    "right_sizing",
]

_HOUR = timedelta(hours=1)
_MONTH_HOURS = Decimal(720)  # 30 days: savings are given per month of that length
MIN_HISTORY_DAYS = 7  # less history than this says nothing about steady usage
SAME_SPEED = Decimal("0.95")  # "as fast": at least 95% of the rate measured on the GPU it ran on
_MIN_SAMPLES = 2


class CommitmentTerm(Frozen):
    name: str  # e.g. "1-year reservation"
    kind: str  # "reservation" (machines of one instance type) | "savings plan" (spend per hour, one cloud)
    discount: Decimal  # off on-demand, 0..1


DEFAULT_TERMS = (
    CommitmentTerm(name="1-year reservation, no upfront", kind="reservation", discount=Decimal("0.30")),
    CommitmentTerm(name="1-year compute savings plan, no upfront", kind="savings plan", discount=Decimal("0.20")),
)


class CommitmentAdvice(Frozen):
    term: CommitmentTerm
    scope: str  # "aws us-east-1 g5.xlarge" for a reservation, "aws" for a savings plan
    level: Decimal  # machines (reservation) or on-demand spend per hour covered (savings plan)
    hourly_commitment: Money  # what the commitment costs every hour
    utilisation: Decimal  # of the commitment, replayed over the window, 0..1
    break_even: Decimal  # the utilisation below which it would cost more than it saves, 0..1
    saving: Money  # over the window
    saving_per_month: Money  # per 30 days
    on_demand: Money  # what the covered scope cost on-demand over the window
    window_days: Decimal


class RightSizing(Frozen):
    model: str
    img_size: int
    gpu: str  # where it ran
    cheaper_gpu: str
    rate: Decimal  # images/s per GPU, measured on ``gpu``
    cheaper_rate: Decimal  # measured on ``cheaper_gpu``
    gpu_hours: Decimal  # the class's busy GPU-hours on ``gpu`` in the window
    price: Money  # on-demand per GPU-hour on ``gpu``
    cheaper_price: Money
    saving: Money  # the same images on ``cheaper_gpu``, both at on-demand prices


class Advice(Frozen):
    window_start: datetime
    window_end: datetime
    commitments: tuple[CommitmentAdvice, ...]
    right_sizing: tuple[RightSizing, ...]
    note: str  # what the advice rests on, or why there is none


@dataclass(frozen=True)
class Replay:
    level: Decimal
    covered: Decimal  # units covered, summed over the hours
    saving: Decimal  # in price units: covered x price - level x hours x (1 - discount) x price


def replay(hourly: Sequence[Decimal], level: Decimal, discount: Decimal) -> Replay:
    """A commitment of ``level`` units per hour over ``hourly`` use (units per hour); price 1 per unit."""
    covered = sum((min(x, level) for x in hourly), Decimal(0))
    return Replay(level, covered, covered - level * len(hourly) * (1 - discount))


def best_commitment(hourly: Sequence[Decimal], discount: Decimal, *, whole: bool) -> Replay | None:
    """The level that saves most over ``hourly`` (whole units for machines), or None when none saves."""
    if not hourly:
        return None
    if whole:
        top = int(max(hourly).to_integral_value(rounding=ROUND_CEILING))
        levels = [Decimal(k) for k in range(1, top + 1)]
    else:
        levels = sorted(set(hourly) - {Decimal(0)})
    best = max((replay(hourly, level, discount) for level in levels), key=lambda r: r.saving, default=None)
    return best if best is not None and best.saving > 0 else None


def _hours(start: datetime, end: datetime) -> list[datetime]:
    out, at = [], start
    while at < end:
        out.append(at)
        at += _HOUR
    return out


def _spread(line: CostLike, hours: dict[datetime, int], lo: datetime, hi: datetime) -> list[tuple[int, Decimal]]:
    """(hour index, share of the hour) that [start, end) of ``line`` covers inside [lo, hi)."""
    start, end = max(utc(line.start), lo), min(utc(line.end), hi)
    out = []
    at = start.replace(minute=0, second=0, microsecond=0)
    while at < end:
        piece = seconds(min(end, at + _HOUR) - max(start, at)) / Decimal(3600)
        if piece > 0 and at in hours:
            out.append((hours[at], piece))
        at += _HOUR
    return out


def commitments(
    lines: Sequence[CostLike], lo: datetime, hi: datetime, currency: str, fx: FxRates,
    terms: Sequence[CommitmentTerm] = DEFAULT_TERMS,
) -> list[CommitmentAdvice]:
    """Replay every term over the on-demand ``lines`` in [lo, hi) (whole hours)."""
    grid = _hours(lo, hi)
    index = {at: i for i, at in enumerate(grid)}
    machines: dict[tuple[str, str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * len(grid))
    spend: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * len(grid))
    rate: dict[tuple[str, str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for line in lines:
        if line.capacity != "on-demand" or not line.hours:
            continue
        key = (line.provider, line.region, line.instance_type)
        per_hour = convert(line.on_demand_amount, line.currency, currency, fx) / Decimal(line.hours)
        rate[key][0] += per_hour * line.hours
        rate[key][1] += line.hours
        for i, share in _spread(line, index, lo, hi):
            machines[key][i] += share
            spend[line.provider][i] += share * per_hour
    days = Decimal(len(grid)) / 24
    out = []
    for term in terms:
        scopes: list[tuple[str, list[Decimal], Decimal, bool]]
        if term.kind == "reservation":
            scopes = [(" ".join(k), h, rate[k][0] / rate[k][1], True) for k, h in sorted(machines.items())]
        else:
            scopes = [(p, h, Decimal(1), False) for p, h in sorted(spend.items())]
        for scope, hourly, price, whole in scopes:
            best = best_commitment(hourly, term.discount, whole=whole)
            if best is None:
                continue
            saving = best.saving * price
            out.append(CommitmentAdvice(
                term=term, scope=scope, level=best.level,
                hourly_commitment=Money(amount=best.level * price * (1 - term.discount), currency=currency),
                utilisation=best.covered / (best.level * len(hourly)), break_even=1 - term.discount,
                saving=Money(amount=saving, currency=currency),
                saving_per_month=Money(amount=saving * _MONTH_HOURS / len(hourly), currency=currency),
                on_demand=Money(amount=sum(hourly, Decimal(0)) * price, currency=currency), window_days=days,
            ))  # fmt: skip
    return sorted(out, key=lambda a: -a.saving.amount)


@dataclass(frozen=True)
class Sample:
    """One measured epoch rate: a job of ``model`` at ``img_size`` on ``gpu``."""

    job_id: str
    model: str
    img_size: int
    gpu: str
    rate: Decimal  # images/s per GPU


@dataclass(frozen=True)
class GpuUse:
    """Busy GPU-hours of one job on one GPU model, and the on-demand price of one GPU-hour there."""

    job_id: str
    gpu: str
    gpu_hours: Decimal
    price: Decimal


def right_sizing(samples: Sequence[Sample], use: Sequence[GpuUse], currency: str) -> list[RightSizing]:
    """Job classes that ran on a GPU and were measured as fast on a cheaper one."""
    rates: dict[tuple[str, int, str], list[Decimal]] = defaultdict(list)
    job_class: dict[str, tuple[str, int]] = {}
    for s in samples:
        rates[(s.model, s.img_size, s.gpu)].append(s.rate)
        job_class[s.job_id] = (s.model, s.img_size)
    measured = {k: Decimal(median(v)) for k, v in rates.items() if len(v) >= _MIN_SAMPLES}
    prices: dict[str, list[Decimal]] = defaultdict(list)
    hours: dict[tuple[str, int, str], Decimal] = defaultdict(Decimal)
    for u in use:
        prices[u.gpu].append(u.price)
        if u.job_id in job_class:
            hours[(*job_class[u.job_id], u.gpu)] += u.gpu_hours
    price = {gpu: Decimal(median(p)) for gpu, p in prices.items()}
    out = []
    for (model, img, gpu), gpu_hours in sorted(hours.items()):
        here = measured.get((model, img, gpu))
        if here is None or gpu not in price or not gpu_hours:
            continue
        options = [
            (other, rate) for (m, i, other), rate in measured.items()
            if (m, i) == (model, img) and other != gpu and other in price and price[other] < price[gpu]
            and rate >= here * SAME_SPEED
        ]  # fmt: skip
        if not options:
            continue
        # Cheapest for the same images: price per image on the other GPU.
        other, rate = min(options, key=lambda o: (price[o[0]] / o[1], o[0]))
        saving = gpu_hours * price[gpu] - gpu_hours * here / rate * price[other]
        if saving <= 0:
            continue
        out.append(RightSizing(
            model=model, img_size=img, gpu=gpu, cheaper_gpu=other, rate=here, cheaper_rate=rate,
            gpu_hours=gpu_hours, price=Money(amount=price[gpu], currency=currency),
            cheaper_price=Money(amount=price[other], currency=currency), saving=Money(amount=saving, currency=currency),
        ))  # fmt: skip
    return sorted(out, key=lambda r: -r.saving.amount)


def _window_lines(session: Session, lo: datetime, hi: datetime, open_costs: Sequence[CostLike]) -> list[CostLike]:
    rows = session.scalars(
        select(CostRecordRow).where(CostRecordRow.end > lo, CostRecordRow.start < hi).order_by(CostRecordRow.id)
    ).all()
    return [*rows, *(c for c in open_costs if utc(c.end) > lo and utc(c.start) < hi)]


def advise(
    session: Session, now: datetime, *, currency: str, fx: FxRates, lookback_days: int = 30,
    open_costs: Sequence[CostLike] = (), terms: Sequence[CommitmentTerm] = DEFAULT_TERMS,
) -> Advice:
    """Advice over the ``lookback_days`` (30-90) before ``now``, from the ledger and the measured epochs."""
    if not 30 <= lookback_days <= 90:
        raise ValueError(f"lookback_days must be 30 to 90, not {lookback_days}")
    hi = utc(now).replace(minute=0, second=0, microsecond=0)
    first = session.scalars(select(CostRecordRow.start).order_by(CostRecordRow.start).limit(1)).first()
    starts = [utc(first)] if first is not None else []
    starts += [utc(c.start) for c in open_costs]
    lo = max(hi - timedelta(days=lookback_days), min(starts, default=hi))
    lo = lo.replace(minute=0, second=0, microsecond=0)
    if hi - lo < timedelta(days=MIN_HISTORY_DAYS):
        return Advice(window_start=lo, window_end=hi, commitments=(), right_sizing=(),
                      note=f"No commitment advice yet: it needs {MIN_HISTORY_DAYS} days of usage history, and the "
                           f"ledger has {seconds(hi - lo) / 86400:.1f}.")  # fmt: skip
    lines = _window_lines(session, lo, hi, open_costs)
    found = commitments(lines, lo, hi, currency, fx, terms)
    ids = sorted({line.instance_id for line in lines})
    counts = select(InstanceRow.id, InstanceRow.gpu_count).where(InstanceRow.id.in_(ids))
    gpus = dict(session.execute(counts).tuples().all())
    use = []
    for line in lines:
        if line.job_id is None or line.kind == "idle" or not line.hours:
            continue
        n = gpus.get(line.instance_id, 1)
        on_demand = convert(line.on_demand_amount, line.currency, currency, fx)
        use.append(GpuUse(job_id=line.job_id, gpu=line.gpu, gpu_hours=Decimal(line.hours) * n,
                          price=on_demand / Decimal(line.hours) / n))  # fmt: skip
    samples = [
        Sample(job_id=s.job_id, model=s.model, img_size=s.img_size, gpu=s.gpu, rate=Decimal(str(s.rate_img_s)))
        for s in session.scalars(select(PerfSampleRow).where(PerfSampleRow.at >= lo, PerfSampleRow.at < hi))
    ]
    sizing = right_sizing(samples, use, currency)
    terms_said = "; ".join(f"{t.name} at {t.discount * 100:.0f}% off on-demand" for t in terms)
    days = seconds(hi - lo) / 86400
    note = (f"Replayed over the on-demand hours of {lo:%Y-%m-%d} to {hi:%Y-%m-%d} ({days:.0f} days). "
            f"Assumed terms, not quotes: {terms_said}; the break-even utilisation is 1 - discount.")
    return Advice(window_start=lo, window_end=hi, commitments=tuple(found), right_sizing=tuple(sizing), note=note)

