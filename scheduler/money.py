"""Exact money: Decimal amounts with a currency, and one place to convert.

Never sum floats. Amounts keep full precision internally; ``quantize`` rounds
only for display. Conversion goes through ``FxRates`` so every report states
which rates it used.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Annotated, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CURRENCIES = ("CNY", "USD")
Currency = Annotated[str, Field(pattern=r"^(CNY|USD)$")]
_CENT = Decimal("0.01")
_MONEY_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]{3})\s*$")


class Money(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    amount: Decimal
    currency: Currency

    @field_validator("amount", mode="before")
    @classmethod
    def _no_float(cls, v: object) -> object:
        # A float has already lost precision; go through its shortest repr.
        if isinstance(v, float):
            return Decimal(repr(v))
        return v

    @classmethod
    def parse(cls, text: str) -> "Money":
        """``"800 CNY"`` -> Money(800, CNY). Raises ValueError with a readable message."""
        m = _MONEY_RE.match(text)
        if not m:
            raise ValueError(f"{text!r} is not an amount with a currency")
        cur = m.group(2).upper()
        if cur not in CURRENCIES:
            raise ValueError(f"unknown currency {m.group(2)!r}; use one of {', '.join(CURRENCIES)}")
        try:
            return cls(amount=Decimal(m.group(1)), currency=cur)
        except InvalidOperation as exc:  # pragma: no cover - regex already guards this
            raise ValueError(f"{text!r} is not a number") from exc

    @classmethod
    def zero(cls, currency: str) -> "Money":
        return cls(amount=Decimal(0), currency=currency)

    def _same(self, other: "Money") -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot combine {self.currency} and {other.currency}; convert first")

    def __add__(self, other: "Money") -> "Money":
        self._same(other)
        return Money(amount=self.amount + other.amount, currency=self.currency)

    def __sub__(self, other: "Money") -> "Money":
        self._same(other)
        return Money(amount=self.amount - other.amount, currency=self.currency)

    def __mul__(self, factor: Decimal | int) -> "Money":
        if isinstance(factor, float):
            raise TypeError("multiply money by Decimal, not float")
        return Money(amount=self.amount * Decimal(factor), currency=self.currency)

    __rmul__ = __mul__

    def __lt__(self, other: "Money") -> bool:
        self._same(other)
        return self.amount < other.amount

    def __le__(self, other: "Money") -> bool:
        self._same(other)
        return self.amount <= other.amount

    def __gt__(self, other: "Money") -> bool:
        self._same(other)
        return self.amount > other.amount

    def __ge__(self, other: "Money") -> bool:
        self._same(other)
        return self.amount >= other.amount

    def quantize(self) -> "Money":
        return Money(amount=self.amount.quantize(_CENT, rounding=ROUND_HALF_EVEN), currency=self.currency)

    def __str__(self) -> str:
        try:
            return f"{self.amount.quantize(_CENT, rounding=ROUND_HALF_EVEN):,} {self.currency}"
        except InvalidOperation:  # not finite, or too large to round to cents: shown as it is
            return f"{self.amount:.6E} {self.currency}" if self.amount.is_finite() else f"{self.amount} {self.currency}"


class FxRates(BaseModel):
    """Units of ``base`` per one unit of each other currency, e.g. base CNY, {"USD": 7.2}."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: Currency = "CNY"
    rates: Mapping[str, Decimal] = Field(default_factory=lambda: {"USD": Decimal("7.2")})

    @model_validator(mode="after")
    def _complete(self) -> "FxRates":
        for cur in CURRENCIES:
            if cur != self.base and cur not in self.rates:
                raise ValueError(f"no FX rate for {cur} -> {self.base}")
        return self

    def rate(self, src: str, dst: str) -> Decimal:
        if src == dst:
            return Decimal(1)
        to_base = Decimal(1) if src == self.base else Decimal(self.rates[src])
        from_base = Decimal(1) if dst == self.base else Decimal(1) / Decimal(self.rates[dst])
        return to_base * from_base

    def convert(self, money: Money, to: str) -> Money:
        return Money(amount=money.amount * self.rate(money.currency, to), currency=to)


def total(items: Iterable[Money], currency: str, fx: FxRates | None = None) -> Money:
    """Sum money in ``currency``, converting with ``fx`` where currencies differ."""
    acc = Money.zero(currency)
    for m in items:
        if m.currency != currency:
            if fx is None:
                raise ValueError(f"need FX rates to add {m.currency} to {currency}")
            m = fx.convert(m, currency)
        acc = acc + m
    return acc


_FX_ENTRY_RE = re.compile(
    r"^\s*(?P<month>[0-9]{4}-[0-9]{2})\s*[:\s]\s*(?P<src>[A-Za-z]{3})\s*/\s*(?P<dst>[A-Za-z]{3})\s*[=\s]\s*"
    r"(?P<rate>[0-9]+(?:\.[0-9]+)?)\s*$"
)


def parse_fx_rates(text: str, *, where: str = "") -> dict[str, Decimal]:
    """Dated rates, one entry a line: ``2026-11:USD/CNY=7.12`` (or ``2026-11 USD/CNY 7.12``), as
    {month: CNY per USD}. ``CNY/USD=0.1404`` is taken as its inverse. Blank lines and ``#`` comments are
    skipped. A month given twice must say the same rate. Raises ValueError naming the line."""
    rates: dict[str, Decimal] = {}
    place = f"{where}: " if where else ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _FX_ENTRY_RE.match(line)
        if m is None:
            raise ValueError(f"{place}entry {number} {line[:60]!r} is not like 2026-11:USD/CNY=7.12")
        src, dst = m["src"].upper(), m["dst"].upper()
        if {src, dst} != {"USD", "CNY"}:
            raise ValueError(f"{place}entry {number}: gpusched converts between USD and CNY only, not {src}/{dst}")
        rate = Decimal(m["rate"])
        if rate <= 0:
            raise ValueError(f"{place}entry {number}: a rate must be above 0")
        cny_per_usd = rate if src == "USD" else Decimal(1) / rate
        month = m["month"]
        if month in rates and rates[month] != cny_per_usd:
            raise ValueError(f"{place}{month} is given twice with different rates ({rates[month]} and {cny_per_usd})")
        rates[month] = cny_per_usd
    return rates
