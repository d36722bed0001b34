"""Unit costs: what one training run, 1,000 images inferred and one GPU-hour of each GPU model cost.

The figures a manager compares month to month, in the report's own definitions (``report_models``):
cost = billed + the reservations' amortized fee, on-demand equivalent = the billed hours at on-demand
prices (``report_lines.Line.billed_on_demand``, the one definition the whole report uses).

* **Per training run**: the training jobs that *completed* (succeeded) in the period, each at its whole
  cost: every attempt, preempted ones included, in every month up to this one (an earlier month's lines
  priced as that month's report prices them, at its own FX rates and reservation fees), divided by the
  number of runs. A run still going, failed or cancelled is not a unit of work delivered: its cost is in
  the month's total, not in this figure.
* **Per 1,000 images inferred**: the inference jobs that completed in the period, at their whole cost,
  per 1,000 of the images their job files name (a succeeded job inferred all of them).
* **Per GPU-hour, by GPU model**: the period's cost of the machines with that GPU, per GPU-hour
  (machine-hours x GPUs per machine), busy and idle; per *busy* GPU-hour (what an hour of work cost, the
  idle hours paid for included); and the on-demand equivalent per billed GPU-hour, the list price the
  billed hours are compared with. The reservations' unused part belongs to no GPU-hour that ran, so it
  is in none of these (it is a row of its own in every breakdown).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.accounting.report_lines import Line, month_bounds, month_lines, priced_period
from scheduler.models import Frozen, ReservedCapacity
from scheduler.money import FxRates, Money
from scheduler.store.tables import CostRecordRow, InstanceRow, JobRow
from scheduler.times import utc

__all__ = ["GpuUnitCost", "RunUnitCost", "UnitCosts", "UnitRow", "unit_costs", "unit_rows"]

_THOUSAND = Decimal(1000)
_ZERO = Decimal(0)


class RunUnitCost(Frozen):
    """The jobs of one kind that completed in the period, at their whole cost."""

    kind: Literal["train", "infer"]
    jobs: int
    units: Decimal  # train: runs; infer: thousands of images
    images: int | None  # infer: the images their job files name
    cost: Money  # billed + reserved fee, every attempt, every month up to this one
    billed: Money
    on_demand_equivalent: Money  # their billed hours at on-demand prices
    gpu_hours: Decimal
    per_unit: Money | None  # None with no unit completed

    @property
    def savings(self) -> Money:
        return self.on_demand_equivalent - self.billed


class GpuUnitCost(Frozen):
    """One GPU model's hours in the period and what they cost."""

    gpu: str
    gpu_hours: Decimal  # machine-hours x GPUs per machine, busy and idle, every capacity type
    busy_gpu_hours: Decimal
    billed_gpu_hours: Decimal  # on spot and on-demand machines (not prepaid)
    cost: Money  # billed + reserved fee
    billed: Money
    on_demand_equivalent: Money
    per_gpu_hour: Money | None
    per_busy_gpu_hour: Money | None
    on_demand_per_gpu_hour: Money | None  # on-demand equivalent / billed GPU-hours


class UnitCosts(Frozen):
    training: RunUnitCost
    inference: RunUnitCost
    by_gpu: tuple[GpuUnitCost, ...]  # most GPU-hours first
    machines_without_gpu_count: int  # machines no longer in the store: counted as one GPU each


def _per(amount: Decimal, units: Decimal, currency: str) -> Money | None:
    return Money(amount=amount / units, currency=currency) if units else None


def _gpu_counts(session: Session, lines: Iterable[Line]) -> dict[str, int]:
    ids = sorted({line.instance_id for line in lines if line.instance_id})
    if not ids:
        return {}
    rows = session.execute(select(InstanceRow.id, InstanceRow.gpu_count).where(InstanceRow.id.in_(ids)))
    return {iid: count for iid, count in rows}


def _earlier_lines(
    session: Session, job_ids: Sequence[str], month: str, reserved: Sequence[ReservedCapacity], currency: str,
    fx_for: Callable[[str], FxRates], now: datetime,
) -> list[Line]:
    """The lines of ``job_ids`` in the months before ``month``, each month priced as its own report prices it."""
    if not job_ids:
        return []
    months = sorted(set(session.scalars(
        select(CostRecordRow.month).where(CostRecordRow.job_id.in_(job_ids), CostRecordRow.month < month))))
    wanted, out = set(job_ids), []
    for m in months:
        start, end = month_bounds(m)
        fx = fx_for(m)
        lines, _opened = month_lines(session, m, start, end, currency, fx)
        charged, _uses = priced_period(lines, reserved, start, min(max(utc(now), start), end), currency, fx)
        out += [line for line in charged if line.job_id in wanted]
    return out


def _runs(kind: Literal["train", "infer"], jobs: Sequence[JobRow], lines: Sequence[Line], gpus: dict[str, int],
          currency: str) -> RunUnitCost:
    ids = {j.id for j in jobs}
    mine = [line for line in lines if line.job_id in ids]
    cost = sum((line.total for line in mine), _ZERO)
    billed = sum((line.cost for line in mine), _ZERO)
    images = None
    units = Decimal(len(jobs))
    if kind == "infer":
        images = sum(int((j.spec_json.get("infer") or {}).get("images") or 0) for j in jobs)
        units = Decimal(images) / _THOUSAND
    return RunUnitCost(
        kind=kind, jobs=len(jobs), units=units, images=images, cost=Money(amount=cost, currency=currency),
        billed=Money(amount=billed, currency=currency),
        on_demand_equivalent=Money(amount=sum((line.billed_on_demand for line in mine), _ZERO), currency=currency),
        gpu_hours=sum((line.hours * gpus.get(line.instance_id, 1) for line in mine), _ZERO),
        per_unit=_per(cost, units, currency),
    )  # fmt: skip


def _by_gpu(lines: Sequence[Line], gpus: dict[str, int], currency: str) -> tuple[GpuUnitCost, ...]:
    sums: dict[str, list[Decimal]] = defaultdict(lambda: [_ZERO] * 6)
    for line in lines:
        acc, gpu_hours = sums[line.gpu], line.hours * gpus.get(line.instance_id, 1)
        acc[0] += gpu_hours
        acc[1] += gpu_hours if line.busy else _ZERO
        acc[2] += _ZERO if line.reserved else gpu_hours
        acc[3] += line.total
        acc[4] += line.cost
        acc[5] += line.billed_on_demand
    rows = [
        GpuUnitCost(
            gpu=gpu, gpu_hours=h, busy_gpu_hours=busy, billed_gpu_hours=billed_h,
            cost=Money(amount=cost, currency=currency), billed=Money(amount=billed, currency=currency),
            on_demand_equivalent=Money(amount=od, currency=currency), per_gpu_hour=_per(cost, h, currency),
            per_busy_gpu_hour=_per(cost, busy, currency), on_demand_per_gpu_hour=_per(od, billed_h, currency),
        )
        for gpu, (h, busy, billed_h, cost, billed, od) in sums.items()
    ]  # fmt: skip
    return tuple(sorted(rows, key=lambda r: (-r.gpu_hours, r.gpu)))


def unit_costs(
    session: Session, month: str, lines: Sequence[Line], *, start: datetime, as_of: datetime,
    reserved: Sequence[ReservedCapacity], currency: str, fx_for: Callable[[str], FxRates],
) -> UnitCosts:
    """The period's unit costs; ``lines`` are the period's lines, charged with their reservation fees."""
    done = session.scalars(
        select(JobRow).where(JobRow.kind.in_(("train", "infer")), JobRow.state == "succeeded",
                             JobRow.finished_at >= start, JobRow.finished_at < as_of).order_by(JobRow.id)
    ).all()  # fmt: skip
    earlier = _earlier_lines(session, [j.id for j in done], month, reserved, currency, fx_for, as_of)
    ids = {j.id for j in done}
    whole = [line for line in lines if line.job_id in ids] + earlier
    gpus = _gpu_counts(session, [*lines, *earlier])
    known = set(gpus)
    return UnitCosts(
        training=_runs("train", [j for j in done if j.kind == "train"], whole, gpus, currency),
        inference=_runs("infer", [j for j in done if j.kind == "infer"], whole, gpus, currency),
        by_gpu=_by_gpu(lines, gpus, currency),
        machines_without_gpu_count=len({line.instance_id for line in lines if line.instance_id not in known}),
    )


class UnitRow(Frozen):
    """One unit cost as a flat row (CSV, XLSX): ``units`` x ``per_unit`` = ``cost``."""

    unit: str  # "training run", "1,000 images inferred", "GPU-hour", "busy GPU-hour", "on-demand GPU-hour"
    of: str  # what was counted: "completed runs", a GPU model ...
    units: Decimal
    cost: Money
    per_unit: Money | None
    gpu_hours: Decimal
    billed: Money
    on_demand_equivalent: Money


def unit_rows(u: UnitCosts) -> list[UnitRow]:
    t, i = u.training, u.inference
    rows = [
        UnitRow(unit="training run", of=f"{t.jobs} completed run(s)", units=t.units, cost=t.cost, per_unit=t.per_unit,
                gpu_hours=t.gpu_hours, billed=t.billed, on_demand_equivalent=t.on_demand_equivalent),
        UnitRow(unit="1,000 images inferred", of=f"{i.images or 0:,} images in {i.jobs} completed job(s)",
                units=i.units, cost=i.cost, per_unit=i.per_unit, gpu_hours=i.gpu_hours, billed=i.billed,
                on_demand_equivalent=i.on_demand_equivalent),
    ]  # fmt: skip
    for g in u.by_gpu:
        rows += [
            UnitRow(unit="GPU-hour", of=g.gpu, units=g.gpu_hours, cost=g.cost, per_unit=g.per_gpu_hour,
                    gpu_hours=g.gpu_hours, billed=g.billed, on_demand_equivalent=g.on_demand_equivalent),
            UnitRow(unit="busy GPU-hour", of=g.gpu, units=g.busy_gpu_hours, cost=g.cost,
                    per_unit=g.per_busy_gpu_hour, gpu_hours=g.gpu_hours, billed=g.billed,
                    on_demand_equivalent=g.on_demand_equivalent),
            UnitRow(unit="billed GPU-hour at on-demand prices", of=g.gpu, units=g.billed_gpu_hours,
                    cost=g.on_demand_equivalent, per_unit=g.on_demand_per_gpu_hour, gpu_hours=g.billed_gpu_hours,
                    billed=g.billed, on_demand_equivalent=g.on_demand_equivalent),
        ]  # fmt: skip
    return rows
