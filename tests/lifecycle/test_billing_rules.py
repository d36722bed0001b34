"""The ledger follows each cloud's billing rule: one spot machine per cloud, launched, then reclaimed.

The cloud's own record of the machine (the sandbox's state history) says what it billed, by the rules the
emulated bills use (``providers/sandbox/billing.py``): AWS from the moment the machine runs (its boot is
free), Alibaba and Tencent from its creation, boot included; every cloud until it releases the machine.
The ledger only sees the cloud at each tick (a simulated minute here), so it may be up to one tick off
where it learns of a change by looking, and exact where gpusched itself acts (the launch, a terminate).

* AWS (the sandbox posing as AWS, as in the demo): billing opens at the tick that first sees the machine
  running, not at its launch, and closes at the tick that sees the reclaim.
* Alibaba (the real adapter over the ECS emulator): billing opens at the launch. ECS announces the reclaim
  with a ``Recycling`` lock while the machine still runs and bills; the job is requeued then, and the
  machine bills on as idle time until gpusched releases it (here the first release is refused, so a tick
  later): the ledger matches the cloud to the second.
* Tencent (the real adapter over the CVM emulator): billing opens at the launch; CVM says nothing before
  the reclaim, which the ledger closes at the tick that sees it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from providers.base import Capability, InstanceState
from providers.catalog import filter_offers, load_catalog
from providers.sandbox.billing import RULES, running_spans
from providers.sandbox.cloud import SandboxCloud
from providers.sandbox.provider import SandboxProvider, capabilities_like
from scheduler.accounting import ledger
from scheduler.clock import SimClock
from scheduler.jobs.jobfile import load_job_file
from scheduler.lifecycle import service
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.tick import TickContext
from scheduler.models import JobSpec, Offer
from scheduler.money import Money
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents
from scheduler.states import InstanceRowState
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, EventRow, InstanceRow
from tests.optional import missing

STEP = timedelta(minutes=1)  # one tick
START = datetime(2026, 11, 3, 1, 0, tzinfo=UTC)
MONTH = "2026-11"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.timeout(300)


def _spot_job(cloud: str) -> JobSpec:
    spec = load_job_file(EXAMPLES / "helmet-s-train.yaml").model_dump(mode="json")
    spec["name"] = f"helmet-on-{cloud}"
    spec["where"] = {"providers": [cloud]}
    spec["train"]["epochs"] = 40
    spec["policy"]["capacity"] = "spot"
    return JobSpec.model_validate(spec)


@dataclass
class Run:
    """What one launched-then-reclaimed machine left: its ledger lines and the cloud's record of it."""

    row: InstanceRow
    lines: list[ledger.CostLine]
    cloud: SandboxCloud
    sandbox_id: str
    notice_at: datetime
    events: list[EventRow]
    attempts: list[AttemptRow]  # the job's, in order

    @property
    def launched(self) -> datetime:
        return self.cloud.history(self.sandbox_id)[0][0]

    def first(self, state: InstanceState) -> datetime:
        return next(at for at, s in self.cloud.history(self.sandbox_id) if s is state)

    def billed(self) -> list[tuple[datetime, datetime]]:
        """The spans the cloud billed, by its rule (boot included or not)."""
        now = self.cloud.now()
        return running_spans(self.cloud, self.sandbox_id, now, with_boot=RULES[self.row.provider].bills_boot)

    def ledger_seconds(self) -> Decimal:
        return sum((ledger.exact_seconds(line.end - line.start) for line in self.lines), Decimal(0))


def _offers(cloud_name: str) -> list[Offer]:
    """The catalog's offers of the cloud. The catalog has no Tencent spot price (its site publishes none):
    here its types sell spot at 40% of on-demand, so that a Tencent machine can be reclaimed."""
    offers = filter_offers(load_catalog(), providers=[cloud_name])
    if cloud_name != "tencent":
        return offers
    return [o.model_copy(update={"spot": o.on_demand.model_copy(update={
        "per_hour": Money(amount=(o.on_demand.per_hour.amount * Decimal("0.4")).quantize(Decimal("0.0001")),
                          currency=o.on_demand.per_hour.currency),
        "source": "test: 40% of on-demand"})}) if o.on_demand is not None else o for o in offers]


def _reclaimed(cloud_name: str, tmp_path: Path) -> Run:
    """Run one spot job on ``cloud_name`` until its machine has worked a while, schedule the cloud's reclaim
    (announced two minutes ahead), and tick on until the machine is gone."""
    settings = Settings(_env_file=None, data_dir=tmp_path, cluster="rules", backend="sandbox",
                        providers=[cloud_name], idle_stop_minutes=10, sandbox_seed=5)
    clock = SimClock(START)
    store = Store(settings.db_url)
    store.migrate()
    # No reclaim but the scripted one; boots take 60-120 s, as the sandbox's default.
    sandbox = SandboxCloud(clock, _offers(cloud_name), seed=5, interruption_scale=0,
                           forget_terminated_seconds=3600)
    providers: dict = {cloud_name: SandboxProvider(sandbox, name=cloud_name,
                                                   capabilities=capabilities_like(cloud_name))}
    emulators: list = []
    to_sandbox = str
    try:
        if cloud_name != "aws":
            try:
                from scheduler.simulation.demo import attach_emulators
                attach_emulators(settings, clock, providers, {cloud_name: sandbox}, emulators)
            except ImportError as exc:  # pragma: no cover - the cloud extras are in the test install
                missing(f"the {cloud_name} SDK is needed for its emulator ({exc}): pip install '.[clouds]'")
            if cloud_name == "tencent":
                to_sandbox = emulators[0].sandbox_id  # CVM shows ins-... ids of its own
        ctx = TickContext.build(store, providers, clock, settings, seed=5)
        agents = SimAgents(store, providers, settings.cluster, seed=5)
        service.submit(store, clock, _spot_job(cloud_name), source=f"{cloud_name}.yaml", ids=random.Random(5))

        def tick() -> None:
            agents.step(clock.now())
            lifecycle.tick(ctx)
            clock.advance(STEP)

        def first_row() -> InstanceRow | None:
            with store.session(write=False) as s:
                return s.scalars(select(InstanceRow).order_by(InstanceRow.created_at)).first()

        for _ in range(120):  # launched, booted, then half an hour of work
            tick()
            row = first_row()
            if row is not None and row.running_at is not None \
                    and clock.now() - row.running_at.replace(tzinfo=UTC) >= timedelta(minutes=30):
                break
        row = first_row()
        assert row is not None and row.state == InstanceRowState.running.value and row.cloud_id
        sandbox_id = to_sandbox(row.cloud_id)
        reclaim_at = clock.now() + timedelta(minutes=5)
        sandbox.preempt(sandbox_id, at=reclaim_at)
        if cloud_name == "alibaba":
            # The first release is refused: the machine, working for nobody, bills on until the next tick's.
            emulators[0].script_error("DeleteInstances", "Forbidden.RAM", status=403,
                                      message="User not authorized to operate on the specified resource.")
        for _ in range(30):  # the notice, the reclaim, and the ticks that see it
            tick()
        with store.session() as s:
            ledger.account(s, clock.now())
            row = s.get(InstanceRow, row.id)
            lines = sorted((x for x in ledger.cost_lines(s, MONTH, clock.now()) if x.instance_id == row.id),
                           key=lambda x: x.start)
            events = list(s.scalars(select(EventRow).where(EventRow.instance_id == row.id).order_by(EventRow.id)))
            attempts = list(s.scalars(select(AttemptRow).order_by(AttemptRow.number)))
            s.expunge_all()
        assert sandbox.get(sandbox_id).state is InstanceState.terminated
        return Run(row=row, lines=lines, cloud=sandbox, sandbox_id=sandbox_id,
                   notice_at=reclaim_at - timedelta(seconds=120), events=events, attempts=attempts)
    finally:
        for emulator in emulators:
            emulator.close()
        store.dispose()


@pytest.fixture(scope="module")
def reclaimed(tmp_path_factory: pytest.TempPathFactory):
    """``reclaimed(cloud)``: that cloud's run, made once for the module."""
    runs: dict[str, Run] = {}

    def get(cloud: str) -> Run:
        if cloud not in runs:
            runs[cloud] = _reclaimed(cloud, tmp_path_factory.mktemp(f"rules-{cloud}"))
        return runs[cloud]

    return get


def _contiguous(lines: list[ledger.CostLine]) -> bool:
    return all(a.end == b.start for a, b in zip(lines, lines[1:]))


def test_the_billing_rule_of_each_cloud_is_in_its_capabilities() -> None:
    assert Capability.bills_from_running in capabilities_like("aws")
    assert Capability.bills_from_running not in capabilities_like("alibaba")
    assert Capability.bills_from_running not in capabilities_like("tencent")
    # The same rules as the clouds' emulated bills.
    assert not RULES["aws"].bills_boot and RULES["alibaba"].bills_boot and RULES["tencent"].bills_boot


def test_aws_ledger_opens_when_the_machine_runs_not_at_its_launch(reclaimed) -> None:
    run = reclaimed("aws")
    [billed] = run.billed()
    running = run.first(InstanceState.running)
    assert billed[0] == running > run.launched  # AWS: the boot is free
    assert run.lines and _contiguous(run.lines)
    start, end = run.lines[0].start, run.lines[-1].end
    assert start == run.row.running_at.replace(tzinfo=UTC)  # the tick that first saw it running
    assert running <= start < running + STEP, (run.launched, running, start)
    # The reclaim ends AWS's meter; the ledger closes at the tick that sees it.
    assert billed[1] <= end < billed[1] + STEP
    assert abs(run.ledger_seconds() - ledger.exact_seconds(billed[1] - billed[0])) < 2 * STEP.total_seconds()


def test_alibaba_ledger_bills_the_boot_and_the_reclaim_notice_until_the_release(reclaimed) -> None:
    run = reclaimed("alibaba")
    [billed] = run.billed()
    assert billed[0] == run.launched < run.first(InstanceState.running)  # ECS: billed from creation
    assert [line.kind for line in run.lines] == ["busy", "idle"] and _contiguous(run.lines)
    busy, idle = run.lines
    assert busy.start == run.launched  # opened at the launch, boot included
    # The Recycling lock seen at the first tick of the notice: the job is requeued, the machine bills on.
    assert run.notice_at <= idle.start < run.notice_at + STEP
    assert idle.job_id is None and busy.job_id is not None
    assert any(e.kind == "reclaim_notice" and "Recycling" in e.message for e in run.events)
    # Released at the next tick (the first release was refused), before the cloud's own reclaim: both
    # meters stop at that call.
    assert idle.end == idle.start + STEP == billed[1] < run.notice_at + timedelta(seconds=120)
    assert run.ledger_seconds() == ledger.exact_seconds(billed[1] - billed[0])


def test_tencent_ledger_bills_the_boot_and_closes_at_the_reclaim(reclaimed) -> None:
    run = reclaimed("tencent")
    [billed] = run.billed()
    assert billed[0] == run.launched < run.first(InstanceState.running)  # CVM: billed from creation
    assert [line.kind for line in run.lines] == ["busy"]
    [busy] = run.lines
    assert busy.start == run.launched
    # CVM shows nothing before the reclaim: the ledger closes at the tick that sees it gone.
    assert billed[1] == run.notice_at + timedelta(seconds=120)
    assert billed[1] <= busy.end < billed[1] + STEP
    with_attempts = [e.kind for e in run.events]
    assert "instance_lost" in with_attempts


def test_a_reclaimed_attempt_is_counted_once_when_the_notice_came_first(reclaimed) -> None:
    """The announced reclaim requeues the job; the release that follows counts no second loss."""
    run = reclaimed("alibaba")
    first, *later = run.attempts
    assert first.instance_id == run.row.id and first.state == "preempted"
    assert later and later[0].number == 2  # resumed on a new machine
    assert sum(1 for e in run.events if e.kind in ("reclaim_notice", "instance_lost") and e.job_id) == 1
