"""The clouds from the command line: `providers check`, `offers`, and `perf` (the rates the planner uses).

Every one takes ``--json`` for scripts. ``offers`` prices everything in the report currency (converted with
the configured FX rates), cheapest first, so clouds billing in dollars and in yuan compare at a glance; a
filter that matches nothing says so and exits 2. GPU names are taken as job files take them (``A100``,
``a10g``, ``L40S``: ``scheduler/gpus.py``), and an unknown one gets the same help as in a job file.
``providers check`` tells the built-in sandbox from a real cloud and never prints a credential.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from scheduler.app.cli_text import print_json, shown
from scheduler.errors import UserError

if TYPE_CHECKING:  # loaded when a command runs: the command line starts without them
    from scheduler.models import Offer
    from scheduler.money import FxRates, Money
    from scheduler.settings import Settings

EXIT_FAILED = 1


class PriceOf(str, Enum):
    on_demand = "on-demand"
    spot = "spot"


def known_gpu(name: str, option: str = "--gpu") -> str:
    """The GPU model a typed name means, or a UserError with the job file's help for an unknown name."""
    from scheduler.gpus import GPUS, canonical_gpu
    from scheduler.jobs.jobfile_problems import unknown_choice

    model = canonical_gpu(name)
    if model is None:
        raise UserError(f"{option}: {unknown_choice('GPU', name, tuple(GPUS))}",
                        fix="names are case-insensitive; A100 means A100-40G, a100-80gb A100-80G")
    return model


def _known_model(name: str) -> str:
    """A YOLOv9 model as a job file names it (case aside), or a UserError naming the known ones: an unknown one
    matched no row, and the table came back empty with no word why."""
    from scheduler.jobs.jobfile_problems import unknown_choice
    from scheduler.models import MODELS

    if name.strip().lower() in MODELS:
        return name.strip().lower()
    raise UserError(f"--model: {unknown_choice('model', name, MODELS)}", fix="name a model as a job file does")


def _quiet_logs() -> None:
    from scheduler.logs import configure_logging

    configure_logging("console", "warning")


def _converted(money: Money | None, fx: FxRates, currency: str) -> Money | None:
    return fx.convert(money, currency) if money is not None else None


def _sorted_offers(rows: list[Offer], fx: FxRates, currency: str, by: PriceOf) -> list[Offer]:
    """Cheapest first by the ``by`` price in ``currency`` (offers without that price last)."""
    from decimal import Decimal

    def key(o: Offer) -> tuple[int, Decimal, str, str, str]:
        price = o.spot if by is PriceOf.spot else o.on_demand
        amount = _converted(price.per_hour, fx, currency).amount if price is not None else Decimal(0)  # type: ignore[union-attr]
        return (price is None, amount, o.provider, o.zone, o.instance_type)

    return sorted(rows, key=key)


def _filters(gpu: str | None, provider: str | None, region: str | None) -> str:
    given = [f"--{k} {v}" for k, v in (("gpu", gpu), ("provider", provider), ("region", region)) if v]
    return " ".join(given)


def register(app: typer.Typer, providers_app: typer.Typer, settings: Callable[[], Settings], out: Console) -> None:
    """Add ``providers check``, ``offers`` and ``perf`` (``settings`` reads the configuration)."""

    @providers_app.command("check")
    def providers_check(as_json: bool = typer.Option(False, "--json", help="the results as JSON")) -> None:
        """One line per provider: the simulated sandbox, or whether the real cloud answers with these
        credentials. No credential is printed."""
        from providers.registry import build_providers, check_provider, configured_credentials, is_simulated
        from scheduler.clock import SystemClock

        cfg = settings()
        _quiet_logs()
        hide = configured_credentials(cfg)
        results = []
        for name, provider in sorted(build_providers(cfg, SystemClock()).items()):
            ok, detail = check_provider(provider, cfg.cluster, hide)
            results.append({"provider": name, "kind": "sandbox" if is_simulated(provider) else "cloud",
                            "ok": ok, "detail": detail})
        if as_json:
            print_json(results)
        for r in [] if as_json else results:
            mark = "[green]ok[/green]  " if r["ok"] else "[red]FAIL[/red]"
            out.print(f"{mark} {r['provider']:<8} {shown(r['detail'])}", highlight=False, soft_wrap=True)
        if not all(r["ok"] for r in results):
            raise typer.Exit(EXIT_FAILED)

    @app.command()
    def offers(
        gpu: Optional[str] = typer.Option(None, help="only this GPU model, e.g. A10, a100, L40S"),
        provider: Optional[str] = typer.Option(None, help="only this provider"),
        region: Optional[str] = typer.Option(None, help="only this region"),
        by: PriceOf = typer.Option(PriceOf.on_demand, "--by", help="sort by this price per hour"),
        as_json: bool = typer.Option(False, "--json", help="the offers as JSON (prices as the clouds give them)"),
    ) -> None:
        """Live offers from the configured providers, cheapest first, in the report currency
        (catalog prices where a cloud gives none)."""
        from providers.registry import build_providers
        from scheduler.clock import SystemClock

        cfg = settings()
        _quiet_logs()
        model = known_gpu(gpu) if gpu else None
        clouds = build_providers(cfg, SystemClock())
        if provider and provider not in clouds:
            raise UserError(f"--provider {provider}: not a configured provider",
                            fix=f"use one of: {', '.join(sorted(clouds))} (GPUSCHED_PROVIDERS)")
        rows = []
        for name, prov in sorted(clouds.items()):
            if provider and name != provider:
                continue
            rows += [o for o in prov.offers([region] if region else None) if model is None or o.gpu == model]
        currency, fx = cfg.report_currency, cfg.fx
        rows = _sorted_offers(rows, fx, currency, by)
        if not rows:
            raise UserError(f"no offer matches {_filters(model, provider, region)}",
                            fix="drop a filter; `gpusched offers` lists every offer of the configured clouds")
        if as_json:
            print_json([o.model_dump(mode="json") for o in rows])
            return
        rates = ", ".join(f"1 {c} = {fx.rate(c, currency)} {currency}" for c in sorted(
            {p.per_hour.currency for o in rows for p in (o.on_demand, o.spot) if p is not None} - {currency}))
        title = f"{len(rows)} offer(s), per hour in {currency}, cheapest {by.value} first" + (
            f" ({rates})" if rates else "")
        table = Table(title=title)
        for col in ("cloud", "zone", "instance type", "GPU", "vCPU", "on-demand", "spot", "stock", "price source"):
            table.add_column(col, overflow="fold", justify="right" if col in ("on-demand", "spot") else "left")
        for o in rows:
            prices = [_converted(p.per_hour, fx, currency) if p is not None else None for p in (o.on_demand, o.spot)]
            source = (o.spot or o.on_demand).source if (o.spot or o.on_demand) else ""  # type: ignore[union-attr]
            table.add_row(shown(o.provider), shown(o.zone), shown(o.instance_type), f"{o.gpu_count}x {o.gpu}",
                          str(o.vcpus), *(f"{m.amount:,.2f}" if m is not None else "-" for m in prices),
                          f"{o.on_demand_stock.value}/{o.spot_stock.value}", shown(source))
        out.print(table)

    @app.command()
    def perf(
        model: Optional[list[str]] = typer.Option(None, help="only these models (repeat the option)"),
        gpu: Optional[list[str]] = typer.Option(None, help="only these GPUs (repeat the option), e.g. a100, L40S"),
        as_json: bool = typer.Option(False, "--json", help="the table as JSON"),
    ) -> None:
        """The YOLOv9 training-rate table the planner uses: prior or measured, and from how many epochs.

        Rates are the GPU's (as if the data loader kept up); on each machine the planner holds them to what
        its vCPUs' loader feeds."""
        from scheduler.app.startup import open_store
        from scheduler.lifecycle.perf_learning import perf_table

        gpus = [known_gpu(g) for g in gpu] if gpu else None
        models = [_known_model(m) for m in model] if model else None
        store = open_store(settings())
        try:
            with store.session(write=False) as s:
                rows = perf_table(s, models=models, gpus=gpus)
        finally:
            store.dispose()
        if as_json:
            print_json([r.model_dump(mode="json") for r in rows])
            return
        table = Table(title="training rate per GPU (images/s, where the data loader keeps up)")
        for col in ("model", "GPU", "img", "rate", "source", "samples", "prior", "last measured"):
            table.add_column(col)
        for r in rows:
            style = "bold" if r.source == "measured" else ""
            table.add_row(shown(r.model), shown(r.gpu), str(r.img_size), f"{r.rate_img_s:.1f}", r.source,
                          str(r.samples), f"{r.prior_rate:.1f}",
                          f"{r.last_seen:%Y-%m-%d %H:%M}" if r.last_seen else "-", style=style)
        out.print(table)
