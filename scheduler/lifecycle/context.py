"""What one tick works with (the context) and what it reports; shared by the tick's phases."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, Literal, NamedTuple, TypeVar

import structlog

from providers.base import Provider, ProviderError
from providers.retry import call_with_retry
from scheduler.agent.package import AgentPackage
from scheduler.clock import Clock
from scheduler.lifecycle.idle_window import WarmMemo
from scheduler.lifecycle.offerbook import OfferBook
from scheduler.lifecycle.perf_learning import RatesMemo
from scheduler.models import JobSpec
from scheduler.planner.book import Market
from scheduler.planner.inputs import PlannerPolicy
from scheduler.settings import Settings
from scheduler.store.database import Store

log = structlog.get_logger("gpusched.tick")

T = TypeVar("T")


class SimulatedCrash(BaseException):
    """Raised at a named crash point in tests: the process 'dies' there."""


@dataclass
class TickContext:
    store: Store
    providers: Mapping[str, Provider]
    clock: Clock
    settings: Settings
    offers: OfferBook = field(default_factory=OfferBook)
    rates: RatesMemo = field(default_factory=RatesMemo)  # learned training rates, refreshed on new samples
    warm: WarmMemo = field(default_factory=WarmMemo)  # whether keeping idle machines warm pays, per kind
    policy: PlannerPolicy | None = None
    # Tests set this to kill the tick at a named point (FoundationDB's BUGGIFY idea).
    crashpoint: Callable[[str], None] = lambda name: None
    rng_seed: int = 0
    # The steering rule's memory: how spot looked per job, and where moved jobs go next.
    spot_watch: dict = field(default_factory=dict)
    capacity_override: dict[str, str] = field(default_factory=dict)
    capacity_moved: dict[str, tuple[int, str]] = field(default_factory=dict)  # job -> (attempt a move launched, target)
    last_tick_at: datetime | None = None
    # The latest moment the last tick asked to be followed by another (the steering rule: when a job it watches is
    # due to checkpoint, or is still safe on spot, ``steering.look_again_by``); None when nothing asked. The daemon
    # ticks far more often; the simulator, which jumps from event to event, does not jump past it.
    look_again_by: datetime | None = None
    # Budget stops (``budget_stop``): (job, attempt) -> its progress when its team was first seen at the limit.
    budget_stop_seen: dict[tuple[str, int], int] = field(default_factory=dict)
    # False only for the skypilot-like baseline: a preempted job restarts from scratch.
    resume_after_preemption: bool = True
    # Repeatable instance ids for simulations; None in the daemon.
    ids: random.Random | None = None
    # The wheel machines install (``scheduler.agent.package``); None where no machine boots a real agent.
    agent_package: AgentPackage | None = None

    # Parsed job specs by job id: a spec never changes after submission, and validating it
    # again for every running job on every tick was a good part of a busy tick.
    specs: dict[str, JobSpec] = field(default_factory=dict)
    # The planner's grouping of the offers (``planner.book.Market``), kept while the offers are the same
    # objects: grouping ~600 offers again was most of planning the few jobs a tick has.
    market: Market | None = None

    @classmethod
    def build(cls, store: Store, providers: Mapping[str, Provider], clock: Clock, settings: Settings, *,
              seed: int | None = None,
              strategy: Literal["gpusched", "on-demand", "spot-greedy", "skypilot-like"] = "gpusched",
              agent_package: AgentPackage | None = None,
              ) -> TickContext:
        """The one way to make a context: the daemon passes no seed; the demo and the simulator seed
        the back-off jitter and the instance ids so a run repeats exactly, and the simulator names
        the policy (the skypilot-like baseline restarts a preempted job from scratch)."""
        return cls(
            store=store, providers=providers, clock=clock, settings=settings,
            policy=PlannerPolicy(currency=settings.report_currency, fx=settings.fx, strategy=strategy),
            rng_seed=seed or 0, ids=None if seed is None else random.Random(seed),
            resume_after_preemption=strategy != "skypilot-like", agent_package=agent_package,
        )

    def spec_of(self, job_id: str, spec_json: dict) -> JobSpec:
        spec = self.specs.get(job_id)
        if spec is None:
            if len(self.specs) >= 20_000:
                self.specs.clear()  # bounded: a long-lived daemon sees jobs come and go
            spec = self.specs[job_id] = JobSpec.model_validate(spec_json)
        return spec

    def planner_policy(self) -> PlannerPolicy:
        if self.policy is None:
            self.policy = PlannerPolicy(currency=self.settings.report_currency, fx=self.settings.fx)
        return self.policy


@dataclass
class TickReport:
    at: datetime
    launched: int = 0
    reused: int = 0
    preempted: int = 0
    finished: int = 0
    idle_stopped: int = 0
    orphans_terminated: int = 0
    launch_failures: int = 0
    agents_silent: int = 0  # machines terminated because their agent went silent (agent_watch)
    moved: int = 0  # jobs moved between spot and on-demand by the steering rule
    cost_records: int = 0
    set_aside: int = 0  # jobs failed or held because they could not be read, planned, priced or written
    errors: list[str] = field(default_factory=list)
    led: bool = False  # this daemon held the tick lock (another daemon did the work when False)
    cloud_errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (cloud, vendor code) -> calls


def backoff_rng(ctx: TickContext, now: datetime) -> random.Random:
    """Jitter for back-off: seeded from the tick time so a simulated run repeats exactly."""
    return random.Random(ctx.rng_seed * 1_000_003 + int(now.timestamp()))


class CloudCall(NamedTuple, Generic[T]):
    ok: bool
    value: T | None = None


def cloud_call(ctx: TickContext, now: datetime, report: TickReport, call: Callable[[], T], *, event: str,
               label: str, refused: tuple[type[ProviderError], ...] = (), level: str = "warning",
               logger: structlog.typing.FilteringBoundLogger | None = None, **fields: object) -> CloudCall[T]:
    """One cloud call with our retries. A failure is logged as ``event`` (with the vendor's code and
    request id) and recorded in the tick's report as ``label: message``, and the caller gets
    ``ok=False`` and decides what failing means for it: never "the instance is gone". Errors of the
    ``refused`` kinds (the cloud said no, so nothing was created) are raised for the caller instead."""
    try:
        return CloudCall(True, call_with_retry(call, clock=ctx.clock, rng=backoff_rng(ctx, now)))
    except refused:
        raise
    except ProviderError as exc:
        getattr(logger or log, level)(event, **fields, **exc.log_fields())
        report.errors.append(f"{label}: {exc.message}")
        report.cloud_errors[(exc.provider or "unknown", exc.code or type(exc).__name__)] += 1
        return CloudCall(False)
