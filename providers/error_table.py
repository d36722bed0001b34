"""docs/error-codes.md, written from the adapters' own mapping tables so the page cannot drift.

``render()`` is the whole page. ``scripts/error-codes`` writes it; ``tests/providers/test_error_codes.py``
fails when the file in docs/ differs from what the tables say now. The tables
(``providers/<cloud>/error_codes.py``) import no SDK, so neither does this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType

from providers.alibaba import error_codes as alibaba
from providers.aws import error_codes as aws
from providers.huawei import error_codes as huawei
from providers.tencent import error_codes as tencent
from scheduler.errors import ProviderError

__all__ = ["CLOUDS", "CloudTable", "render"]

# What each class makes the daemon do, in the words the page uses.
MEANING: Mapping[str, str] = {
    "NoCapacity": "not here, try elsewhere: the offer is avoided for a while and the job planned again",
    "QuotaExceeded": "the account's quota forbids it: the offer is avoided, the job planned elsewhere",
    "BillingStopped": "the account cannot pay (balance, arrears): nothing launches there until someone pays",
    "AuthFailed": "credentials or permissions: the call is not retried; the fix names the setting",
    "Throttled": "too many calls: retried with back-off, at least the Retry-After the cloud names",
    "ResourceBusy": "another operation holds the resource: retried with back-off",
    "NotFound": "no such instance: a terminate of it is success",
    "ProviderUnavailable": "the cloud is down or its answer was lost: retried; a launch keeps its token",
    "InvalidRequest": "the request itself is wrong: not retried; a launch gives the offer up",
}


@dataclass(frozen=True)
class CloudTable:
    title: str
    module: ModuleType
    source: str  # where DOCUMENTED comes from, in words
    classify_unknown: str  # the rules for codes the table does not hold, in words

    @property
    def documented(self) -> Mapping[str, frozenset[str]]:
        return self.module.DOCUMENTED  # type: ignore[no-any-return]

    @property
    def also_known(self) -> Mapping[str, str]:
        return self.module.ALSO_KNOWN  # type: ignore[no-any-return]

    @property
    def class_of(self) -> Callable[[str], type[ProviderError] | None]:
        return self.module.documented_class  # type: ignore[no-any-return]


CLOUDS: tuple[CloudTable, ...] = (
    CloudTable(
        "Alibaba Cloud ECS (API 2014-05-26)", alibaba,
        "the ECS API reference pages of RunInstances, DescribeInstances, DeleteInstance, StopInstance, "
        "StartInstances, DescribePrice, DescribeSpotPriceHistory and DescribeAvailableResource, and the common "
        "error codes of every ECS call (the adapter's plural DeleteInstances / StopInstances / StartInstances "
        "answer the codes of those pages)",
        "`*.NoStock`, `*.NotOnSale`, `*SoldOut*`: NoCapacity; `QuotaExceed*`: QuotaExceeded; `Throttling*` or "
        "HTTP 429: Throttled; `InvalidAccessKeyId*`, `Forbidden*`: AuthFailed; HTTP 5xx or the SDK's network "
        "errors: ProviderUnavailable; anything else: InvalidRequest",
    ),
    CloudTable(
        "Tencent Cloud CVM (API 2017-03-12)", tencent,
        "the per-action error lists Tencent publishes for RunInstances, DescribeInstances, TerminateInstances, "
        "StopInstances, StartInstances, InquiryPriceRunInstances and DescribeZoneInstanceConfigInfos, and the "
        "common error codes of every Tencent Cloud API 3.0 call",
        "`RequestLimitExceeded*`: Throttled; `ResourcesSoldOut.*`, `ResourceInsufficient.*`: NoCapacity; "
        "`LimitExceeded.*`: QuotaExceeded; `AuthFailure*`, `UnauthorizedOperation*`: AuthFailed; "
        "`InternalError*`, `ServiceUnavailable*` and the SDK's own errors: ProviderUnavailable; anything else: "
        "InvalidRequest. A TerminateInstances answered with a code of an instance already destroyed, in the "
        "recycle bin, on its way there or never created is success",
    ),
    CloudTable(
        "AWS EC2", aws,
        "the EC2 API's error-code page (common client errors and server errors, which any call may answer, "
        "and the action-specific codes that RunInstances, DescribeInstances, StopInstances, StartInstances, "
        "TerminateInstances and DescribeSpotPriceHistory can answer)",
        "`InvalidParameter*`: InvalidRequest; `AuthFailure*`: AuthFailed; `Insufficient*`: NoCapacity; "
        "then by HTTP status: 5xx ProviderUnavailable, 429 Throttled, 401/403 AuthFailed, other 4xx "
        "InvalidRequest",
    ),
    CloudTable(
        "Huawei Cloud ECS (API v1)", huawei,
        "the ECS API reference's appendix \"Error Codes\" (one page for every ECS call: under each call the "
        "adapter makes, CreatePostPaidServers, ListServersDetails, DeleteServers, BatchStopServers, "
        "BatchStartServers, ShowJob and ListFlavors, the codes that concern it; server tags travel in the "
        "create) and the API signing guide's \"Error Codes\" of the API gateway (`APIGW.*`, any call). "
        "`APIGW.0201` is InvalidRequest at HTTP 4xx and ProviderUnavailable at 5xx (the gateway's backend "
        "unavailable or timed out). A create job that fails is refused whatever its code (a code of another "
        "class is NoCapacity there): the same X-Client-Token would be answered with the same failed job",
        "HTTP 429: Throttled; "
        "`APIGW.03*`: AuthFailed; then by HTTP status: 401/403 AuthFailed, 404 NotFound, 5xx ProviderUnavailable; "
        "the SDK's own exceptions: ProviderUnavailable; anything else: InvalidRequest. `Common.0024` comes with "
        "HTTP 202, which the SDK takes for a success: the adapter reads the error from the body",
    ),
)


def _rows(table: CloudTable) -> list[str]:
    codes: dict[str, list[str]] = {}
    for action, names in table.documented.items():
        for code in names:
            codes.setdefault(code, []).append("every call" if action == "common" else action)
    for code in table.also_known:
        codes.setdefault(code, [])
    rows = []
    for code in sorted(codes):
        cls = table.class_of(code)
        assert cls is not None, code
        where = ", ".join(sorted(set(codes[code]), key=lambda a: (a != "every call", a)))
        note = table.also_known.get(code)
        if note:
            where = f"{where}; " if where else ""
            where += f"not in the reference: {note}"
        rows.append(f"| `{code}` | {cls.__name__} | {where} |")
    return rows


def render() -> str:
    """The whole of docs/error-codes.md."""
    out = [
        "# Cloud error codes and what gpusched makes of them",
        "",
        "Generated by `scripts/error-codes` from the adapters' mapping tables",
        "(`providers/alibaba/error_codes.py`, `providers/tencent/error_codes.py`, `providers/aws/error_codes.py`,",
        "`providers/huawei/error_codes.py`);",
        "`tests/providers/test_error_codes.py` fails when this page is stale. Do not edit it by hand.",
        "",
        "Every code a cloud documents for the calls its adapter makes is listed with the project error",
        "(`scheduler/errors.py`) it becomes. The classes mean:",
        "",
        "| class | what the daemon does |",
        "|---|---|",
    ]
    out.extend(f"| {name} | {meaning} |" for name, meaning in MEANING.items())
    for table in CLOUDS:
        out += [
            "",
            f"## {table.title}",
            "",
            f"Source: {table.source}.",
            "",
            f"A code not listed here is classified by its family: {table.classify_unknown}.",
            "",
            "| code | class | documented for |",
            "|---|---|---|",
        ]
        out.extend(_rows(table))
    return "\n".join(out) + "\n"
