"""The shape of a bill reconciliation: the clouds' own bills against gpusched's ledger, per cloud and month.

Built by ``scheduler/accounting/reconcile_bills.py``, drawn by ``bill_render.py`` and, inside the monthly
report, by its renderers. Amounts are exact; rounding happens only when drawn.

Per cloud, in the cloud's own currency (the bill's; the ledger converted into it at the month's rate
where the two differ), and again in the report currency:

* **ledger**: what gpusched's ledger says its instances on that cloud cost in the month (spot and
  on-demand hours; a reserved machine's hours cost 0 there, and on the bill once the reservation pays);
* **billed**: what the bill charges those same instances (matched by the cloud's instance id, or by
  the ``gpusched:instance`` tag where the bill has only tags);
* **difference** = billed - ledger, and its percent of the ledger; within the tolerance (1% by
  default) is what a sound ledger shows;
* **others**: what the bill charges instances gpusched does not know: someone else's machines, or
  gpusched's own that its ledger lost (a leak). Each is listed with why it is thought one or the other;
* **missing**: ledger instances the bill does not charge.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal

from scheduler.models import Frozen
from scheduler.money import Money

__all__ = ["BillMatch", "BillReconciliation", "CloudBill", "UnknownKind"]

# Why a billed instance is not in the ledger:
#  leak: gpusched launched it (its cluster's tag, or a row in the store) but counted none of its time;
#  other-cluster: another gpusched installation's (a different gpusched:cluster tag);
#  not-gpusched: no gpusched tag at all: someone else's machine (or usage before the tags were active).
UnknownKind = Literal["leak", "other-cluster", "not-gpusched"]


class BillMatch(Frozen):
    """One instance: as the ledger has it, as the bill has it, or both."""

    key: str  # what names it: the cloud's id, else our instance id, else "(untagged)"
    instance: str | None = None  # gpusched's instance id, when known
    cloud_id: str | None = None  # the cloud's instance id, when known
    team: str | None = None
    ledger: Money | None = None  # in the cloud's currency
    billed: Money | None = None
    difference: Money | None = None  # billed - ledger, both present
    kind: UnknownKind | None = None  # for a billed instance the ledger does not know
    why: str = ""


class CloudBill(Frozen):
    cloud: str
    month: str
    read: bool  # False: the bill could not be read (``error`` says why); no figure below is meaningful
    error: str | None = None
    currency: str | None = None  # the bill's currency (the ledger's when the bill has no line)
    lines: int = 0  # bill lines read
    estimated: bool = False  # the cloud says the month's figures may still change
    ledger: Money | None = None
    billed: Money | None = None  # gpusched's instances, as billed
    difference: Money | None = None
    difference_pct: Decimal | None = None  # of the ledger; None when the ledger is 0
    within_tolerance: bool | None = None
    others: Money | None = None  # billed to instances the ledger does not know
    ledger_report: Money | None = None  # the same three in the report currency
    billed_report: Money | None = None
    others_report: Money | None = None
    matched: tuple[BillMatch, ...] = ()
    unknown: tuple[BillMatch, ...] = ()
    missing: tuple[BillMatch, ...] = ()

    @property
    def status(self) -> str:
        """ok | check | unread: what a reader should do about this cloud."""
        if not self.read:
            return "unread"
        return "ok" if self.within_tolerance is not False and not self.unknown and not self.missing else "check"


class BillReconciliation(Frozen):
    month: str
    currency: str  # the report currency
    tolerance_pct: Decimal
    fx: dict[str, Decimal]  # units of the report currency per unit of each other currency
    fx_dated: bool  # the month has a rate of its own
    as_of: datetime
    clouds: tuple[CloudBill, ...]

    @property
    def ok(self) -> bool:
        return all(c.status == "ok" for c in self.clouds)
