"""AWS's own bill for a month: Cost Explorer ``GetCostAndUsage`` (boto3), grouped by gpusched's tags.

Why ``GetCostAndUsage`` and not ``GetCostAndUsageWithResources``: the latter is the only Cost Explorer
call that names resources (instance ids), but it covers the last 14 days only, needs resource-level data
switched on in Cost Explorer's settings (an opt-in that is itself billed) and a filter on every call. A
month's reconciliation needs the whole month, after it ended. So the month is asked of
``GetCostAndUsage`` and each charge is attributed by the tags gpusched puts on every launch: grouped by
the ``gpusched:instance`` tag (our instance id) and the ``gpusched:cluster`` tag (which installation), the
two groupings Cost Explorer allows. Tags appear there only once they are activated as cost allocation
tags (Billing console, Cost allocation tags), and only for usage after that: the README says so.

The request: ``TimePeriod`` = [first day of the month, first day of the next) (End exclusive; a month
still running ends tomorrow, since Cost Explorer refuses dates past it), ``Granularity=MONTHLY``,
``Metrics=["UnblendedCost"]`` (the usage as charged, a reservation's covered hours at 0), ``Filter`` on
``SERVICE = Amazon Elastic Compute Cloud - Compute``, ``GroupBy`` the two tags, and ``NextPageToken``
until none comes back. A group's ``Keys`` read ``"gpusched:instance$<value>"`` (``"...$"`` for usage
without the tag: machines gpusched did not launch, or usage before the tag was activated). Each group is
one ``BillLine`` with no instance id, its tags, its ``UnblendedCost`` in its ``Unit``, and ``Estimated``
as the bill's own word that the month may still change.

botocore's retries are off (``total_max_attempts: 1``, as in the adapter); each page is tried again by
``providers.retry`` on throttling (``LimitExceededException``, ``ThrottlingException``) and 5xx answers.
A refused key or signature is ``AuthFailed``; a missing permission says the policy needs
``ce:GetCostAndUsage``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from random import Random
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.client import _reveal
from providers.aws.config import NAME, AwsConfig
from providers.aws.errors import translate_error
from providers.base import TAG_INSTANCE, TAG_MANAGED, AuthFailed, ProviderError, Throttled
from providers.bills import BillLine, decimal_of, month_days, retrying
from scheduler.clock import Clock
from scheduler.errors import UserError
from scheduler.money import CURRENCIES, Money

__all__ = ["CE_FIX", "EC2_COMPUTE", "METRIC", "AwsBills", "CostExplorerClient", "from_config",
           "make_ce_client"]

EC2_COMPUTE = "Amazon Elastic Compute Cloud - Compute"
METRIC = "UnblendedCost"
GROUP_TAGS = (TAG_INSTANCE, TAG_MANAGED)
CE_FIX = (
    "check GPUSCHED_AWS_ACCESS_KEY_ID / GPUSCHED_AWS_SECRET_ACCESS_KEY (or the role), and that its IAM policy "
    "allows ce:GetCostAndUsage"
)
_THROTTLING = ("LimitExceededException", "ThrottlingException", "Throttling", "RequestLimitExceeded")
_XML_CODE = re.compile(r"<Code>([^<]+)</Code>")
_XML_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")


class CostExplorerClient(Protocol):
    """The part of a boto3 Cost Explorer client this reader uses."""

    def get_cost_and_usage(self, **kwargs: Any) -> dict[str, Any]: ...


def make_ce_client(config: AwsConfig, session: boto3.session.Session | None = None) -> CostExplorerClient:
    client: CostExplorerClient = (session or boto3.session.Session()).client(
        "ce",
        region_name=config.cost_explorer_region,
        endpoint_url=config.endpoint_url,
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=_reveal(config.secret_access_key),
        aws_session_token=_reveal(config.session_token),
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=config.connect_timeout_seconds,
            read_timeout=config.read_timeout_seconds,
            user_agent_extra="gpusched",
        ),
    )
    return client


def from_config(config: AwsConfig, clock: Clock) -> AwsBills:
    return AwsBills(make_ce_client(config), clock)


class AwsBills:
    """``providers.bills.BillReader`` for AWS: one month of EC2 compute cost per gpusched instance tag."""

    name = NAME

    def __init__(self, client: CostExplorerClient, clock: Clock, *, rng: Random | None = None,
                 attempts: int = 5) -> None:
        self._client = client
        self._clock = clock
        self._retry: Callable[[Callable[[], dict[str, Any]]], dict[str, Any]] = retrying(
            clock, rng or Random(0), attempts=attempts)

    def read(self, month: str) -> list[BillLine]:
        start, end = month_days(month)
        tomorrow = (self._clock.now().date() + timedelta(days=1)).isoformat()
        if start >= tomorrow:
            raise UserError(f"{month} has not begun: there is no AWS bill for it yet", fix="ask for a month that began")
        request: dict[str, Any] = {
            "TimePeriod": {"Start": start, "End": min(end, tomorrow)},
            "Granularity": "MONTHLY",
            "Metrics": [METRIC],
            "Filter": {"Dimensions": {"Key": "SERVICE", "Values": [EC2_COMPUTE]}},
            "GroupBy": [{"Type": "TAG", "Key": key} for key in GROUP_TAGS],
        }
        sums: dict[tuple[tuple[str, str], ...], tuple[Decimal, str, bool]] = {}
        token = ""
        while True:
            page = self._retry(lambda: self._call(dict(request, NextPageToken=token) if token else request))
            for period in page.get("ResultsByTime") or []:
                estimated = bool(period.get("Estimated"))
                for group in period.get("Groups") or []:
                    tags = _tags(group.get("Keys") or [])
                    cost = (group.get("Metrics") or {}).get(METRIC) or {}
                    amount = decimal_of(cost.get("Amount", "0"), what=METRIC, cloud=NAME)
                    unit = str(cost.get("Unit") or "USD").upper()
                    key = tuple(sorted(tags.items()))
                    before, before_unit, before_estimated = sums.get(key, (Decimal(0), unit, False))
                    if before_unit != unit:
                        raise ProviderError(f"the AWS bill mixes {before_unit} and {unit} for one group",
                                            provider=NAME, code="MixedCurrency")
                    sums[key] = (before + amount, unit, before_estimated or estimated)
            token = str(page.get("NextPageToken") or "")
            if not token:
                break
        lines = []
        for key, (amount, unit, estimated) in sums.items():
            if unit not in CURRENCIES:
                raise ProviderError(f"the AWS bill is in {unit}; gpusched reads CNY and USD bills", provider=NAME,
                                    code="UnsupportedCurrency")
            lines.append(BillLine(cloud=NAME, month=month, instance_id=None, tags=dict(key),
                                  amount=Money(amount=amount, currency=unit), description=EC2_COMPUTE,
                                  estimated=estimated))
        return lines

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._client.get_cost_and_usage(**request)
        except ClientError as exc:
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise translate_error(exc, operation="GetCostAndUsage", region="Cost Explorer") from exc


def _tags(keys: list[str]) -> dict[str, str]:
    """Cost Explorer's group keys ``"tag$value"`` as tags; an empty value (untagged usage) is left out."""
    tags = {}
    for key in keys:
        name, sep, value = str(key).partition("$")
        if sep and value:
            tags[name] = value
    return tags


def _translate(exc: ClientError) -> ProviderError:
    error = exc.response.setdefault("Error", {})
    code = str(error.get("Code") or "")
    body = str(error.get("Message") or "")
    found = _XML_CODE.search(body)
    if found and (not code or code.isdigit()):
        # A query-protocol (XML) error body where Cost Explorer's JSON protocol expected JSON (IAM's
        # authentication answers so, and moto does): botocore leaves the HTTP status as the code.
        message = _XML_MESSAGE.search(body)
        error["Code"] = found.group(1)
        error["Message"] = message.group(1) if message else found.group(1)
    translated = translate_error(exc, operation="GetCostAndUsage", region="Cost Explorer")
    if str(error.get("Code")) in _THROTTLING and not isinstance(translated, Throttled):
        translated = Throttled(translated.message, provider=NAME, code=translated.code,
                               request_id=translated.request_id)
    if isinstance(translated, AuthFailed) or str(error.get("Code")) in ("AccessDeniedException", "AccessDenied"):
        translated = AuthFailed(translated.message, provider=NAME, code=translated.code,
                                request_id=translated.request_id, fix=CE_FIX)
    return translated
