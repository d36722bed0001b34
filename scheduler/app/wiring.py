"""The composition root: builds providers, the tick context and the daemon from Settings.

Everything that wires concrete parts together lives here, so every other module
takes its collaborators as arguments (and tests can hand in fakes).
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from providers.base import Provider
from providers.registry import build_bill_readers, build_providers
from scheduler.accounting.budget_alerts import check_budget_alerts
from scheduler.accounting.report_delivery import write_and_send
from scheduler.accounting.report_once import send_once
from scheduler.accounting.reports import previous_month
from scheduler.agent.package import agent_package
from scheduler.app.api import create_app
from scheduler.app.daemon import Daemon
from scheduler.app.startup import open_store, prepare_report_dir
from scheduler.clock import Clock, ScaledClock, SystemClock
from scheduler.errors import UserError
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.lifecycle.leadership import Leadership
from scheduler.lifecycle.perf_learning import rebase_samples
from scheduler.limits import EARLIEST_TIME, LATEST_TIME
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents
from scheduler.store.database import Store

log = structlog.get_logger("gpusched.runtime")


def sim_agents(settings: Settings, store: Store, providers: Mapping[str, Provider]) -> SimAgents | None:
    """The simulated on-instance agents of a sandbox daemon (or of one whose live clouds are emulators):
    they run the jobs in the daemon and write each attempt's output, as real agents ship theirs."""
    if settings.backend != "sandbox" and not settings.sim_agents:
        return None
    return SimAgents(store, providers, settings.cluster, seed=settings.sandbox_seed,
                     output_bytes=settings.job_log_bytes)


def sandbox_clock(settings: Settings) -> Clock:
    """The sped-up clock of ``GPUSCHED_SANDBOX_SPEEDUP`` from ``GPUSCHED_SANDBOX_CLOCK_START``, refused when it would
    not read a time a job can have (years 2000-2199): a start in the future, or one so long ago that the speed-up
    has carried it past year 2199 (the clock then failed inside the first tick, or only when a job came)."""
    since = settings.sandbox_clock_start
    fix = ("set GPUSCHED_SANDBOX_CLOCK_START to a recent moment, or leave it empty to start the sandbox clock at the "
           "time of day")
    try:
        clock = ScaledClock(settings.sandbox_speedup, since=since)
        now = clock.now()
    except (ValueError, OverflowError) as e:
        why = str(e) if isinstance(e, ValueError) else "would read a time past year 9999"
        raise UserError(f"GPUSCHED_SANDBOX_CLOCK_START {why.removeprefix('since ')}", fix=fix) from e
    if not EARLIEST_TIME <= now < LATEST_TIME:
        assert since is not None  # without it the clock starts at the time of day
        raise UserError(f"GPUSCHED_SANDBOX_CLOCK_START {since.isoformat()} at GPUSCHED_SANDBOX_SPEEDUP "
                        f"{settings.sandbox_speedup:g} puts the sandbox clock at {now:%Y-%m-%d}, outside the years "
                        f"{EARLIEST_TIME.year}-{LATEST_TIME.year - 1} that job times may have", fix=fix)
    return clock


def run_daemon(settings: Settings) -> None:
    """Build everything from settings and serve until SIGTERM."""

    if settings.api_token is None:
        raise UserError("the daemon needs an API token", fix="set GPUSCHED_API_TOKEN (e.g. `openssl rand -hex 24`)")
    clock: Clock = SystemClock() if settings.sandbox_speedup == 1 else sandbox_clock(settings)
    package = agent_package(settings)  # before anything starts: a machine must be able to install its agent
    store = open_store(settings, check=True)  # the data folder writable, the store reachable and sound
    prepare_report_dir(settings)
    with store.session() as s:  # samples from before learned rates were the GPU's (migration 0016)
        rebase_samples(s)
    providers = build_providers(settings, clock)
    bills = build_bill_readers(settings, clock)  # GPUSCHED_BILLS: each month's report reconciles these clouds' bills
    # Real time for the lease even in a sped-up sandbox: it says whether a process is alive.
    leadership = Leadership(store, SystemClock(), lease_seconds=settings.leader_lease_s,
                            renew_seconds=settings.leader_renew_seconds)
    # Every write of the tick is fenced by the lease: a deposed leader's transactions roll back.
    ctx = TickContext.build(store.fenced(leadership.fence), providers, clock, settings, agent_package=package)
    agents = sim_agents(settings, store, providers)

    def tick() -> object:
        if agents is not None:
            agents.step(clock.now())
        return lifecycle.tick(ctx)

    def monthly_report() -> object:
        # The files first, then mail and chat: a channel that is down is logged and loses no file.
        # The month is claimed first, so that of several daemons one sends it.
        month, term = previous_month(clock.now()), leadership.term
        if term is None:
            return None  # the lease ran out since the daemon asked: the next leader owes it
        sent = send_once(store, month, holder=leadership.holder, term=term, now=clock.now,
                         send=lambda: write_and_send(settings, month, now=clock.now(), store=store,
                                                   bills=bills))
        if sent is not None and sent.failed:
            log.warning("report_delivery_incomplete", failed=[o.channel for o in sent.failed],
                        files=[str(p) for p in sent.paths.values()])
        return sent

    def budget_check() -> object:
        return check_budget_alerts(settings, store, clock.now())

    daemon = Daemon(settings, store, clock, tick=tick, monthly_report=monthly_report,
                    budget_check=budget_check if settings.team_budgets or settings.project_budgets else None, app=None,
                    leadership=leadership)
    app = create_app(store, clock, settings, health=daemon.health, metrics=daemon.metrics, agent_package=package)
    daemon.app = app
    log.info("daemon_starting", backend=settings.backend, providers=list(providers), api=settings.base_url,
             store=settings.db_url.split("@")[-1], holder=leadership.holder, lease_s=settings.leader_lease_s,
             renew_s=settings.leader_renew_seconds)
    if settings.backend == "sandbox":
        log.warning("sandbox_backend", why="GPUSCHED_BACKEND=sandbox: the clouds are simulated; no machine "
                    "starts and no job really runs (set GPUSCHED_BACKEND=live for your cloud accounts)")
    if package is not None:
        log.info("agent_package", wheel=package.filename, sha256=package.sha256,
                 source="served by the daemon" if package.served_by_daemon else package.url)
    daemon.start_jobs()
    daemon.serve()
