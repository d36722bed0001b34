"""The composition root: builds providers, the tick context and the daemon from Settings.

Everything that wires concrete parts together lives here, so every other module
takes its collaborators as arguments (and tests can hand in fakes).
"""

from __future__ import annotations

import structlog

from providers.registry import build_providers
from scheduler.accounting.budget_alerts import check_budget_alerts
from scheduler.accounting.report_delivery import write_and_send
from scheduler.accounting.reports import previous_month
from scheduler.agent.package import agent_package
from scheduler.app.api import create_app
from scheduler.app.daemon import Daemon
from scheduler.app.startup import open_store
from scheduler.clock import Clock, ScaledClock, SystemClock
from scheduler.errors import UserError
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents

log = structlog.get_logger("gpusched.runtime")


def run_daemon(settings: Settings) -> None:
    """Build everything from settings and serve until SIGTERM."""

    if settings.api_token is None:
        raise UserError("the daemon needs an API token", fix="set GPUSCHED_API_TOKEN (e.g. `openssl rand -hex 24`)")
    clock: Clock = SystemClock() if settings.sandbox_speedup == 1 else \
        ScaledClock(settings.sandbox_speedup, epoch=settings.sandbox_epoch)
    package = agent_package(settings)  # before anything starts: a machine must be able to install its agent
    store = open_store(settings, check=True)  # the data folder writable, the store reachable and sound
    providers = build_providers(settings, clock)
    ctx = TickContext.build(store, providers, clock, settings, agent_package=package)
    agents = SimAgents(store, providers, settings.cluster, seed=settings.sandbox_seed) \
        if settings.backend == "sandbox" or settings.sim_agents else None

    def tick() -> object:
        if agents is not None:
            agents.step(clock.now())
        return lifecycle.tick(ctx)

    def monthly_report() -> object:
        # The files first, then mail and chat: a channel that is down is logged and loses no file.
        sent = write_and_send(settings, previous_month(clock.now()), now=clock.now(), store=store)
        if sent.failed:
            log.warning("report_delivery_incomplete", failed=[o.channel for o in sent.failed],
                        files=[str(p) for p in sent.paths.values()])
        return sent

    def budget_check() -> object:
        return check_budget_alerts(settings, store, clock.now())

    daemon = Daemon(settings, store, clock, tick=tick, monthly_report=monthly_report,
                    budget_check=budget_check if settings.team_budgets else None, app=None)
    app = create_app(store, clock, settings, health=daemon.health, metrics=daemon.metrics, agent_package=package)
    daemon.app = app
    log.info("daemon_starting", backend=settings.backend, providers=list(providers), api=settings.base_url,
             store=settings.db_url.split("@")[-1])
    if settings.backend == "sandbox":
        log.warning("sandbox_backend", why="GPUSCHED_BACKEND=sandbox: the clouds are simulated; no machine "
                    "starts and no job really runs (set GPUSCHED_BACKEND=live for your cloud accounts)")
    if package is not None:
        log.info("agent_package", wheel=package.filename, sha256=package.sha256,
                 source="served by the daemon" if package.served_by_daemon else package.url)
    daemon.start_jobs()
    daemon.serve()
