"""Alibaba Cloud's own bill for a month: BSS OpenAPI ``QueryInstanceBill`` (aliyun-python-sdk-bssopenapi).

One request per page: ``BillingCycle`` = the month (YYYY-MM), ``ProductCode=ecs`` with
``SubscriptionType=PayAsYouGo`` (the hours gpusched pays for; subscriptions are bought, not run by it),
``Granularity=MONTHLY``, ``IsBillingItem=false`` (one item per instance), ``PageNum`` from 1 and
``PageSize`` up to 300, until ``TotalCount`` items have come (or a page comes back empty). Each item
is one ``BillLine``: its ``InstanceID``, the tags from its ``Tag`` text (``"key:K value:V; key:K2
value:V2"``), and ``PretaxAmount`` (what is owed before tax: the gross less coupons and the hours a
reservation or resource plan paid for) in its ``Currency``.

The SDK's retries are off (as in the adapter); each page is tried again by ``providers.retry`` on
Throttling and on the gateway's 5xx answers, on the injected clock. A refused key, a wrong secret or a
missing permission is ``AuthFailed`` with the fix: the key's RAM policy must allow reading bills
(``bss:DescribeBillList``, in the system policy ``AliyunBSSReadOnlyAccess``).

BSS is one endpoint for the whole site (``AlibabaConfig.bss_endpoint``): business.aliyuncs.com for the
China site, business.ap-southeast-1.aliyuncs.com for the international one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from random import Random
from typing import Any

from aliyunsdkbssopenapi.request.v20171214.QueryInstanceBillRequest import QueryInstanceBillRequest
from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from aliyunsdkcore.client import AcsClient

from providers.alibaba.client import make_client_factory, split_endpoint
from providers.alibaba.config import NAME, AlibabaConfig
from providers.alibaba.errors import translate_error
from providers.base import AuthFailed, ProviderError, ProviderUnavailable, Throttled
from providers.bills import BillLine, check_month, decimal_of, retrying
from scheduler.clock import Clock
from scheduler.money import CURRENCIES, Money

__all__ = ["AlibabaBills", "BSS_FIX", "MAX_PAGE_SIZE", "from_config", "parse_tags"]

MAX_PAGE_SIZE = 300
BSS_REGION = "cn-hangzhou"  # BSS is global; the SDK still signs with a region
BSS_FIX = (
    "check GPUSCHED_ALIBABA_ACCESS_KEY_ID / GPUSCHED_ALIBABA_ACCESS_KEY_SECRET, and that the key's RAM policy "
    "allows reading bills: bss:DescribeBillList (the system policy AliyunBSSReadOnlyAccess has it)"
)


def from_config(config: AlibabaConfig, clock: Clock) -> AlibabaBills:
    """The production reader: an AcsClient for BSS's endpoint, the SDK's retries off."""
    client = make_client_factory(config.model_copy(update={"endpoint": config.bss_endpoint}))(BSS_REGION)
    return AlibabaBills(client, config, clock)


def parse_tags(text: object) -> dict[str, str]:
    """BSS's tag text ``"key:K value:V; key:K2 value:V2"`` as a mapping; anything else reads as no tags."""
    tags: dict[str, str] = {}
    if not isinstance(text, str):
        return tags
    for part in text.split(";"):
        part = part.strip()
        if not part.startswith("key:"):
            continue
        key, sep, value = part[len("key:"):].partition(" value:")
        if key.strip():
            tags[key.strip()] = value.strip() if sep else ""
    return tags


class AlibabaBills:
    """``providers.bills.BillReader`` for Alibaba Cloud: one month of ECS pay-as-you-go charges per instance."""

    name = NAME

    def __init__(self, client: AcsClient, config: AlibabaConfig, clock: Clock, *,
                 page_size: int = MAX_PAGE_SIZE, rng: Random | None = None, attempts: int = 5) -> None:
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
        self._client = client
        self._config = config
        self._host, _ = split_endpoint(config.bss_endpoint)
        self._page_size = page_size
        self._retry: Callable[[Callable[[], dict[str, Any]]], dict[str, Any]] = retrying(
            clock, rng or Random(0), attempts=attempts)

    def read(self, month: str) -> list[BillLine]:
        check_month(month)
        lines: list[BillLine] = []
        page, seen = 1, 0
        while True:
            data = self._retry(lambda: self._page(month, page))
            items = _items(data)
            total = int(data.get("TotalCount") or 0)
            lines.extend(self._line(month, item) for item in items)
            seen += len(items)
            if not items or seen >= total:
                return lines
            page += 1

    # --- the wire ---------------------------------------------------------------

    def _page(self, month: str, page: int) -> dict[str, Any]:
        request = QueryInstanceBillRequest()
        request.set_BillingCycle(month)
        request.set_ProductCode("ecs")
        request.set_SubscriptionType("PayAsYouGo")
        request.set_IsBillingItem("false")
        request.set_Granularity("MONTHLY")
        request.set_PageNum(page)
        request.set_PageSize(self._page_size)
        if self._host:
            request.set_endpoint(self._host)
        request.set_protocol_type(self._config.protocol)
        request.set_accept_format("JSON")
        try:
            raw = self._client.do_action_with_exception(request)
        except (ServerException, ClientException) as exc:
            error = translate_error(exc, "QueryInstanceBill")
            if isinstance(error, AuthFailed):
                error.fix = BSS_FIX
            raise error from exc
        except OSError as exc:
            raise ProviderUnavailable(f"Alibaba Cloud QueryInstanceBill failed: {exc}", provider=NAME) from exc
        try:
            body = json.loads(raw, parse_float=Decimal)
        except (TypeError, ValueError):
            body = None
        if not isinstance(body, dict):
            raise ProviderUnavailable("Alibaba Cloud QueryInstanceBill answered with something that is not JSON",
                                      provider=NAME)
        if body.get("Success") is False:
            # BSS can answer 200 with Success=false and its own code (e.g. a throttled account).
            code, message = str(body.get("Code") or "Unknown"), str(body.get("Message") or "")
            cls = Throttled if code.startswith("Throttling") else ProviderError
            raise cls(f"Alibaba Cloud QueryInstanceBill failed: {message} ({code})", provider=NAME, code=code,
                      request_id=str(body.get("RequestId") or ""))
        data = body.get("Data")
        if not isinstance(data, dict):
            raise ProviderUnavailable("Alibaba Cloud QueryInstanceBill answered without Data", provider=NAME,
                                      request_id=str(body.get("RequestId") or ""))
        return data

    def _line(self, month: str, item: dict[str, Any]) -> BillLine:
        currency = str(item.get("Currency") or "CNY").upper()
        if currency not in CURRENCIES:
            raise ProviderError(f"the Alibaba Cloud bill is in {currency}; gpusched reads CNY and USD bills",
                                provider=NAME, code="UnsupportedCurrency")
        amount = decimal_of(item.get("PretaxAmount", 0), what="PretaxAmount", cloud=NAME)
        return BillLine(
            cloud=NAME, month=month, instance_id=str(item.get("InstanceID") or "") or None,
            tags=parse_tags(item.get("Tag")), amount=Money(amount=amount, currency=currency),
            region=str(item.get("Region") or ""),
            description=f"{item.get('ProductCode') or 'ecs'} {item.get('SubscriptionType') or ''}".strip(),
        )


def _items(data: dict[str, Any]) -> list[dict[str, Any]]:
    wrapped = data.get("Items") or {}
    found = wrapped.get("Item") if isinstance(wrapped, dict) else wrapped
    return [i for i in (found or []) if isinstance(i, dict)]
