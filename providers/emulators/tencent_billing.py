"""Tencent Cloud Billing (API 3.0, version 2018-07-09) over real HTTP: ``DescribeBillDetail``, answered
from what the sandbox cloud behind the CVM emulator really ran.

``TencentBillingEmulator`` listens on 127.0.0.1 and answers what ``tencentcloud-sdk-python-billing``
sends, through the protocol of ``tencent_tc3`` (TC3-HMAC-SHA256 verified there, by the same check the CVM
emulator uses, for the service ``billing``). The bill comes from ``providers/sandbox/billing.py`` under
Tencent's rules (per second, settled every clock hour, each hour rounded to the cent; reservations
deduct the hours they cover), so it differs from gpusched's ledger by what a real bill differs by.

``DescribeBillDetail`` as the Billing reference gives it, the parts an instance bill needs:

* parameters ``Offset`` and ``Limit`` (required; Limit at most 300 in the current reference, 100 in
  older ones), ``Month`` (yyyy-mm) or ``BeginTime`` and ``EndTime`` (a pair, one month), ``PeriodType``
  (byUsedTime | byPayTime), ``NeedRecordNum``, ``BusinessCode`` (the product, ``p_cvm``), ``PayMode``
  (prePay | postPay), ``ResourceId``, ``ProjectId``, ``ActionType``, ``Context``, ``PayerUin``; any other
  name is ``UnknownParameter``, the names taken from the SDK's request model;
* the answer ``{DetailSet: [...], Total, Context, RequestId}``: one row per settlement, here one per
  instance and clock hour (hourly pay-as-you-go and spot settlement), each with ``ResourceId``,
  ``Tags`` ``[{TagKey, TagValue}]``, ``PayTime``, ``FeeBeginTime`` / ``FeeEndTime``, ``BillMonth``,
  ``BusinessCode`` / ``PayMode`` / ``RegionId`` / ``ZoneName``, and a ``ComponentSet`` whose
  ``RealCost`` (after discounts and reservation deductions) is what is owed, beside ``Cost`` (list),
  ``OriginalCostWithRI`` and ``RiTimeSpan`` (what a reservation paid). Amounts are strings, in the
  account's currency (no currency field: the site decides; ``currency`` here).

Where the reference leaves it open the emulator picks: ``Total`` is sent always; product and action
codes are plausible stand-ins (``p_cvm``, ``postpay_deduct_h``, ``spotpay_deduct_h``); the order is
by hour, then launch. Levers: ``plant`` adds rows for an instance the sandbox did not run (someone
else's, a leak), ``script_error`` makes the next calls fail with an exact code
(``RequestLimitExceeded`` ...) after authentication.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Self

from tencentcloud.billing.v20180709 import models as billing_models

from providers.emulators.tencent_tc3 import JSON_TYPE, Api3Server, ApiError, Tc3Verifier, api3_handler
from providers.sandbox.billing import TENCENT_RULES, Charge, Reservation, hourly_charges
from providers.sandbox.cloud import SandboxCloud
from scheduler.clock import Clock
from scheduler.models import Capacity

__all__ = ["API_VERSION", "PlantedRow", "TencentBillingEmulator"]

API_VERSION = "2018-07-09"
SERVICE = "billing"
MAX_LIMIT = 300
PAYER_UIN = "100000000001"
_BEIJING = timezone(timedelta(hours=8))  # Tencent Cloud's bill times are Beijing time, without a zone
_TIME = "%Y-%m-%d %H:%M:%S"
_CENT = Decimal("0.01")


@dataclass(frozen=True)
class PlantedRow:
    """A bill row the sandbox did not run: someone else's instance, or one gpusched lost track of."""

    month: str
    resource_id: str
    amount: Decimal
    tags: Mapping[str, str] = field(default_factory=dict)
    region: str = "ap-guangzhou"


class TencentBillingEmulator:
    """Billing's ``DescribeBillDetail`` on 127.0.0.1 over one SandboxCloud's machines."""

    def __init__(
        self,
        cloud: SandboxCloud,
        credentials: Mapping[str, str],
        *,
        currency: str = "USD",
        resource_id: Callable[[str], str] | None = None,
        reservations: Sequence[Reservation] = (),
        signing_clock: Clock | None = None,
        seed: int = 0,
        port: int = 0,
    ) -> None:
        self.cloud = cloud
        self.currency = currency
        # The id a row names an instance by: the CVM emulator's (TencentCvmEmulator.tencent_id) when the
        # sandbox is reached through it, else the sandbox's own.
        self._resource_id = resource_id or (lambda sandbox_id: sandbox_id)
        self._reservations = tuple(reservations)
        self._verifier = Tc3Verifier(credentials, SERVICE, signing_clock=signing_clock)
        self._rng = random.Random(f"{seed}:tencent-billing")
        self._lock = threading.Lock()
        self._planted: list[PlantedRow] = []
        self._cached: tuple[tuple[str, datetime, int], list[dict[str, Any]]] | None = None
        self._scripted: list[ApiError] = []
        self.calls: list[dict[str, Any]] = []  # every accepted request's parameters
        self._parameters = frozenset(
            name[1:] for name in vars(billing_models.DescribeBillDetailRequest()) if name != "_headers"
        )
        self._server = Api3Server(("127.0.0.1", port), api3_handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="tencent-billing-emulator", daemon=True)
        self._thread.start()

    # --- lifetime -------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``host:port`` for ``GPUSCHED_TENCENT_BILLING_ENDPOINT``."""
        return f"127.0.0.1:{int(self._server.server_address[1])}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- levers ---------------------------------------------------------------

    def plant(self, row: PlantedRow) -> None:
        with self._lock:
            self._planted.append(row)

    def script_error(self, code: str, message: str = "scripted", times: int = 1) -> None:
        with self._lock:
            self._scripted.extend([ApiError(code, message)] * times)

    # --- one request ------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> bytes:
        lower = {k.lower(): v for k, v in headers.items()}
        with self._lock:
            request_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            try:
                self._verifier.check(method, path, lower, body)
                params = self._parse(lower, body)
                self.calls.append(params)
                if self._scripted:
                    raise self._scripted.pop(0)
                answer = self._describe_bill_detail(params)
            except ApiError as exc:
                answer = {"Error": {"Code": exc.code, "Message": exc.message}}
            except Exception as exc:  # noqa: BLE001 - an emulator bug reaches the test as the API's InternalError
                answer = {"Error": {"Code": "InternalError", "Message": f"emulator fault: {exc!r}"}}
            answer["RequestId"] = request_id
            return json.dumps({"Response": answer}).encode("utf-8")

    def _parse(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        if headers.get("content-type", "").split(";")[0].strip() != JSON_TYPE:
            raise ApiError("UnsupportedProtocol", "the body must be application/json")
        if headers.get("x-tc-version") != API_VERSION:
            raise ApiError("NoSuchVersion", f"Billing speaks version {API_VERSION}")
        action = headers.get("x-tc-action", "")
        if action != "DescribeBillDetail":
            raise ApiError("InvalidAction", f"the action {action!r} does not exist here")
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            raise ApiError("InvalidParameter", "the body is not JSON") from None
        if not isinstance(params, dict):
            raise ApiError("InvalidParameter", "the body must be a JSON object")
        unknown = sorted(set(params) - self._parameters)
        if unknown:
            raise ApiError("UnknownParameter", f"DescribeBillDetail has no parameter {unknown[0]!r}")
        return params

    # --- DescribeBillDetail -------------------------------------------------------

    def _describe_bill_detail(self, p: Mapping[str, Any]) -> dict[str, Any]:
        offset, limit = p.get("Offset"), p.get("Limit")
        if not isinstance(offset, int) or offset < 0:
            raise ApiError("InvalidParameterValue.Offset", "Offset is required: a non-negative integer")
        if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ApiError("InvalidParameterValue.Limit", f"Limit is required: 1 to {MAX_LIMIT}")
        month = _month_of(p)
        if p.get("PeriodType") not in (None, "byUsedTime", "byPayTime"):
            raise ApiError("InvalidParameterValue.PeriodType", "PeriodType is byUsedTime or byPayTime")
        if p.get("PayMode") not in (None, "prePay", "postPay"):
            raise ApiError("InvalidParameterValue.PayMode", "PayMode is prePay or postPay")
        rows = self._rows(month)
        rows = [r for r in rows
                if (p.get("BusinessCode") in (None, "", r["BusinessCode"]))
                and (p.get("PayMode") in (None, "", "postPay"))
                and (p.get("ResourceId") in (None, "", r["ResourceId"]))]
        return {"DetailSet": rows[offset:offset + limit], "Total": len(rows),
                "Context": str(offset + limit) if offset + limit < len(rows) else ""}

    def _rows(self, month: str) -> list[dict[str, Any]]:
        # A page at a time walks the same month: work it out once per state of the cloud (its time, its machines).
        key = (month, self.cloud.now(), len(self.cloud.all_instances()))
        if self._cached is None or self._cached[0] != key:
            charges = hourly_charges(self.cloud, TENCENT_RULES, month=month, reservations=self._reservations)
            self._cached = (key, [self._row(c, n) for n, c in enumerate(charges, 1)])
        rows = list(self._cached[1])
        for planted in self._planted:
            if planted.month == month:
                rows.append(self._planted_row(planted, len(rows) + 1))
        return rows

    def _row(self, c: Charge, number: int) -> dict[str, Any]:
        inst = c.instance
        spot = inst.capacity is Capacity.spot
        hours = (c.seconds / Decimal(3600)).quantize(Decimal("0.000001"))
        component = {
            "ComponentCodeName": "Instance", "ItemCodeName": f"CVM {inst.instance_type}",
            "SinglePrice": str(c.unit_price), "SpecifiedPrice": str(c.unit_price),
            "PriceUnit": f"{self.currency}/hour", "UsedAmount": "1", "UsedAmountUnit": "unit",
            "RealTotalMeasure": str(hours), "DeductedMeasure": "0",
            "TimeSpan": str(hours), "TimeUnitName": "hour", "Cost": str(c.gross.quantize(_CENT)),
            "Discount": "1", "ReduceType": "discount", "RealCost": str(c.amount.quantize(_CENT)),
            "VoucherPayAmount": "0", "CashPayAmount": str(c.amount.quantize(_CENT)), "IncentivePayAmount": "0",
            "TransferPayAmount": "0", "ItemCode": "sv_cvm_instance", "ComponentCode": "v_cvm_instance",
            "ContractPrice": str(c.unit_price), "InstanceType": "spot" if spot else ("ri" if c.deducted else ""),
            "RiTimeSpan": str(hours if c.deducted else Decimal(0)),
            "OriginalCostWithRI": str(c.deducted.quantize(_CENT)), "SPDeductionRate": "0", "SPDeduction": "0",
            "OriginalCostWithSP": "0", "BlendedDiscount": "1", "ComponentConfig": [],
        }
        return self._shape(resource_id=self._resource_id(inst.instance_id), tags=inst.tags, region=inst.region,
                           zone=inst.zone, begin=c.begin, end=c.end, month=c.month, spot=spot, components=[component],
                           number=number)

    def _planted_row(self, p: PlantedRow, number: int) -> dict[str, Any]:
        start = datetime.strptime(p.month, "%Y-%m").replace(tzinfo=timezone.utc)
        component = {"ComponentCodeName": "Instance", "ItemCodeName": "CVM", "Cost": str(p.amount),
                     "RealCost": str(p.amount), "CashPayAmount": str(p.amount), "Discount": "1",
                     "OriginalCostWithRI": "0", "RiTimeSpan": "0", "TimeUnitName": "hour", "ComponentConfig": []}
        return self._shape(resource_id=p.resource_id, tags=p.tags, region=p.region, zone=f"{p.region}-3",
                           begin=start, end=start + timedelta(hours=1), month=p.month, spot=False,
                           components=[component], number=number)

    def _shape(self, *, resource_id: str, tags: Mapping[str, str], region: str, zone: str, begin: datetime,
               end: datetime, month: str, spot: bool, components: list[dict[str, Any]],
               number: int) -> dict[str, Any]:
        local_end = end.astimezone(_BEIJING)
        return {
            "BusinessCodeName": "Cloud Virtual Machine", "ProductCodeName": "CVM - GPU",
            "PayModeName": "Pay-As-You-Go", "ProjectName": "Default Project", "RegionName": region,
            "ZoneName": zone, "ResourceId": resource_id, "ResourceName": "",
            "ActionTypeName": "Spot hourly settlement" if spot else "Pay-as-you-go hourly settlement",
            "OrderId": "", "BillId": f"{month.replace('-', '')}{number:08d}",
            "PayTime": local_end.strftime(_TIME),
            "FeeBeginTime": begin.astimezone(_BEIJING).strftime(_TIME), "FeeEndTime": local_end.strftime(_TIME),
            "ComponentSet": components, "PayerUin": PAYER_UIN, "OwnerUin": PAYER_UIN, "OperateUin": PAYER_UIN,
            "Tags": [{"TagKey": k, "TagValue": v} for k, v in tags.items()],
            "BusinessCode": "p_cvm", "ProductCode": "sp_cvm_gpu",
            "ActionType": "spotpay_deduct_h" if spot else "postpay_deduct_h",
            "RegionId": region, "ProjectId": 0, "PriceInfo": [], "AssociatedOrder": None,
            "Formula": "", "FormulaUrl": "", "BillDay": f"{local_end.day:02d}", "BillMonth": month,
            "Id": str(number), "RegionType": "", "RegionTypeName": "",
        }


def _month_of(p: Mapping[str, Any]) -> str:
    begin, end = p.get("BeginTime"), p.get("EndTime")
    if begin or end:
        if not (isinstance(begin, str) and isinstance(end, str)) or begin[:7] != end[:7]:
            raise ApiError("InvalidParameterValue.BeginTime", "BeginTime and EndTime go together, in one month")
        return begin[:7]
    month = p.get("Month")
    if not isinstance(month, str):
        raise ApiError("MissingParameter", "Month, or BeginTime and EndTime, is required")
    try:
        datetime.strptime(month, "%Y-%m")
    except ValueError:
        raise ApiError("InvalidParameterValue.Month", "Month is yyyy-mm") from None
    return month
