"""Tencent Cloud's own bill for a month: Billing ``DescribeBillDetail`` (tencentcloud-sdk-python-billing).

One request per page: ``Month`` (yyyy-mm), ``BusinessCode=p_cvm`` (CVM), ``PayMode=postPay`` (the hours
gpusched pays for: pay-as-you-go and spot), ``NeedRecordNum=1`` (so ``Total`` comes back), ``Offset`` from
0 and ``Limit`` up to 100 (older references cap it there), until ``Total`` rows have come (or a page comes
back empty). A row is one settlement (hourly, for pay-as-you-go), so an instance has many: they are added
up per ``ResourceId`` into one ``BillLine``, its amount the sum of every component's ``RealCost`` (after
discounts and what reservations and savings plans paid), its tags the rows' ``Tags``. The rows carry no
currency: the account's site decides it (``TencentConfig.billing_currency``: international USD, China CNY).

The SDK's retries are off; each page is tried again by ``providers.retry`` on ``RequestLimitExceeded`` and
on network or server errors, on the injected clock. A refused key or signature is ``AuthFailed``, with the
fix for a missing permission: the CAM user needs ``billing:DescribeBillDetail``.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from random import Random
from typing import Any

from tencentcloud.billing.v20180709 import billing_client
from tencentcloud.billing.v20180709 import models as billing_models
from tencentcloud.common import credential
from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile

from providers.base import AuthFailed, ProviderUnavailable
from providers.bills import BillLine, check_month, decimal_of, retrying
from providers.tencent.config import NAME, TencentConfig
from providers.tencent.errors import translate_error
from scheduler.clock import Clock
from scheduler.money import Money

__all__ = ["BILLING_FIX", "MAX_LIMIT", "TencentBills", "from_config", "make_billing_client"]

MAX_LIMIT = 100
BILLING_FIX = (
    "check GPUSCHED_TENCENT_SECRET_ID / GPUSCHED_TENCENT_SECRET_KEY, and grant the CAM user the billing "
    "action gpusched calls: billing:DescribeBillDetail"
)


def make_billing_client(config: TencentConfig) -> billing_client.BillingClient:
    """A real BillingClient with the SDK's retries off; ``config.billing_endpoint`` overrides the host."""
    http = HttpProfile(protocol=config.protocol, endpoint=config.billing_endpoint or None, reqMethod="POST",
                       reqTimeout=config.request_timeout_seconds, keepAlive=True)
    profile = ClientProfile(httpProfile=http, language="en-US", retryer=None)
    cred = credential.Credential(config.secret_id.get_secret_value(), config.secret_key.get_secret_value())
    return billing_client.BillingClient(cred, "", profile)  # Billing takes no region


def from_config(config: TencentConfig, clock: Clock) -> TencentBills:
    return TencentBills(make_billing_client(config), config, clock)


class TencentBills:
    """``providers.bills.BillReader`` for Tencent Cloud: one month of CVM pay-as-you-go charges per instance."""

    name = NAME

    def __init__(self, client: billing_client.BillingClient, config: TencentConfig, clock: Clock, *,
                 page_size: int = MAX_LIMIT, rng: Random | None = None, attempts: int = 5) -> None:
        if not 1 <= page_size <= MAX_LIMIT:
            raise ValueError(f"page_size must be between 1 and {MAX_LIMIT}")
        self._client = client
        self._config = config
        self._page_size = page_size
        self._retry: Callable[[Callable[[], Any]], Any] = retrying(clock, rng or Random(0), attempts=attempts)

    def read(self, month: str) -> list[BillLine]:
        check_month(month)
        amounts: dict[str, Decimal] = {}
        tags: dict[str, dict[str, str]] = {}
        regions: dict[str, str] = {}
        offset = 0
        while True:
            response = self._retry(lambda: self._page(month, offset))
            rows = list(response.DetailSet or [])
            for row in rows:
                resource = str(row.ResourceId or "")
                cost = sum((decimal_of(c.RealCost or 0, what="RealCost", cloud=NAME) for c in row.ComponentSet or []),
                           Decimal(0))
                amounts[resource] = amounts.get(resource, Decimal(0)) + cost
                tags.setdefault(resource, {}).update({t.TagKey: t.TagValue or "" for t in row.Tags or [] if t.TagKey})
                regions.setdefault(resource, str(row.RegionId or row.RegionName or ""))
            offset += len(rows)
            if not rows or offset >= int(response.Total or 0):
                break
        return [
            BillLine(cloud=NAME, month=month, instance_id=resource or None, tags=tags[resource],
                     amount=Money(amount=amount, currency=self._config.billing_currency), region=regions[resource],
                     description="p_cvm postPay")
            for resource, amount in amounts.items()
        ]

    def _page(self, month: str, offset: int) -> billing_models.DescribeBillDetailResponse:
        request = billing_models.DescribeBillDetailRequest()
        request.Offset = offset
        request.Limit = self._page_size
        request.Month = month
        # No PeriodType: older references required it, the current SDK marks it deprecated (the bill's own
        # period applies).
        request.BusinessCode = "p_cvm"
        request.PayMode = "postPay"
        request.NeedRecordNum = 1
        try:
            return self._client.DescribeBillDetail(request)
        except TencentCloudSDKException as exc:
            error = translate_error(exc, action="DescribeBillDetail", region="Billing")
            if isinstance(error, AuthFailed) and ("UnauthorizedOperation" in error.code or
                                                   error.code == "AuthFailure.UnauthorizedOperation"):
                error.fix = BILLING_FIX
            raise error from exc
        except OSError as exc:
            raise ProviderUnavailable(f"Tencent Cloud DescribeBillDetail failed: {exc}", provider=NAME) from exc
