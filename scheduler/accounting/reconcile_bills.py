"""Money truth: the clouds' own bills matched to gpusched's ledger, per cloud and month.

``read_bills`` asks each cloud's ``BillReader`` (``providers/*/bills.py``) for the month; a cloud whose
bill cannot be read (refused credentials, a missing billing permission, throttled past the retries) is
kept with its error, so one cloud's failure never hides the others. ``ledger_instances`` sums the
ledger's cost lines of the month per instance (the same lines the monthly report adds up, running
machines priced to the report time) with each instance's cloud id from the store. ``reconcile`` is the
pure part: it matches bill lines to ledger instances, by the cloud's instance id where the bill has one,
else by the ``gpusched:instance`` tag, and works out, per cloud, ledger vs billed, the difference and
its percent, the instances billed that the ledger does not know (with why: a leak of this cluster,
another gpusched cluster's, or not gpusched's at all) and the ledger's instances the bill lacks.
``bill_models`` says what each figure means.

Every amount is compared in the cloud's own currency (the bill's); where the ledger priced an instance
in another one it is converted at the month's rate (``Settings.fx_for(month)``), and the totals are
shown again in the report currency at that rate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from providers.bills import BillLine, BillReader
from scheduler.accounting import ledger
from scheduler.accounting.bill_models import BillMatch, BillReconciliation, CloudBill, UnknownKind
from scheduler.errors import GpuschedError
from scheduler.money import CURRENCIES, FxRates, Money
from scheduler.store.tables import InstanceRow

__all__ = ["KnownInstances", "LedgerInstance", "ledger_instances", "known_instances", "read_bills", "reconcile",
           "reconcile_month"]

log = structlog.get_logger("gpusched.bills")
_HUNDRED = Decimal(100)


@dataclass(frozen=True)
class LedgerInstance:
    """One instance's month in the ledger."""

    instance: str  # gpusched's instance id (the gpusched:instance tag)
    cloud: str
    cloud_id: str | None
    team: str
    amount: Money  # in the instance's price currency
    reserved: bool = False


@dataclass(frozen=True)
class KnownInstances:
    """Every instance the store has for one cloud, whatever the month: to tell a leak from a stranger."""

    by_cloud_id: Mapping[str, str] = field(default_factory=dict)  # cloud id -> gpusched id
    ids: frozenset[str] = frozenset()


# --- reading -------------------------------------------------------------------------


def read_bills(readers: Mapping[str, BillReader], month: str) -> dict[str, list[BillLine] | GpuschedError]:
    """Each cloud's bill for ``month``, or the error that stopped it (logged, with the vendor's code)."""
    out: dict[str, list[BillLine] | GpuschedError] = {}
    for cloud, reader in readers.items():
        try:
            out[cloud] = reader.read(month)
        except GpuschedError as exc:
            fields = exc.log_fields() if hasattr(exc, "log_fields") else {"error": type(exc).__name__}
            log.warning("bill_unread", cloud=cloud, month=month, **fields)
            out[cloud] = exc
    return out


def ledger_instances(session: Session, month: str, now: datetime) -> list[LedgerInstance]:
    """The month's ledger per instance (written records and usage not yet written, priced up to ``now``)."""
    sums: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    teams: dict[str, str] = {}
    for line in ledger.cost_lines(session, month, now):
        sums[line.instance_id][line.currency] += line.amount
        teams.setdefault(line.instance_id, line.team)
    if not sums:
        return []
    rows = {r.id: r for r in session.scalars(select(InstanceRow).where(InstanceRow.id.in_(sorted(sums))))}
    out = []
    for instance_id, by_currency in sums.items():
        row = rows.get(instance_id)
        if row is None:  # pragma: no cover - a cost line always has its instance row (a foreign key)
            continue
        for currency, amount in by_currency.items():
            out.append(LedgerInstance(instance=instance_id, cloud=row.provider, cloud_id=row.cloud_id,
                                      team=teams[instance_id], amount=Money(amount=amount, currency=currency),
                                      reserved=row.reserved))
    return out


def known_instances(session: Session, clouds: Iterable[str]) -> dict[str, KnownInstances]:
    wanted = sorted(set(clouds))
    by_cloud: dict[str, dict[str, str]] = {c: {} for c in wanted}
    ids: dict[str, set[str]] = {c: set() for c in wanted}
    for row_id, provider, cloud_id in session.execute(
        select(InstanceRow.id, InstanceRow.provider, InstanceRow.cloud_id).where(InstanceRow.provider.in_(wanted))
    ):
        ids[provider].add(row_id)
        if cloud_id:
            by_cloud[provider][cloud_id] = row_id
    return {c: KnownInstances(by_cloud_id=by_cloud[c], ids=frozenset(ids[c])) for c in wanted}


# --- matching ------------------------------------------------------------------------


def reconcile(
    month: str,
    ledger_rows: Sequence[LedgerInstance],
    bills: Mapping[str, Sequence[BillLine] | GpuschedError],
    *,
    cluster: str,
    currency: str,
    fx: FxRates,
    fx_dated: bool = False,
    tolerance_pct: Decimal = Decimal(1),
    as_of: datetime,
    known: Mapping[str, KnownInstances] | None = None,
) -> BillReconciliation:
    """Match each cloud's bill (or its error) to the ledger's instances on that cloud."""
    clouds = []
    for cloud in sorted(bills):
        bill = bills[cloud]
        mine = [r for r in ledger_rows if r.cloud == cloud]
        if isinstance(bill, GpuschedError):
            clouds.append(CloudBill(cloud=cloud, month=month, read=False, error=_describe(bill)))
            continue
        clouds.append(_one_cloud(cloud, month, mine, list(bill), cluster=cluster, currency=currency, fx=fx,
                                 tolerance_pct=tolerance_pct, known=(known or {}).get(cloud, KnownInstances())))
    return BillReconciliation(
        month=month, currency=currency, tolerance_pct=tolerance_pct,
        fx={cur: fx.rate(cur, currency) for cur in CURRENCIES if cur != currency}, fx_dated=fx_dated,
        as_of=as_of, clouds=tuple(clouds),
    )


def _one_cloud(cloud: str, month: str, mine: list[LedgerInstance], lines: list[BillLine], *, cluster: str,
               currency: str, fx: FxRates, tolerance_pct: Decimal, known: KnownInstances) -> CloudBill:
    bill_currency = _bill_currency(lines, mine, currency)

    def here(m: Money) -> Money:
        return m if m.currency == bill_currency else fx.convert(m, bill_currency)

    by_cloud_id = {r.cloud_id: r for r in mine if r.cloud_id}
    by_instance = {r.instance: r for r in mine}
    billed_to: dict[str, Decimal] = defaultdict(Decimal)  # gpusched id -> billed
    strangers: dict[str, list[BillLine]] = defaultdict(list)
    for line in lines:
        owner = by_cloud_id.get(line.instance_id or "") or by_instance.get(line.gpusched_instance or "")
        if owner is not None:
            billed_to[owner.instance] += here(line.amount).amount
        else:
            strangers[line.key].append(line)
    matched, missing = [], []
    ledger_total = billed_total = Decimal(0)
    for row in sorted(mine, key=lambda r: (r.team, r.instance)):
        amount = here(row.amount)
        ledger_total += amount.amount
        if row.instance in billed_to:
            billed = billed_to[row.instance]
            billed_total += billed
            matched.append(BillMatch(
                key=row.cloud_id or row.instance, instance=row.instance, cloud_id=row.cloud_id, team=row.team,
                ledger=amount, billed=_m(billed, bill_currency), difference=_m(billed - amount.amount, bill_currency),
            ))
        elif amount.amount:
            missing.append(BillMatch(
                key=row.cloud_id or row.instance, instance=row.instance, cloud_id=row.cloud_id, team=row.team,
                ledger=amount, why="in the ledger, not on the bill: a bill not yet final, or hours the cloud "
                                   "did not charge (check the instance's billing in the console)",
            ))
    unknown, others = [], Decimal(0)
    for key, group in strangers.items():
        amount = sum((here(line.amount).amount for line in group), Decimal(0))
        others += amount
        kind, why, ours = _why_unknown(group[0], cluster=cluster, known=known)
        unknown.append(BillMatch(key=key, instance=ours, cloud_id=group[0].instance_id,
                                 billed=_m(amount, bill_currency), kind=kind, why=why))
    unknown.sort(key=lambda u: (-u.billed.amount if u.billed else Decimal(0), u.key))
    difference = billed_total - ledger_total
    pct = difference / ledger_total * _HUNDRED if ledger_total else None
    within = abs(pct) <= tolerance_pct if pct is not None else difference == 0

    def report(amount: Decimal) -> Money:
        return fx.convert(_m(amount, bill_currency), currency)

    return CloudBill(
        cloud=cloud, month=month, read=True, currency=bill_currency, lines=len(lines),
        estimated=any(line.estimated for line in lines),
        ledger=_m(ledger_total, bill_currency), billed=_m(billed_total, bill_currency),
        difference=_m(difference, bill_currency), difference_pct=pct, within_tolerance=within,
        others=_m(others, bill_currency), ledger_report=report(ledger_total), billed_report=report(billed_total),
        others_report=report(others), matched=tuple(matched), unknown=tuple(unknown), missing=tuple(missing),
    )


def _why_unknown(line: BillLine, *, cluster: str, known: KnownInstances) -> tuple[UnknownKind, str, str | None]:
    ours = known.by_cloud_id.get(line.instance_id or "") or (
        line.gpusched_instance if line.gpusched_instance in known.ids else None)
    if ours is not None:
        return ("leak", f"gpusched launched it ({ours}) but its ledger counted none of this month's time: "
                        "a machine billing outside gpusched's view", ours)
    if line.cluster == cluster:
        return ("leak", f"tagged by this gpusched cluster ({cluster}) but unknown to its store: "
                        "a machine gpusched launched and lost (terminate it if nothing needs it)",
                line.gpusched_instance)
    if line.cluster:
        return ("other-cluster", f"another gpusched installation's (gpusched:cluster={line.cluster})",
                line.gpusched_instance)
    if line.instance_id is None:
        return ("not-gpusched", "usage without gpusched's tags: machines gpusched did not launch, or usage "
                                "before gpusched:instance was activated as a cost allocation tag", None)
    return ("not-gpusched", "no gpusched tag: someone else's machine on this account", None)


def _bill_currency(lines: Sequence[BillLine], mine: Sequence[LedgerInstance], fallback: str) -> str:
    for line in lines:
        return line.amount.currency
    for row in mine:
        return row.amount.currency
    return fallback


def _describe(exc: GpuschedError) -> str:
    code = getattr(exc, "code", "")
    text = f"{type(exc).__name__}: {exc.message}" + (f" ({code})" if code and code not in exc.message else "")
    return text + (f"; fix: {exc.fix}" if exc.fix else "")


def _m(amount: Decimal, currency: str) -> Money:
    return Money(amount=amount, currency=currency)


# --- the whole month -------------------------------------------------------------------


def reconcile_month(
    session: Session,
    readers: Mapping[str, BillReader],
    month: str,
    *,
    now: datetime,
    cluster: str,
    currency: str,
    fx: FxRates,
    fx_dated: bool = False,
    tolerance_pct: Decimal = Decimal(1),
) -> BillReconciliation:
    """Read every configured cloud's bill for ``month`` and match it to the store's ledger."""
    bills = read_bills(readers, month)
    return reconcile(month, ledger_instances(session, month, now), bills, cluster=cluster, currency=currency,
                     fx=fx, fx_dated=fx_dated, tolerance_pct=tolerance_pct, as_of=now,
                     known=known_instances(session, bills))
