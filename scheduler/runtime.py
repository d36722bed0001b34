"""The composition root: builds providers, the tick context and the daemon from Settings.

Everything that wires concrete parts together lives here, so every other module
takes its collaborators as arguments (and tests can hand in fakes).
"""

from __future__ import annotations

import importlib
from datetime import datetime
from pathlib import Path

import structlog

from providers.base import TAG_MANAGED, Provider, ProviderError
from providers.sandbox import SandboxCloud, SandboxProvider, capabilities_like
from scheduler.catalog import filter_offers, load_catalog
from scheduler.clock import Clock, ScaledClock, SystemClock
from scheduler.cloud_config import load_cloud_config
from scheduler.errors import UserError
from scheduler.models import Capacity, Offer
from scheduler.planner import FleetSlot
from scheduler.settings import Settings
from scheduler.store import Store

log = structlog.get_logger("gpusched.runtime")


def build_sandbox(settings: Settings, clock: Clock) -> tuple[dict[str, Provider], dict[str, SandboxCloud]]:
    """One simulated cloud per configured provider name, each holding that cloud's catalog offers."""
    catalog = load_catalog()
    providers: dict[str, Provider] = {}
    clouds: dict[str, SandboxCloud] = {}
    for i, name in enumerate(settings.providers):
        offers = filter_offers(catalog, providers=[name])
        # Terminated machines leave listings after an hour, as on AWS: a month of simulated
        # work would otherwise make every listing walk every machine ever launched.
        cloud = SandboxCloud(clock, offers, seed=settings.sandbox_seed * 101 + i, forget_terminated_seconds=3600)
        clouds[name] = cloud
        providers[name] = SandboxProvider(cloud, name=name, capabilities=capabilities_like(name))
    return providers, clouds


# provider name -> (adapter module, config class); imported lazily so a missing SDK only
# matters for the clouds actually enabled.
ADAPTERS = {
    "aws": ("providers.aws", "AwsConfig"),
    "alibaba": ("providers.alibaba", "AlibabaConfig"),
    "tencent": ("providers.tencent", "TencentConfig"),
}


def build_live(settings: Settings, clock: Clock, **overrides: dict[str, object]) -> dict[str, Provider]:
    """The real adapters for every configured provider; ``overrides[name]`` patches its config."""
    providers: dict[str, Provider] = {}
    for name in settings.providers:
        module_name, config_name = ADAPTERS[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserError(f"the {name} SDK is not installed ({exc.name})",
                            fix=f"pip install 'gpusched[{name}]'") from None
        config = load_cloud_config(getattr(module, config_name), name, **overrides.get(name, {}))
        providers[name] = module.from_config(config, clock)
    return providers


def build_providers(settings: Settings, clock: Clock) -> dict[str, Provider]:
    if settings.backend == "sandbox":
        return build_sandbox(settings, clock)[0]
    if settings.backend == "live":
        return build_live(settings, clock)
    raise UserError(f"unknown backend {settings.backend!r}", fix="set GPUSCHED_BACKEND=sandbox or live")


def check_provider(provider: Provider, cluster: str) -> tuple[bool, str]:
    """List our instances once: proves credentials, permissions and reachability in one cheap call."""
    try:
        instances = provider.instances({TAG_MANAGED: cluster})
    except ProviderError as exc:
        detail = f"{type(exc).__name__}: {exc.message}"
        if exc.code:
            detail += f" (code {exc.code}{', request ' + exc.request_id if exc.request_id else ''})"
        return False, detail
    return True, f"reachable; {len(instances)} instance(s) tagged {TAG_MANAGED}={cluster}"


def reserved_slots(settings: Settings, offers: list[Offer], now: datetime) -> list[FleetSlot]:
    """Owned reserved capacity as planner slots (for `gpusched plan`; the tick counts live ones)."""
    slots: list[FleetSlot] = []
    for res in settings.reserved:
        if res.until <= now:
            continue
        match = sorted(
            (o for o in offers if o.provider == res.provider and o.region == res.region
             and o.instance_type == res.instance_type and (res.zone is None or o.zone == res.zone)),
            key=lambda o: o.zone,
        )
        if not match:
            raise UserError(
                f"reserved capacity {res.provider} {res.region} {res.instance_type} matches no offer",
                fix="check GPUSCHED_RESERVED against `gpusched plan` offers (provider, region, instance type)",
            )
        slots.extend(
            FleetSlot(kind="reserved", instance_id=None, offer=match[0], capacity=Capacity.reserved, until=res.until)
            for _ in range(res.count)
        )
    return slots


def write_monthly_report(settings: Settings, month: str, *, out_dir: Path | None = None,
                         now: datetime | None = None, store: Store | None = None) -> dict[str, Path]:
    """Account open usage up to ``now`` and write the month's report files."""
    from scheduler import ledger, reports

    now = now or SystemClock().now()
    own = store is None
    store = store or Store(settings.db_url)
    if own:
        store.migrate()
    try:
        with store.session() as s:
            ledger.account(s, now)
            report = reports.build_report(
                s, month, currency=settings.report_currency, fx=settings.fx, now=now,
                open_costs=ledger.open_costs(s, now),
            )
        return reports.write_report(report, out_dir or settings.reports_path)
    finally:
        if own:
            store.dispose()


def run_daemon(settings: Settings) -> None:
    """Build everything from settings and serve until SIGTERM."""
    from scheduler import lifecycle, reports
    from scheduler.api import create_app
    from scheduler.daemon import Daemon
    from scheduler.simagent import SimAgents

    if settings.api_token is None:
        raise UserError("the daemon needs an API token", fix="set GPUSCHED_API_TOKEN (e.g. `openssl rand -hex 24`)")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    clock: Clock = SystemClock() if settings.sandbox_speedup == 1 else ScaledClock(settings.sandbox_speedup)
    store = Store(settings.db_url)
    store.migrate()
    providers = build_providers(settings, clock)
    ctx = lifecycle.TickContext(store=store, providers=providers, clock=clock, settings=settings)
    agents = SimAgents(store, providers, settings.cluster, seed=settings.sandbox_seed) \
        if settings.backend == "sandbox" or settings.sim_agents else None

    def tick() -> object:
        if agents is not None:
            agents.step(clock.now())
        return lifecycle.tick(ctx)

    def monthly_report() -> object:
        return write_monthly_report(settings, reports.previous_month(clock.now()), now=clock.now(), store=store)

    daemon = Daemon(settings, store, clock, tick=tick, monthly_report=monthly_report, app=None)
    app = create_app(store, clock, settings, health=daemon.health, metrics=daemon.metrics)
    daemon.app = app
    log.info("daemon_starting", backend=settings.backend, providers=list(providers), api=settings.base_url,
             store=settings.db_url.split("@")[-1])
    daemon.start_jobs()
    daemon.serve()
