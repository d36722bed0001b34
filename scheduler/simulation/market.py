"""The simulated market a trace runs in: how often spot machines are reclaimed, per market.

The bundled catalog gives each offer a reclaim rate (``spot_interruptions_per_hour``), nearly the
same everywhere. A month in a busier market reclaims more often in some clouds, regions or zones
and less in others; ``MarketSpec`` scales the catalog's rate per market, and a trace carries it
in its first line (``trace_file``), so ``gpusched simulate`` replays the month in the market it
was generated for. The sandbox clouds publish the scaled rate in their offers and draw reclaims
at it: the planner is told the market's rate, as a cloud's spot advisor would tell it.

A key names a market by a prefix of the offer's key ``provider/region/zone/instance_type``
(``aws``, ``aws/us-east-1``, ``alibaba/cn-hangzhou/cn-hangzhou-h``, ...), or ``*`` for every
market; the longest matching key wins, and a market no key names keeps the catalog's rate.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from pydantic import Field, field_validator

from scheduler.errors import UserError
from scheduler.models import Frozen, Offer

__all__ = ["MAX_RECLAIM_SCALE", "MarketSpec", "parse_reclaim_scale"]

# Past this a spot machine is reclaimed every few minutes at the catalog's rates: no month is that.
MAX_RECLAIM_SCALE = 50.0
_FIX = 'a factor for every market ("2") or market=factor pairs ("aws=2,alibaba/cn-hangzhou=0.5,*=1")'


class MarketSpec(Frozen):
    """Factors on the catalog's spot reclaim rates, by market key prefix (see the module's doc)."""

    reclaim_scale: dict[str, float] = Field(default_factory=dict)

    @field_validator("reclaim_scale")
    @classmethod
    def _valid(cls, scales: dict[str, float]) -> dict[str, float]:
        for key, factor in scales.items():
            _check(key, factor)
        return scales

    def reclaim_factor(self, offer: Offer) -> float:
        """The factor on ``offer``'s reclaim rate: the longest key that is a prefix of its market."""
        parts = offer.key.split("/")
        for n in range(len(parts), 0, -1):
            factor = self.reclaim_scale.get("/".join(parts[:n]))
            if factor is not None:
                return factor
        return self.reclaim_scale.get("*", 1.0)

    def scaled(self, offers: Sequence[Offer]) -> list[Offer]:
        """``offers`` with their spot reclaim rates in this market (what the sandbox clouds publish and draw at)."""
        return [o.model_copy(update={"spot_interruptions_per_hour": o.spot_interruptions_per_hour
                                     * self.reclaim_factor(o)}) for o in offers]

    @property
    def is_catalog(self) -> bool:
        """Every market at the catalog's rate: nothing to write into a trace."""
        return all(f == 1.0 for f in self.reclaim_scale.values())

    def describe(self) -> str:
        if self.is_catalog:
            return "spot reclaims at the catalog's rates"
        pairs = ", ".join(f"{k} x{v:g}" for k, v in sorted(self.reclaim_scale.items()))
        return f"spot reclaim rates scaled: {pairs}"


def _check(key: str, factor: float) -> None:
    parts = key.split("/")
    if key != "*" and (len(parts) > 4 or not all(p.strip() == p and p for p in parts)):
        raise ValueError(f"market {key!r} is not '*' nor provider[/region[/zone[/instance_type]]]")
    if not 0.0 <= factor <= MAX_RECLAIM_SCALE:
        raise ValueError(f"the reclaim factor of {key!r} must be between 0 and {MAX_RECLAIM_SCALE:g}, not {factor}")


def parse_reclaim_scale(text: str, offers: Sequence[Offer] | None = None) -> MarketSpec:
    """``"2"`` (every market) or ``"aws=2,alibaba/cn-hangzhou=0.5"``; a clear ``UserError`` otherwise.

    ``offers`` (the catalog the trace is made for): a market none of them is in is refused, as a typo
    (``asw=2``) would otherwise leave every rate as it was without a word."""
    markets = {"/".join(o.key.split("/")[:n]) for o in offers or () for n in range(1, 5)}
    scales: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.rpartition("=")
        key = key.strip() if sep else "*"
        try:
            factor = float(value)
        except ValueError:
            raise UserError(f"--reclaim-scale: {value.strip()!r} is not a number", fix=_FIX) from None
        if key in scales:
            raise UserError(f"--reclaim-scale: market {key!r} is given twice", fix=_FIX)
        try:
            _check(key, factor)
        except ValueError as exc:
            raise UserError(f"--reclaim-scale: {exc}", fix=_FIX) from None
        if markets and key != "*" and key not in markets:
            close = difflib.get_close_matches(key, sorted(markets), n=3)
            raise UserError(f"--reclaim-scale: no offer of the catalog is in market {key!r}"
                            + (f"; did you mean {' or '.join(map(repr, close))}?" if close else ""), fix=_FIX)
        scales[key] = factor
    if not scales:
        raise UserError("--reclaim-scale is empty", fix=_FIX)
    return MarketSpec(reclaim_scale=scales)

