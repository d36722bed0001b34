"""Which adapter serves which cloud, and how each is built from Settings.

``build_providers`` is what the daemon and the CLI call: the sandbox clouds for
``GPUSCHED_BACKEND=sandbox``, the real adapters for ``live``. Adapters are imported
lazily, so a missing SDK only matters for the clouds actually enabled.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

from pydantic import SecretStr

from providers.base import TAG_MANAGED, Provider, ProviderError
from providers.bills import BillReader
from providers.catalog import filter_offers, load_catalog
from providers.redact import without_credentials
from providers.sandbox.provider import SandboxCloud, SandboxProvider, capabilities_like
from scheduler.clock import Clock
from scheduler.errors import GpuschedError, UserError, install_hint
from scheduler.models import Offer
from scheduler.settings import Settings, load_cloud_config

# provider name -> (adapter module, config class). The module holds ``from_config`` and the
# config class (imported there from the package's ``config``).
ADAPTERS = {
    "aws": ("providers.aws.adapter", "AwsConfig"),
    "alibaba": ("providers.alibaba.adapter", "AlibabaConfig"),
    "tencent": ("providers.tencent.adapter", "TencentConfig"),
    "huawei": ("providers.huawei.adapter", "HuaweiConfig"),
}


def build_sandbox(settings: Settings, clock: Clock, *, catalog: Sequence[Offer] | None = None,
                  ) -> tuple[dict[str, Provider], dict[str, SandboxCloud]]:
    """One simulated cloud per configured provider name, each holding that cloud's offers of ``catalog``
    (None: the bundled catalog). A simulated month's market passes the catalog at its own spot reclaim rates
    (``simulation.market.MarketSpec.scaled``): each cloud both publishes and draws reclaims at them."""
    catalog = load_catalog() if catalog is None else list(catalog)
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


def build_live(settings: Settings, clock: Clock, **overrides: dict[str, object]) -> dict[str, Provider]:
    """The real adapters for every configured provider; ``overrides[name]`` patches its config."""
    providers: dict[str, Provider] = {}
    for name in settings.providers:
        module_name, config_name = ADAPTERS[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserError(f"the {name} SDK is not installed ({exc.name})",
                            fix=install_hint(name)) from None
        config = load_cloud_config(getattr(module, config_name), name, **overrides.get(name, {}))
        providers[name] = module.from_config(config, clock)
    return providers


# provider name -> its bill reader's module (``from_config(config, clock)``); the config is the adapter's.
BILL_READERS = {
    "aws": "providers.aws.bills",
    "alibaba": "providers.alibaba.bills",
    "tencent": "providers.tencent.bills",
}


def build_bill_reader(name: str, clock: Clock, *, env_file: str | None = ".env", **overrides: object) -> BillReader:
    """One cloud's bill reader, its config read from GPUSCHED_<CLOUD>_* (``overrides`` win: tests, the demo)."""
    module_name, config_name = ADAPTERS[name]
    try:
        config_cls = getattr(importlib.import_module(module_name), config_name)
        readers = importlib.import_module(BILL_READERS[name])
    except ImportError as exc:
        raise UserError(f"the {name} SDK for its bills is not installed ({exc.name})",
                        fix=install_hint(name)) from None
    config = load_cloud_config(config_cls, name, env_file=env_file, **overrides)
    reader: BillReader = readers.from_config(config, clock)
    return reader


def build_bill_readers(settings: Settings, clock: Clock) -> dict[str, BillReader]:
    """The readers of the clouds' own bills that GPUSCHED_BILLS names; none when it names none."""
    if not settings.bills:
        return {}
    if settings.backend != "live":
        raise UserError("GPUSCHED_BILLS reads your cloud accounts' bills, but GPUSCHED_BACKEND is sandbox: "
                        "its machines never reach a bill",
                        fix="set GPUSCHED_BACKEND=live with the clouds' credentials, or leave GPUSCHED_BILLS empty")
    return {name: build_bill_reader(name, clock) for name in settings.bills}


def build_providers(settings: Settings, clock: Clock) -> dict[str, Provider]:
    if settings.backend == "sandbox":
        return build_sandbox(settings, clock)[0]
    if settings.backend == "live":
        return build_live(settings, clock)
    raise UserError(f"unknown backend {settings.backend!r}", fix="set GPUSCHED_BACKEND=sandbox or live")


def is_simulated(provider: Provider) -> bool:
    """The built-in sandbox cloud, not a real one (for what the CLI tells the user; code asks capabilities)."""
    return isinstance(provider, SandboxProvider)


def configured_credentials(settings: Settings) -> list[str]:
    """Every credential the live clouds are configured with, key ids too (an AccessKeyId names the
    account): what a caller keeps out of anything it prints. A cloud whose SDK or settings are missing
    has none to give."""
    if settings.backend != "live":
        return []
    values: list[str] = []
    for name in settings.providers:
        module_name, config_name = ADAPTERS[name]
        try:
            config = load_cloud_config(getattr(importlib.import_module(module_name), config_name), name)
        except (ImportError, GpuschedError):
            continue
        for field, value in config:
            if isinstance(value, SecretStr):
                values.append(value.get_secret_value())
            elif isinstance(value, str) and value and (field.endswith("key_id") or field.endswith("secret_id")):
                values.append(value)
    return values


def check_provider(provider: Provider, cluster: str, hide: Iterable[str] = ()) -> tuple[bool, str]:
    """List our instances once: proves credentials, permissions and reachability in one cheap call.
    The detail never holds a credential: signed-URL parameters and every string of ``hide`` are masked."""
    try:
        instances = provider.instances({TAG_MANAGED: cluster})
    except ProviderError as exc:
        detail = f"{type(exc).__name__}: {exc.message}"
        if exc.code:
            detail += f" (code {exc.code}{', request ' + exc.request_id if exc.request_id else ''})"
        return False, without_credentials(detail, hide)
    found = f"{len(instances)} instance(s) tagged {TAG_MANAGED}={cluster}"
    if is_simulated(provider):
        return True, f"sandbox (simulated, no real cloud); {found}"
    return True, without_credentials(f"reachable; {found}", hide)
