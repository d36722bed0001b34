"""The clouds' own bills for a simulated month, served the way each cloud serves them, for the demo.

After ``gpusched demo --via-emulators`` has run its days, each sandbox cloud's machines are billed by
that cloud's rules (``providers/sandbox/billing.py``) and served over HTTP the way the cloud's billing
API answers: Alibaba BSS ``QueryInstanceBill`` (``providers/emulators/alibaba_bss.py``), Tencent
``DescribeBillDetail`` (``tencent_billing.py``), and AWS Cost Explorer through moto in server mode
(``aws_ce.py``; moto comes with the test tools: without it the AWS bill is left out, saying so). The
real bill readers (``providers/*/bills.py``) read them through the real SDKs, so the month's report
reconciles the ledger with bills gpusched did not write.

Each bill also carries one machine the demo never ran, so the report has one to flag per cloud: on
Alibaba someone else's untagged machine, on Tencent another gpusched installation's, on AWS one tagged
with this cluster that its store never had (a leak).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from providers.base import TAG_INSTANCE, TAG_MANAGED, TAG_TEAM
from providers.bills import BillReader
from providers.registry import build_bill_reader
from providers.sandbox.billing import AWS_RULES, Reservation, hourly_charges
from providers.sandbox.cloud import SandboxCloud
from scheduler.clock import Clock
from scheduler.errors import UserError, install_hint
from scheduler.models import ReservedCapacity

__all__ = ["EmulatedBills", "emulated_bills"]

KEY, SECRET = "demo-bills-key", "demo-bills-secret"


@dataclass
class EmulatedBills:
    readers: dict[str, BillReader] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # cloud -> why it has no bill here
    planted: dict[str, str] = field(default_factory=dict)  # cloud -> the machine planted in its bill
    _closers: list[Callable[[], Any]] = field(default_factory=list)

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def _reservations(reserved: Sequence[ReservedCapacity], cloud: str) -> list[Reservation]:
    return [Reservation(region=r.region, instance_type=r.instance_type, count=r.count,
                        start=r.start or datetime.min.replace(tzinfo=r.until.tzinfo), until=r.until)
            for r in reserved if r.provider == cloud]


def emulated_bills(clouds: Mapping[str, SandboxCloud], clock: Clock, month: str, *, cluster: str,
                   reserved: Sequence[ReservedCapacity] = (),
                   tencent_ids: Callable[[str], str] | None = None) -> EmulatedBills:
    """Serve each cloud's bill for ``month`` and build its reader; ``close()`` stops the servers."""
    try:
        from providers.emulators.alibaba_bss import AlibabaBssEmulator, PlantedItem
        from providers.emulators.tencent_billing import PlantedRow, TencentBillingEmulator
    except ImportError as exc:
        raise UserError(f"the emulated bills need the cloud SDKs ({exc.name})", fix=install_hint("clouds")) from None
    out = EmulatedBills()
    try:
        if "alibaba" in clouds:
            bss = AlibabaBssEmulator(clouds["alibaba"], {KEY: SECRET}, reservations=_reservations(reserved, "alibaba"))
            out._closers.append(bss.close)
            bss.plant(PlantedItem(month=month, instance_id="i-bp1datateam0001", amount=Decimal("186.40"),
                                  tags={"owner": "data-platform"}))
            out.planted["alibaba"] = "i-bp1datateam0001"
            out.readers["alibaba"] = build_bill_reader(
                "alibaba", clock, env_file=None, access_key_id=KEY, access_key_secret=SECRET,
                bss_endpoint=bss.endpoint, protocol="http")
        if "tencent" in clouds:
            billing = TencentBillingEmulator(clouds["tencent"], {KEY: SECRET}, currency=_currency(clouds["tencent"]),
                                             resource_id=tencent_ids, reservations=_reservations(reserved, "tencent"))
            out._closers.append(billing.close)
            billing.plant(PlantedRow(month=month, resource_id="ins-staging01", amount=Decimal("24.80"),
                                     tags={TAG_MANAGED: "staging", TAG_INSTANCE: "gi-staging-7", TAG_TEAM: "qa"}))
            out.planted["tencent"] = "ins-staging01"
            out.readers["tencent"] = build_bill_reader(
                "tencent", clock, env_file=None, secret_id=KEY, secret_key=SECRET, billing_endpoint=billing.endpoint,
                protocol="http", currency=_currency(clouds["tencent"]),
                regions=sorted({o.region for o in clouds["tencent"].offers()}))
        if "aws" in clouds:
            _aws(out, clouds["aws"], clock, month, cluster, reserved)
        for name in sorted(set(clouds) - {"aws", "alibaba", "tencent"}):
            out.skipped[name] = "gpusched has no reader of its bills yet (GPUSCHED_BILLS takes aws, alibaba, tencent)"
    except BaseException:
        out.close()
        raise
    return out


def _aws(out: EmulatedBills, cloud: SandboxCloud, clock: Clock, month: str, cluster: str,
         reserved: Sequence[ReservedCapacity]) -> None:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        out.skipped["aws"] = ("its Cost Explorer bill is served by moto, which comes with the test tools "
                              "(pip install '.[test]' from the checkout)")
        return
    from providers.emulators.aws_ce import ExtraGroup, ce_pages, load_into_moto

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    out._closers.append(server.stop)
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    charges = hourly_charges(cloud, AWS_RULES, month=month, reservations=_reservations(reserved, "aws"))
    lost = ExtraGroup(amount=Decimal("12.6248"), tags={TAG_MANAGED: cluster, TAG_INSTANCE: "gi-lost-0042"})
    month_over = clock.now().strftime("%Y-%m") > month
    load_into_moto(endpoint, ce_pages(charges, month, extra=[lost], estimated=not month_over))
    out.planted["aws"] = "gi-lost-0042"
    out.readers["aws"] = build_bill_reader("aws", clock, env_file=None, access_key_id=KEY,
                                           secret_access_key=SECRET, endpoint_url=endpoint)


def _currency(cloud: SandboxCloud) -> str:
    for offer in cloud.offers():
        if offer.on_demand is not None:
            return offer.on_demand.per_hour.currency
    return "USD"
