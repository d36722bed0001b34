"""The clouds' own bills, as one shape: ``BillLine``, and the ``BillReader`` protocol each cloud implements.

A bill reader lives beside its cloud's adapter (``providers/aws/bills.py``, ``providers/alibaba/bills.py``,
``providers/tencent/bills.py``): it asks the cloud's billing API for one month of compute charges, pages
through the answer, and hands back ``BillLine`` rows. Vendor exceptions never cross it: they become the
project's ``ProviderError`` classes, as in the adapters. The accounting side
(``scheduler/accounting/reconcile_bills.py``) matches the lines to the ledger.

A line names an instance by the cloud's id where the bill has one (Alibaba ``InstanceID``, Tencent
``ResourceId``), and by its tags where the bill groups by them (AWS Cost Explorer groups by the
``gpusched:instance`` cost allocation tag; it has no instance id at month grain). Every line carries
what the bill carries, nothing worked out: its amount in the bill's own currency.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from random import Random
from typing import Protocol, TypeVar

from pydantic import Field, field_validator

from providers.base import TAG_INSTANCE, TAG_MANAGED, ProviderError
from providers.retry import call_with_retry
from scheduler.clock import Clock
from scheduler.errors import UserError
from scheduler.models import Frozen
from scheduler.money import Money

__all__ = ["BillLine", "BillReader", "check_month", "month_days", "retrying"]

_MONTH_RE = re.compile(r"^([1-9][0-9]{3})-(0[1-9]|1[0-2])$")
T = TypeVar("T")


class BillLine(Frozen):
    """One month's charge for one instance (or one tag group) as the cloud's bill states it."""

    cloud: str
    month: str = Field(pattern=r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])$")  # YYYY-MM, the bill's billing cycle
    instance_id: str | None = None  # the cloud's own id; None where the bill has only tags (AWS CE)
    tags: Mapping[str, str] = Field(default_factory=dict)
    amount: Money  # what the bill says is owed, before tax, in the bill's currency
    region: str = ""
    description: str = ""  # the bill's product / item, e.g. "ecs PayAsYouGo", "p_cvm postPay"
    estimated: bool = False  # the cloud says the figure may still change (a month in progress)

    @field_validator("tags")
    @classmethod
    def _plain_tags(cls, v: Mapping[str, str]) -> dict[str, str]:
        return dict(v)

    @property
    def gpusched_instance(self) -> str | None:
        """Our own instance id, from the ``gpusched:instance`` tag the lifecycle puts on every launch."""
        return self.tags.get(TAG_INSTANCE) or None

    @property
    def cluster(self) -> str | None:
        return self.tags.get(TAG_MANAGED) or None

    @property
    def key(self) -> str:
        """What names the line in a table: the cloud's id, else our tag, else "(untagged)"."""
        return self.instance_id or self.gpusched_instance or "(untagged)"


class BillReader(Protocol):
    """One cloud's bill for a month. ``read(month)`` returns every compute line of that month's bill,
    paged inside; it raises ``ProviderError`` (``AuthFailed`` for refused credentials or a missing billing
    permission, ``Throttled`` after its retries, ...), never a vendor exception."""

    name: str

    def read(self, month: str) -> list[BillLine]: ...


def check_month(month: str) -> tuple[int, int]:
    """``"2026-11"`` -> (2026, 11); a ``UserError`` for anything else (a bill is asked for by month)."""
    m = _MONTH_RE.match(month) if isinstance(month, str) else None
    if m is None:
        raise UserError(f"a bill is read by month like 2026-11, not {month!r}", fix="give the month as YYYY-MM")
    return int(m.group(1)), int(m.group(2))


def month_days(month: str) -> tuple[str, str]:
    """The month as ISO dates [first day, first day of the next month): the half-open span billing APIs take."""
    year, mon = check_month(month)
    nxt = (year + 1, 1) if mon == 12 else (year, mon + 1)
    return f"{year:04d}-{mon:02d}-01", f"{nxt[0]:04d}-{nxt[1]:02d}-01"


def retrying(clock: Clock, rng: Random, *, attempts: int = 5) -> Callable[[Callable[[], T]], T]:
    """Run one page request with our back-off (``providers.retry``): billing APIs throttle hard (Alibaba
    10 a second, Tencent 5), and a page asked again is harmless, so Throttled and ProviderUnavailable are
    tried again, on the injected clock."""

    def run(fn: Callable[[], T]) -> T:
        return call_with_retry(fn, clock=clock, rng=rng, attempts=attempts)

    return run


def decimal_of(value: object, *, what: str, cloud: str) -> Decimal:
    """A bill's number (JSON number, string, or Decimal) as an exact Decimal; ProviderError when it is none."""
    try:
        number = Decimal(str(value).strip())
    except (ArithmeticError, ValueError):
        number = Decimal("NaN")
    if not number.is_finite():
        raise ProviderError(f"the {cloud} bill's {what} is not a number: {str(value)[:40]!r}", provider=cloud,
                            code="UnreadableBill")
    return number
