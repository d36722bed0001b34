"""`gpusched demo`: the daemon's own tick on the sandbox cloud, in simulated time.

Three teams submit the job files in ``examples/`` over a few simulated days; the
sandbox poses as AWS, Alibaba Cloud and Tencent Cloud (catalog prices, seeded
boot delays and spot reclaims), and, through the emulators, Huawei Cloud too.
The scenario also scripts one spot reclaim, so a preemption and a resume from
the last checkpoint always show. At the end it writes the monthly report and
prints what ran where, what it cost and what was saved. Same seed, same run.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy import func, select

from providers.registry import build_live, build_sandbox
from scheduler.accounting.bill_models import BillReconciliation
from scheduler.accounting.bill_render import bills_table, render_bills_csv
from scheduler.accounting.report_render import write_atomic
from scheduler.accounting.reports import MonthlyReport, monthly_report, write_report
from scheduler.clock import SimClock
from scheduler.errors import UserError, install_hint
from scheduler.jobs.jobfile import load_job_file
from scheduler.lifecycle import service
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.tick import TickContext
from scheduler.logs import configure_logging
from scheduler.models import Capacity, ReservedCapacity
from scheduler.money import Money, total
from scheduler.settings import Settings
from scheduler.simulation.emulated_bills import EmulatedBills, emulated_bills
from scheduler.simulation.simagent import SimAgents
from scheduler.simulation.simulate import open_work
from scheduler.states import JOB_TERMINAL, InstanceRowState, JobState
from scheduler.store.database import Store
from scheduler.store.tables import (
    AttemptRow,
    CostRecordRow,
    EventRow,
    IdleStopRow,
    InstanceRow,
    JobRow,
)

START = datetime(2026, 11, 2, 0, 0, tzinfo=timezone.utc)  # a Monday
MONTH = "2026-11"
STEP = timedelta(seconds=60)
HORIZON = timedelta(days=6)

# (offset from START, example file). Nightly inference is submitted at 22:00 Beijing time.
SCHEDULE: tuple[tuple[timedelta, str], ...] = (
    (timedelta(hours=1), "helmet-s-train.yaml"),
    (timedelta(hours=1, minutes=20), "shelf-c-train.yaml"),
    (timedelta(hours=14), "nightly-infer.yaml"),
    (timedelta(days=1, hours=2), "helmet-val.yaml"),
    (timedelta(days=1, hours=2, minutes=5), "helmet-export.yaml"),
    (timedelta(days=1, hours=14), "nightly-infer.yaml"),
    (timedelta(days=2, hours=14), "nightly-infer.yaml"),
)
# The scripted spot reclaim: this long after the shelf-audit job starts on spot.
RECLAIM_AFTER = timedelta(hours=3)


@dataclass
class DemoResult:
    out_dir: Path
    report_paths: dict[str, Path]
    jobs: int
    succeeded: int
    preemptions: int
    resumed_from_epochs: list[int]
    idle_stops: int
    spend: Money
    on_demand_equivalent: Money  # the paid (non-reserved) hours at on-demand prices
    reserved_hours: Decimal  # reserved machines up (prepaid, so up whether busy or not)
    reserved_busy_hours: Decimal  # of those, the hours they ran a job
    reserved_busy_value: Money  # those busy hours at on-demand prices
    sim_span: timedelta
    wall_seconds: float
    ticks: int
    rows: list[dict] = field(default_factory=list)
    report: MonthlyReport | None = None  # the month's report, whose headline the summary repeats


@dataclass(frozen=True)
class DemoProgress:
    """How far the demo is, after each tick (for a progress bar)."""

    now: datetime  # simulated
    jobs_done: int  # jobs that ended
    jobs: int  # jobs the scenario submits
    ticks: int


def examples_dir() -> Path:
    """The repo's examples/ (the demo runs from a checkout)."""
    here = Path(__file__).resolve().parents[2] / "examples"
    if here.is_dir():
        return here
    raise FileNotFoundError("examples/ not found next to the package; run the demo from a checkout")


# The clouds the demo poses as; ``--via-emulators`` adds Huawei Cloud, reached through its SDK and emulator.
PROVIDERS = ("aws", "alibaba", "tencent")
EMULATED_PROVIDERS = (*PROVIDERS, "huawei")


def demo_settings(out_dir: Path, seed: int, providers: tuple[str, ...] = PROVIDERS) -> Settings:
    return Settings(
        _env_file=None,
        data_dir=out_dir,
        database_url="",
        cluster="demo",
        backend="sandbox",
        providers=list(providers),
        idle_stop_minutes=10,
        launch_grace_seconds=120,
        report_currency="CNY",
        fx_usd_cny=Decimal("7.2"),
        sandbox_seed=seed,
        reserved=[
            ReservedCapacity(provider="alibaba", region="cn-hangzhou", instance_type="ecs.gn7i-c8g1.2xlarge",
                             count=1, until=datetime(2027, 3, 31, tzinfo=timezone.utc),
                             start=datetime(2026, 3, 31, tzinfo=timezone.utc),
                             upfront_fee=Money(amount=Decimal(36000), currency="CNY"),
                             note="a year prepaid for always-on inference, until March"),
        ],
    )


def run_demo(out_dir: Path, seed: int = 7, console: Console | None = None,
             via_emulators: bool = False, progress: Callable[[DemoProgress], None] | None = None) -> DemoResult:
    """``via_emulators``: Alibaba, Tencent and Huawei go through their real adapters and SDKs over HTTP to
    the emulators in providers/emulators (the same simulated market behind them); AWS stays in-process,
    since moto has no market (prices, stock-outs, reclaims) to simulate. Huawei Cloud joins the scenario
    only then: the plain demo keeps its three clouds (and its figures). ``progress`` is told after each tick."""
    console = console or Console()
    wall0 = time.perf_counter()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    settings = demo_settings(out_dir, seed, EMULATED_PROVIDERS if via_emulators else PROVIDERS)
    clock = SimClock(START)
    store = Store(settings.db_url)
    store.migrate()
    providers, clouds = build_sandbox(settings, clock)
    preempt = {name: cloud.preempt for name, cloud in clouds.items()}
    emulators: list = []
    if via_emulators:
        preempt.update(attach_emulators(settings, clock, providers, clouds, emulators))
    ctx = TickContext.build(store, providers, clock, settings, seed=seed)
    job_ids = random.Random(seed + 1)
    # Sees machines through the providers; writes each attempt's output, for `gpusched logs` on the demo's store.
    agents = SimAgents(store, providers, settings.cluster, seed=seed, output_bytes=settings.job_log_bytes)
    configure_logging("console", "warning")  # the narrative below tells the story in simulated time
    narrator = _Narrator(store, console)
    examples = examples_dir()
    pending = sorted(((START + off, name) for off, name in SCHEDULE), key=lambda x: x[0])
    reclaimed = False
    ticks = 0
    while clock.now() < START + HORIZON:
        now = clock.now()
        while pending and pending[0][0] <= now:
            _, name = pending.pop(0)
            spec = load_job_file(examples / name)
            service.submit(store, clock, spec, source=f"examples/{name}", ids=job_ids)
        if not reclaimed:
            reclaimed = _scripted_reclaim(store, preempt, now, console)
        agents.step(now)
        lifecycle.tick(ctx)
        narrator.tell()
        ticks += 1
        if progress is not None:
            progress(DemoProgress(now=now, jobs_done=_jobs_ended(store), jobs=len(SCHEDULE), ticks=ticks))
        if not pending and _all_quiet(store):
            break
        clock.advance(_next_step(store, pending, now))
    sim_span = clock.now() - START
    bills = _serve_bills(settings, clock, clouds, emulators) if via_emulators else None
    try:
        report = monthly_report(settings, MONTH, now=clock.now(), store=store,
                                bills=bills.readers if bills is not None else None)
    finally:
        if bills is not None:
            bills.close()
    paths = write_report(report, settings.reports_path)
    if report.bills is not None:
        paths["bills"] = settings.reports_path / f"bills-{MONTH}.csv"
        write_atomic(paths["bills"], render_bills_csv(report.bills))
    result = _summarise(store, settings, out_dir, paths, sim_span, time.perf_counter() - wall0, ticks)
    result.report = report
    _print_summary(console, result)
    if via_emulators:
        console.print("Alibaba, Tencent and Huawei ran through their real SDKs over HTTP to the local emulators.")
    if report.bills is not None and bills is not None:
        _print_bills(console, report.bills, bills)
    store.dispose()
    for emulator in emulators:
        emulator.close()
    return result


def _serve_bills(settings: Settings, clock: SimClock, clouds: dict, emulators: list) -> EmulatedBills:
    """Each cloud's bill for the month, by its own rules, served the way the cloud serves it."""
    cvm = next((e for e in emulators if hasattr(e, "tencent_id")), None)
    return emulated_bills(clouds, clock, MONTH, cluster=settings.cluster, reserved=settings.reserved,
                          tencent_ids=cvm.tencent_id if cvm is not None else None)


def _print_bills(console: Console, rec: BillReconciliation, bills: EmulatedBills) -> None:
    console.print(bills_table(rec))
    for c in rec.clouds:
        for u in c.unknown:
            console.print(f"[yellow]{c.cloud}: billed {u.billed} for {u.key}, unknown to gpusched[/yellow]: {u.why}",
                          highlight=False)
    for cloud, why in bills.skipped.items():
        console.print(f"[dim]{cloud}: no bill in the demo: {why}[/dim]")


def attach_emulators(settings: Settings, clock: SimClock, providers: dict, clouds: dict, emulators: list) -> dict:
    """Put the HTTP emulators in front of the Alibaba, Tencent and Huawei sandbox clouds; swap in the real
    adapters. The emulators go into ``emulators`` (the caller closes them); returns each cloud's reclaim lever."""
    try:
        from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
        from providers.emulators.huawei_ecs import HuaweiEcsEmulator
        from providers.emulators.tencent_cvm import TencentCvmEmulator
    except ImportError as exc:
        raise UserError(f"the emulators need the cloud SDKs ({exc})",
                        fix=install_hint("clouds")) from None
    key, secret = "demo-key", "demo-secret"
    overrides: dict[str, dict] = {}
    preempt: dict = {}
    for name in ("alibaba", "tencent", "huawei"):
        if name not in clouds:
            continue
        cloud = clouds[name]
        regions = tuple(sorted({o.region for o in cloud.offers()}))
        if name == "alibaba":
            emu = AlibabaEcsEmulator(cloud, {key: secret})
            overrides[name] = {"access_key_id": key, "access_key_secret": secret, "image_id": "m-demo",
                               "protocol": "http"}
            preempt[name] = cloud.preempt
        elif name == "tencent":
            emu = TencentCvmEmulator(cloud, clock, {key: secret}, seed=settings.sandbox_seed)
            # The account's currency is never guessed: the sandbox's prices are the catalog's.
            currency = next(o.on_demand.per_hour.currency for o in cloud.offers() if o.on_demand is not None)
            overrides[name] = {"secret_id": key, "secret_key": secret, "image_id": "img-demo", "currency": currency,
                               "protocol": "http"}
            preempt[name] = lambda cid, at=None, emu=emu: emu.preempt(cid)
        else:
            # Huawei scopes every call to a project, one per region; a VPC and a subnet per zone to launch into.
            projects = {region: f"{n:04d}".ljust(32, "d") for n, region in enumerate(regions)}
            zones = sorted({o.zone for o in cloud.offers()})
            emu = HuaweiEcsEmulator(cloud, clock, {key: secret}, {p: r for r, p in projects.items()},
                                    seed=settings.sandbox_seed)
            overrides[name] = {"GPUSCHED_HUAWEI_ACCESS_KEY": key, "GPUSCHED_HUAWEI_SECRET_KEY": secret,
                               "project_ids": projects, "image_id": "img-demo", "vpc_id": "vpc-demo",
                               "subnet_ids": {zone: f"subnet-{zone}" for zone in zones}}
            preempt[name] = lambda cid, at=None, emu=emu: emu.preempt(cid)
        overrides[name].update(endpoint=emu.endpoint, regions=regions)
        emulators.append(emu)
    live = build_live(settings.model_copy(update={"providers": list(overrides)}), clock, **overrides)
    providers.update(live)
    return preempt


def _next_step(store: Store, pending: list, now: datetime) -> timedelta:
    """Tick every simulated minute while anything happens; jump ahead over empty nights."""
    with store.session(write=False) as s:
        busy = any(open_work(s))
    if busy or not pending:
        return STEP
    return max(STEP, pending[0][0] - now)


def _jobs_ended(store: Store) -> int:
    with store.session(write=False) as s:
        return s.scalar(select(func.count()).select_from(JobRow).where(
            JobRow.state.in_([x.value for x in JOB_TERMINAL]))) or 0


def _all_quiet(store: Store) -> bool:
    with store.session(write=False) as s:
        return not any(open_work(s))


def _scripted_reclaim(store: Store, preempt: dict, now: datetime, console: Console) -> bool:
    """Reclaim the shelf-audit job's spot machine a few hours into its run (once)."""
    with store.session() as s:
        row = s.execute(
            select(InstanceRow, AttemptRow)
            .join(AttemptRow, AttemptRow.instance_id == InstanceRow.id)
            .join(JobRow, JobRow.id == AttemptRow.job_id)
            .where(
                JobRow.kind == "train",
                JobRow.state == JobState.running.value,
                InstanceRow.capacity == Capacity.spot.value,
                InstanceRow.state == InstanceRowState.running.value,
                AttemptRow.started_at.is_not(None),
            )
            .order_by(JobRow.priority.desc(), JobRow.id)
        ).first()
        if row is None:
            return False
        inst, attempt = row
        if now - attempt.started_at.replace(tzinfo=timezone.utc) < RECLAIM_AFTER:
            return False
        preempt[inst.provider](inst.cloud_id, at=now)
        console.print(f"[dim]{now:%a %H:%M}[/dim] [yellow]scenario: the cloud reclaims[/yellow] {inst.provider} "
                      f"{inst.instance_type} (spot) running {attempt.job_id}")
        return True


class _Narrator:
    """Prints the store's events as they happen, stamped with simulated time."""

    SHOWN = {
        "submitted": "submit", "launched": "launch", "job_reused_instance": "reuse", "job_started": "start",
        "job_preempted": "[yellow]preempted[/yellow]", "launch_refused": "[yellow]no capacity[/yellow]",
        "job_finished": "[green]done[/green]", "job_refused": "[red]refused[/red]",
        "idle_stop": "[cyan]idle stop[/cyan]", "orphan_terminated": "[red]orphan[/red]",
    }

    def __init__(self, store: Store, console: Console) -> None:
        self.store, self.console, self.last_id = store, console, 0

    def tell(self) -> None:
        with self.store.session(write=False) as s:
            events = s.scalars(select(EventRow).where(EventRow.id > self.last_id).order_by(EventRow.id)).all()
        for e in events:
            self.last_id = e.id
            label = self.SHOWN.get(e.kind)
            if label is None:
                continue
            who = e.job_id or e.instance_id or ""
            pad = " " * max(0, 10 - len(Text.from_markup(label).plain))
            self.console.print(f"[dim]{e.at:%a %H:%M}[/dim] {label}{pad} {who} {e.message}", highlight=False)


def _summarise(store: Store, settings: Settings, out_dir: Path, paths: dict, sim_span: timedelta,
               wall: float, ticks: int) -> DemoResult:
    fx, cur = settings.fx, settings.report_currency
    with store.session() as s:
        jobs = s.scalars(select(JobRow).order_by(JobRow.submitted_at, JobRow.id)).all()
        costs = s.scalars(select(CostRecordRow)).all()
        attempts = s.scalars(select(AttemptRow).order_by(AttemptRow.job_id, AttemptRow.number)).all()
        idle_stops = s.scalar(select(func.count()).select_from(IdleStopRow)) or 0
        by_job: dict[str, list[Money]] = {}
        for c in costs:
            by_job.setdefault(c.job_id or "", []).append(Money(amount=c.amount, currency=c.currency))
        rows = []
        for j in jobs:
            ran = [a for a in attempts if a.job_id == j.id and a.state != "launch_failed"]
            where = "; ".join(
                f"{a.provider} {a.zone} {a.instance_type} {a.capacity}"
                + (f" (from epoch {a.start_epoch})" if a.start_epoch else "")
                for a in ran
            )
            rows.append({
                "job": j.id, "name": j.name, "team": j.team, "kind": j.kind, "state": j.state,
                "where": where, "preemptions": j.preemptions,
                "cost": total(by_job.get(j.id, []), cur, fx),
            })
        spend = total((Money(amount=c.amount, currency=c.currency) for c in costs), cur, fx)
        # Savings are counted on machines we paid for by the hour; prepaid reserved hours are reported apart.
        paid = [c for c in costs if c.capacity != Capacity.reserved.value]
        od = total((Money(amount=c.on_demand_amount, currency=c.currency) for c in paid), cur, fx)
        reserved = [c for c in costs if c.capacity == Capacity.reserved.value]
        reserved_hours = sum((c.hours for c in reserved), Decimal(0))
        # Only the hours a reserved machine ran a job are worth anything: the others it waited, prepaid.
        busy = [c for c in reserved if c.job_id is not None]
        reserved_busy = total((Money(amount=c.on_demand_amount, currency=c.currency) for c in busy), cur, fx)
        resumed = [a.start_epoch for a in attempts if a.number > 1 and a.start_epoch > 0]
        return DemoResult(
            out_dir=out_dir, report_paths=paths, jobs=len(jobs),
            succeeded=sum(1 for j in jobs if j.state == JobState.succeeded.value),
            preemptions=sum(j.preemptions for j in jobs), resumed_from_epochs=resumed,
            idle_stops=idle_stops, spend=spend, on_demand_equivalent=od, sim_span=sim_span,
            reserved_hours=reserved_hours, reserved_busy_hours=sum((c.hours for c in busy), Decimal(0)),
            reserved_busy_value=reserved_busy,
            wall_seconds=wall, ticks=ticks, rows=rows,
        )


def _reservation_line(report: MonthlyReport | None) -> str:
    """The report's headline with the reservation's fee, amortized over the month so far."""
    if report is None or not report.reservations:
        return ""
    used = "-" if report.reserved_utilisation_pct is None else f"{report.reserved_utilisation_pct:.1f}%"
    return (f"in the report: reservation fees {report.reserved_fees} amortized ({report.reserved_unused} of it "
            f"unused, {report.reserved_busy_hours:.1f} busy h of {report.reserved_prepaid_hours:.1f} prepaid, {used}); "
            f"total {report.total}\n")


def _print_summary(console: Console, r: DemoResult) -> None:
    table = Table(title="What ran where")
    for col in ("job", "team", "kind", "state", "where (attempts)", "preempted", "cost"):
        table.add_column(col, overflow="fold")
    for row in r.rows:
        table.add_row(f"{row['name']}\n[dim]{row['job']}[/dim]", row["team"], row["kind"], row["state"],
                      row["where"], str(row["preemptions"]), str(row["cost"]))
    console.print(table)
    saved = r.on_demand_equivalent - r.spend
    pct = (saved.amount / r.on_demand_equivalent.amount * 100) if r.on_demand_equivalent.amount else Decimal(0)
    console.print(
        f"[bold]{r.succeeded}/{r.jobs} jobs succeeded[/bold] in {r.sim_span} of simulated time "
        f"({r.ticks} ticks, {r.wall_seconds:.1f} s wall)\n"
        f"spend {r.spend}; the same hours on-demand {r.on_demand_equivalent}; "
        f"saved {saved} ({pct:.0f}%)\n"
        f"prepaid reserved machines were up {r.reserved_hours:.1f} h, {r.reserved_busy_hours:.1f} h of it running "
        f"jobs (worth {r.reserved_busy_value} at on-demand prices; already paid, not counted as savings above)\n"
        f"{_reservation_line(r.report)}"
        f"spot preemptions {r.preemptions}, resumed from epoch(s) {r.resumed_from_epochs or '-'}; "
        f"idle machines stopped {r.idle_stops}"
    )
    for kind, path in r.report_paths.items():
        console.print(f"report ({kind}): {path}")
