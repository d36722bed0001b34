"""Alibaba Cloud BSS OpenAPI (billing, RPC API version 2017-12-14) over real HTTP: ``QueryInstanceBill``,
answered from what the sandbox cloud behind the ECS emulator really ran.

``AlibabaBssEmulator`` listens on 127.0.0.1 and answers what ``aliyun-python-sdk-bssopenapi`` sends,
through the gateway protocol of ``alibaba_rpc`` (signature v1 verified there, by the same check the ECS
emulator uses). The bill itself comes from ``providers/sandbox/billing.py`` under Alibaba's rules (per
second, settled every clock hour, each hour rounded to the cent; reservations deduct the hours they cover),
so it differs from gpusched's ledger by what a real bill differs by.

``QueryInstanceBill`` as the BSS reference gives it, the parts an instance bill needs:

* parameters ``BillingCycle`` (YYYY-MM, required), ``ProductCode``, ``SubscriptionType`` (Subscription |
  PayAsYouGo, only with ProductCode), ``IsBillingItem`` (instance level only here), ``Granularity``
  (MONTHLY | DAILY, DAILY needs ``BillingDate`` YYYY-MM-DD in the cycle), ``IsHideZeroCharge``,
  ``PageNum`` (from 1), ``PageSize`` (default 20, at most 300);
* the answer ``{Code, Message, RequestId, Success, Data: {BillingCycle, AccountID, AccountName, TotalCount,
  PageNum, PageSize, Items: {Item: [...]}}}``, one item per instance with its ``InstanceID``, ``Tag``
  (``"key:K value:V; key:K2 value:V2"``), ``PretaxGrossAmount``, ``DeductedByResourcePackage``,
  ``PretaxAmount`` (what is owed before tax), ``Currency``, ``Region``, ``Zone``, ``InstanceSpec``,
  ``ServicePeriod`` / ``ServicePeriodUnit`` and the other deductions (zero here).

Beyond the sandbox's machines, a test or the demo can plant bill items (``plant``: someone else's
instance, a leak) and script errors (``script_error``: e.g. ``Throttling.User``, HTTP 400, before the
answer). A month of the sandbox's bill is the account's whole ECS bill: a planted item shows up like any
other.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qsl

from providers.emulators.alibaba_rpc import (
    LISTEN_HOST,
    RpcAnswer,
    RpcAuthenticator,
    RpcError,
    RpcServer,
    missing_parameter,
    rpc_error_body,
    rpc_json,
)
from providers.emulators.local_http import Served
from providers.sandbox.billing import ALIBABA_RULES, Charge, Reservation, hourly_charges
from providers.sandbox.cloud import SandboxCloud
from scheduler.clock import Clock

__all__ = ["API_VERSION", "AlibabaBssEmulator", "PlantedItem"]

API_VERSION = "2017-12-14"
HOST_ID = "business.aliyuncs.com"
MAX_PAGE_SIZE = 300
DEFAULT_PAGE_SIZE = 20
ACCOUNT_ID = "1234567890123456"
_CENT = Decimal("0.01")


@dataclass(frozen=True)
class PlantedItem:
    """A bill item the sandbox did not run: someone else's instance, or one gpusched lost track of."""

    month: str
    instance_id: str
    amount: Decimal
    currency: str = "CNY"
    tags: Mapping[str, str] = field(default_factory=dict)
    region: str = "cn-hangzhou"
    instance_type: str = "ecs.gn7i-c8g1.2xlarge"
    day: str = ""  # YYYY-MM-DD for a DAILY bill; "" spreads nothing (the item is on the month's first day)


class AlibabaBssEmulator(Served):
    """BSS OpenAPI's ``QueryInstanceBill`` on 127.0.0.1 over one SandboxCloud's machines."""

    def __init__(
        self,
        cloud: SandboxCloud,
        credentials: Mapping[str, str],
        *,
        reservations: Sequence[Reservation] = (),
        wall_clock: Clock | None = None,
        max_skew_seconds: float = 900,
        port: int = 0,
    ) -> None:
        self.cloud = cloud
        self._reservations = tuple(reservations)
        self._auth = RpcAuthenticator(credentials, wall_clock=wall_clock, max_skew_seconds=max_skew_seconds)
        self._lock = threading.Lock()
        self._planted: list[PlantedItem] = []
        self._scripted: list[RpcError] = []
        self._requests = 0
        self.calls: list[dict[str, str]] = []  # every request's parameters, signed ones included
        self._server = RpcServer(self, port=port, name="alibaba-bss-emulator")

    # --- lifecycle ------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``: what ``GPUSCHED_ALIBABA_BSS_ENDPOINT`` takes."""
        return f"{LISTEN_HOST}:{self.port}"

    # --- levers ---------------------------------------------------------------

    def plant(self, item: PlantedItem) -> None:
        with self._lock:
            self._planted.append(item)

    def script_error(self, code: str, message: str = "Request was denied due to request throttling.",
                     status: int = 400, times: int = 1) -> None:
        """The next ``times`` authenticated requests get this error instead of their answer."""
        with self._lock:
            self._scripted.extend([RpcError(status, code, message)] * times)

    # --- one request ----------------------------------------------------------

    def handle(self, method: str, path: str, query: str, body: bytes, content_type: str) -> RpcAnswer | None:
        params = dict(parse_qsl(query, keep_blank_values=True))
        if body and content_type.startswith("application/x-www-form-urlencoded"):
            params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        with self._lock:
            self._requests += 1
            request_id = str(uuid.UUID(int=self._requests)).upper()
            self.calls.append(dict(params))
            try:
                if path != "/":
                    raise RpcError(404, "InvalidAction.NotFound",
                                   "Specified api is not found, please check your url and method.")
                self._auth.check(method, params)
                if params.get("Action") != "QueryInstanceBill":
                    raise RpcError(404, "InvalidAction.NotFound",
                                   "Specified api is not found, please check your url and method.")
                if params.get("Version") != API_VERSION:
                    raise RpcError(400, "InvalidVersion", "Specified parameter Version is not valid.")
                if self._scripted:
                    raise self._scripted.pop(0)
                data = self._query_instance_bill(params)
            except RpcError as exc:
                return RpcAnswer(exc.status, rpc_json(rpc_error_body(exc, request_id, HOST_ID, "BssOpenApi")))
            answer = {"Code": "Success", "Message": "Successful!", "RequestId": request_id, "Success": True,
                      "Data": data}
            return RpcAnswer(200, rpc_json(answer))

    # --- QueryInstanceBill ------------------------------------------------------

    def _query_instance_bill(self, p: Mapping[str, str]) -> dict[str, Any]:
        cycle = p.get("BillingCycle") or ""
        if not cycle:
            raise missing_parameter("BillingCycle")
        if not _is_month(cycle):
            raise RpcError(400, "InvalidParameter", "The specified parameter BillingCycle is not valid.")
        granularity = (p.get("Granularity") or "MONTHLY").upper()
        if granularity not in ("MONTHLY", "DAILY"):
            raise RpcError(400, "InvalidParameter", "The specified parameter Granularity is not valid.")
        day = p.get("BillingDate") or ""
        if granularity == "DAILY" and not (day.startswith(cycle + "-") and len(day) == 10):
            raise RpcError(400, "InvalidParameter", "BillingDate is required for DAILY and must be in BillingCycle.")
        if (p.get("IsBillingItem") or "false").lower() == "true":
            raise RpcError(400, "InvalidParameter", "The emulator answers instance-level bills only.")
        if p.get("SubscriptionType") and not p.get("ProductCode"):
            raise RpcError(400, "InvalidParameter", "SubscriptionType must be used together with ProductCode.")
        number, size = _integer(p, "PageNum", 1), _integer(p, "PageSize", DEFAULT_PAGE_SIZE)
        if number < 1 or not 1 <= size <= MAX_PAGE_SIZE:
            raise RpcError(400, "InvalidParameter", "The specified PageNum or PageSize is not valid.")
        items = [i for i in self._items(cycle, day if granularity == "DAILY" else "")
                 if (not p.get("ProductCode") or i["ProductCode"] == p["ProductCode"])
                 and (not p.get("SubscriptionType") or i["SubscriptionType"] == p["SubscriptionType"])]
        if (p.get("IsHideZeroCharge") or "false").lower() == "true":
            items = [i for i in items if i["PretaxGrossAmount"] or i["PretaxAmount"]]
        page = items[(number - 1) * size: number * size]
        return {"BillingCycle": cycle, "AccountID": ACCOUNT_ID, "AccountName": "gpusched-emulator@example.com",
                "TotalCount": len(items), "PageNum": number, "PageSize": size, "Items": {"Item": page}}

    def _items(self, cycle: str, day: str) -> list[dict[str, Any]]:
        charges = hourly_charges(self.cloud, ALIBABA_RULES, month=cycle, reservations=self._reservations)
        if day:
            charges = [c for c in charges if c.hour.date().isoformat() == day]
        by_instance: dict[str, list[Charge]] = {}
        for c in charges:
            by_instance.setdefault(c.instance.instance_id, []).append(c)
        items = [_item(cs, day) for cs in by_instance.values()]
        for planted in self._planted:
            if planted.month == cycle and (not day or (planted.day or f"{cycle}-01") == day):
                items.append(_planted_item(planted, day))
        return items


def _item(charges: list[Charge], day: str) -> dict[str, Any]:
    first = charges[0]
    inst = first.instance
    gross = sum((c.gross for c in charges), Decimal(0))
    deducted = sum((c.deducted for c in charges), Decimal(0))
    seconds = sum((c.seconds for c in charges), Decimal(0))
    return _shape(
        instance_id=inst.instance_id, tags=inst.tags, region=inst.region, zone=inst.zone,
        instance_type=inst.instance_type, gross=gross, deducted=deducted, currency=first.currency,
        seconds=seconds, list_price=first.unit_price, day=day,
    )


def _planted_item(p: PlantedItem, day: str) -> dict[str, Any]:
    return _shape(instance_id=p.instance_id, tags=p.tags, region=p.region, zone=f"{p.region}-i",
                  instance_type=p.instance_type, gross=p.amount, deducted=Decimal(0), currency=p.currency,
                  seconds=Decimal(0), list_price=Decimal(0), day=day)


def _shape(*, instance_id: str, tags: Mapping[str, str], region: str, zone: str, instance_type: str,
           gross: Decimal, deducted: Decimal, currency: str, seconds: Decimal, list_price: Decimal,
           day: str) -> dict[str, Any]:
    pretax = gross - deducted
    return {
        "InstanceID": instance_id,
        "Tag": "; ".join(f"key:{k} value:{v}" for k, v in tags.items()),
        "ProductCode": "ecs",
        "ProductName": "Elastic Compute Service",
        "ProductType": "ecs",
        "ProductDetail": "ECS",
        "CommodityCode": "ecs",
        "PipCode": "ecs",
        "SubscriptionType": "PayAsYouGo",
        "Item": "PayAsYouGoBill",
        "BillingType": "Other",
        "BizType": "trusteeship",
        "Region": region,
        "Zone": zone,
        "InstanceSpec": instance_type,
        "InstanceConfig": f"InstanceType:{instance_type}",
        "NickName": "",
        "ResourceGroup": "Default resource group",
        "CostUnit": "Not allocated",
        "OwnerID": ACCOUNT_ID,
        "BillAccountID": ACCOUNT_ID,
        "BillAccountName": "gpusched-emulator@example.com",
        "InternetIP": "",
        "IntranetIP": "",
        "ServicePeriod": str(seconds.to_integral_value()),
        "ServicePeriodUnit": "Second",
        "Usage": str((seconds / Decimal(3600)).quantize(Decimal("0.0001"))),
        "UsageUnit": "Hour",
        "ListPrice": str(list_price),
        "ListPriceUnit": f"{currency}/Hour",
        "BillingItem": "",
        "BillingDate": day,
        "Currency": currency,
        "PretaxGrossAmount": gross.quantize(_CENT),
        "InvoiceDiscount": Decimal(0),
        "DeductedByCoupons": Decimal(0),
        "DeductedByCashCoupons": Decimal(0),
        "DeductedByPrepaidCard": Decimal(0),
        "DeductedByResourcePackage": str(deducted.quantize(_CENT)),
        "AdjustAmount": Decimal(0),
        "PretaxAmount": pretax.quantize(_CENT),
        "PaymentAmount": pretax.quantize(_CENT),
        "CashAmount": pretax.quantize(_CENT),
        "OutstandingAmount": Decimal(0),
    }


def _is_month(text: str) -> bool:
    try:
        datetime.strptime(text, "%Y-%m")
    except ValueError:
        return False
    return len(text) == 7


def _integer(p: Mapping[str, str], name: str, default: int) -> int:
    raw = p.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RpcError(400, f"InvalidParameter.{name}", f"The specified parameter {name} is not valid.") from None
