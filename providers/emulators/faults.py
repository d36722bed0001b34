"""Random faults for the emulators: a seeded share of calls fails the way clouds fail.

One switch, the same in every emulator (and in the test harnesses that play AWS
and the sandbox): ``FaultPlan(rate, seed, kinds)``. Each call the emulator
answers draws once: with probability ``rate`` it fails with one of ``kinds``,
chosen evenly, from a ``random.Random(seed)``, so one seed and one call
sequence always fail the same calls. The kinds:

``throttle``
    The cloud's throttling answer (Alibaba ``Throttling``, Tencent
    ``RequestLimitExceeded``, EC2 ``RequestLimitExceeded``, Huawei's gateway
    ``APIGW.0308`` with HTTP 429) with a ``Retry-After: <retry_after_seconds>``
    header. Nothing is done.
``5xx``
    HTTP 503 (Alibaba ``ServiceUnavailable``; Tencent and EC2 a gateway error
    page); Huawei's gateway answers HTTP 502 ``APIGW.0201`` "Backend
    unavailable". Nothing is done.
``timeout``
    No answer at all: the connection closes without a response. Nothing is
    done: the request never reached the service.
``lost``
    The call is carried out (an instance launched, a stop taken), then the
    connection closes without the answer: the caller cannot tell it from
    ``timeout`` and must find out by retrying with the same client token.

Signature and parameter checks run before the draw, so a faulty run still
refuses a bad request the way the cloud does. ``actions`` narrows the plan to
those calls (the clouds' action names, e.g. ``RunInstances``, which the Huawei emulator also reads as its
``CreatePostPaidServers``); empty: every call. ``serve.py`` takes the same plan
from ``--fault-rate / --fault-seed / --fault-kinds`` or the environment
(``GPUSCHED_EMULATOR_FAULT_RATE``, ``_SEED``, ``_KINDS``).
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FAULT_KINDS", "Fault", "FaultDice", "FaultPlan"]

Fault = Literal["throttle", "5xx", "timeout", "lost"]
FAULT_KINDS: tuple[Fault, ...] = ("throttle", "5xx", "timeout", "lost")


@dataclass(frozen=True)
class FaultPlan:
    """Fail ``rate`` of all calls (0 to 1) with one of ``kinds``, drawn from ``seed``."""

    rate: float = 0.0
    seed: int = 0
    kinds: tuple[Fault, ...] = FAULT_KINDS
    retry_after_seconds: float = 1.0  # what a throttling answer asks the caller to wait
    actions: tuple[str, ...] = ()  # only these calls (RunInstances, DescribeInstances ...); empty: all

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be between 0 and 1, not {self.rate}")
        if not self.kinds:
            raise ValueError("a fault plan needs at least one kind")
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kind {unknown[0]!r}; use {', '.join(FAULT_KINDS)}")
        if self.retry_after_seconds < 0:
            raise ValueError("retry_after_seconds must not be negative")

    @classmethod
    def parse_kinds(cls, text: str) -> tuple[Fault, ...]:
        """``"throttle,lost"`` (commas or plus signs) as kinds; empty: all of them."""
        names = _names(text)
        return tuple(names) if names else FAULT_KINDS  # type: ignore[return-value]

    @classmethod
    def parse_actions(cls, text: str) -> tuple[str, ...]:
        """``"RunInstances,TerminateInstances"`` as actions; empty: every call."""
        return tuple(_names(text))

    def dice(self) -> FaultDice:
        return FaultDice(self)


@dataclass
class FaultDice:
    """The draws of one plan, thread-safe; ``drawn`` counts what was dealt, per kind."""

    plan: FaultPlan
    drawn: dict[str, int] = field(default_factory=dict)
    _rng: random.Random = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"faults:{self.plan.seed}")

    def draw(self, action: str = "") -> Fault | None:
        """The fault for the next call of ``action``, or None (most calls)."""
        if self.plan.rate <= 0 or (self.plan.actions and action not in self.plan.actions):
            return None
        with self._lock:
            # Two draws per call, always: which calls fail does not depend on the kinds listed.
            hit = self._rng.random() < self.plan.rate
            pick = self._rng.randrange(len(self.plan.kinds))
            if not hit:
                return None
            kind = self.plan.kinds[pick]
            self.drawn[kind] = self.drawn.get(kind, 0) + 1
            return kind


def _names(text: str) -> list[str]:
    return [k.strip() for k in text.replace("+", ",").split(",") if k.strip()]
