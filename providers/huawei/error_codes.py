"""Every error code Huawei documents for the calls the Huawei adapter makes, and the class each one is.

This table is the adapter's mapping (``providers.huawei.errors.translate_error`` reads it) and the
source of ``docs/error-codes.md`` (``scripts/error-codes`` writes that page from it; a test fails when
the page is stale). It imports no SDK.

Huawei documents ECS's codes on one page for every ECS call (the ECS API reference, appendix "Error
Codes"), and the API gateway's ``APIGW.xxxx`` codes on another (the API signing guide, "Error Codes"),
which any call may answer. Neither says which call answers which code, so, as for EC2, ``DOCUMENTED``
holds under ``common`` the codes any ECS call may answer (the gateway's, the account's, the system's)
and under each call the adapter makes the codes of the ECS page that concern it. Tags travel in the
create body (``server_tags``) and in the listing's ``tags`` filter, so the tag codes sit under the
create. Codes of features the adapter never asks for (EIPs, data disks, resizing, passwords, server
groups, scheduled deletion ...) are left out. ``ALSO_KNOWN`` holds codes the adapter meets that those
pages lack, each with where it comes from. A documented code in no class set below is the request's
own fault: ``InvalidRequest``.

Two codes read differently by HTTP status: ``APIGW.0201`` is a bad request at 4xx but the gateway's
"backend unavailable" / "backend timeout" at 502 / 504 (``classify`` takes the status for it), and
``Common.0024`` (flow control) arrives with HTTP 202, which the SDK does not treat as an error (the
adapter reads the error out of the body).
"""

from __future__ import annotations

from collections.abc import Mapping

from providers.code_table import ClassSets, codes_of, listed_class
from scheduler.errors import (
    AuthFailed,
    BillingStopped,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    ResourceBusy,
    Throttled,
)

__all__ = ["ALSO_KNOWN", "BY_STATUS", "CLASS_SETS", "CREATE_FAILED", "DOCUMENTED", "all_codes", "classify",
           "documented_class"]

_GATEWAY = frozenset({
    "APIGW.0101", "APIGW.0103", "APIGW.0104", "APIGW.0105", "APIGW.0106", "APIGW.0201", "APIGW.0301",
    "APIGW.0302", "APIGW.0303", "APIGW.0304", "APIGW.0305", "APIGW.0306", "APIGW.0307", "APIGW.0308",
    "APIGW.0310", "APIGW.0311", "APIGW.0401", "APIGW.0402", "APIGW.0404", "APIGW.0501", "APIGW.0502",
    "APIGW.0601", "APIGW.0602", "APIGW.0605", "APIGW.0606", "APIGW.0607", "APIGW.0608", "APIGW.0609",
    "APIGW.0610", "APIGW.0611", "APIGW.0612", "APIGW.0613", "APIGW.0705", "APIGW.0801", "APIGW.0802",
})

DOCUMENTED: Mapping[str, frozenset[str]] = {
    "common": _GATEWAY | frozenset({
        "Ecs.0000", "Ecs.0002", "Ecs.0003", "Ecs.0004", "Ecs.0005", "Ecs.0023", "Ecs.0110", "Ecs.0614",
        "Ecs.0615", "Ecs.1000", "Ecs.1001", "Ecs.1002", "Ecs.1100", "Ecs.1200", "Ecs.1201", "Ecs.1300",
        "Pdp.0001", "Common.0001", "Common.0002", "Common.0013", "Common.0018", "Common.0024", "Common.1503",
    }),
    # POST /v1/{project_id}/cloudservers (pay-per-use and spot; CreateServers' v1 form), its answer or its job.
    "CreatePostPaidServers": frozenset({
        "Ecs.0001", "Ecs.0006", "Ecs.0007", "Ecs.0008", "Ecs.0012", "Ecs.0014", "Ecs.0015", "Ecs.0016",
        "Ecs.0018", "Ecs.0019", "Ecs.0021", "Ecs.0022", "Ecs.0027", "Ecs.0028", "Ecs.0029", "Ecs.0031",
        "Ecs.0032", "Ecs.0038", "Ecs.0043", "Ecs.0044", "Ecs.0058", "Ecs.0064", "Ecs.0066", "Ecs.0067",
        "Ecs.0068", "Ecs.0069", "Ecs.0070", "Ecs.0071", "Ecs.0074", "Ecs.0075", "Ecs.0089", "Ecs.0090",
        "Ecs.0201", "Ecs.0202", "Ecs.0203", "Ecs.0204", "Ecs.0212", "Ecs.0217", "Ecs.0219", "Ecs.0302",
        "Ecs.0303", "Ecs.0304", "Ecs.0308", "Ecs.0310", "Ecs.0311", "Ecs.0314", "Ecs.0320", "Ecs.0322",
        "Ecs.0319", "Ecs.0401", "Ecs.0402", "Ecs.0403", "Ecs.0405", "Ecs.0701", "Ecs.0702", "Ecs.0703",
        "Ecs.0707", "Ecs.0902", "Ecs.0903", "Ecs.0905", "Ecs.0906", "Ecs.0907", "Ecs.0908", "Ecs.0909",
        "Ecs.0913", "Ecs.0914", "Ecs.0915", "Ecs.7000",
    }),
    "ListServersDetails": frozenset({"Ecs.0301"}),
    "DeleteServers": frozenset({
        "Ecs.0073", "Ecs.0100", "Ecs.0114", "Ecs.0118", "Ecs.0501", "Ecs.0502", "Ecs.0503", "Ecs.0507",
        "Ecs.0513", "Ecs.0603", "Ecs.0605", "Ecs.0611",
    }),
    "BatchStopServers": frozenset({"Ecs.0100", "Ecs.0114", "Ecs.0118", "Ecs.0603", "Ecs.0605", "Ecs.0611"}),
    "BatchStartServers": frozenset({
        "Ecs.0100", "Ecs.0114", "Ecs.0118", "Ecs.0226", "Ecs.0603", "Ecs.0605", "Ecs.0611",
    }),
    "ShowJob": frozenset({"Common.0011", "Common.0020", "Common.0021", "Common.0022", "Common.0025",
                          "Common.0999"}),
    "ListFlavors": frozenset({"Ecs.0303", "Ecs.0320", "Common.0026"}),
}

ALSO_KNOWN: Mapping[str, str] = {
    "Ecs.0122": "an X-Client-Token reused with other parameters: the ECS idempotency page names no code for "
                "it; the emulator answers this one and the adapter then looks the intent up by its tag",
    "Ecs.0123": "an X-Client-Token that is not a UUID (the emulator's answer; the idempotency page asks for a "
                "UUID and names no code)",
    "RequestTimeout": "the SDK: RequestTimeoutException, the request got no answer in time",
    "CallTimeoutException": "the SDK: the call timed out",
    "RetryOutageException": "the SDK: too many redirects",
    "ConnectionException": "the SDK: the connection failed or was closed without an answer",
    "HostUnreachableException": "the SDK: the endpoint's host name does not resolve",
    "SslHandShakeException": "the SDK: the TLS handshake failed",
}

# A create that failed inside ECS (its NIC, disks or server could not be made, or were rolled back): ECS
# rolls a failed create back, so nothing was made and another offer may work. Not retryable: the same
# request with the same X-Client-Token would be answered with the same failed job.
CREATE_FAILED = frozenset({
    "Ecs.0201", "Ecs.0202", "Ecs.0203", "Ecs.0204", "Ecs.0212", "Ecs.0217", "Ecs.0219", "Ecs.0401",
    "Ecs.0402", "Ecs.0403", "Ecs.0405",
})
# Not here, try elsewhere: the flavor or its disk type is sold out, the subnet has no address left,
# the flavor is gone from sale, or the spot bid is under the market.
_NO_CAPACITY = CREATE_FAILED | frozenset({
    "Ecs.0012", "Ecs.0018", "Ecs.0019", "Ecs.0044", "Ecs.0319", "Ecs.0703",
})
_QUOTA = frozenset({"Ecs.0001", "Ecs.0021", "Ecs.0022", "Ecs.0913", "APIGW.0501"})
# The account cannot pay: no balance, no budget left, no payment method, an order it cannot pay.
_BILLING = frozenset({"Ecs.0067", "Ecs.0069", "Ecs.0070", "Ecs.7000", "APIGW.0502"})
_AUTH = frozenset({
    "Ecs.0003", "Ecs.0004", "Ecs.0023", "Ecs.0066", "Ecs.0068", "Ecs.0071", "Ecs.0110", "Pdp.0001",
    "Common.0013", "Common.0018", "APIGW.0301", "APIGW.0302", "APIGW.0303", "APIGW.0304", "APIGW.0305",
    "APIGW.0306", "APIGW.0307", "APIGW.0310", "APIGW.0311", "APIGW.0401", "APIGW.0402", "APIGW.0801",
    "APIGW.0802",
})
_THROTTLED = frozenset({"APIGW.0308", "Common.0024", "Common.1503"})
# Another command or backup holds the server: the same call works once it ends.
_BUSY = frozenset({"Ecs.0073", "Ecs.0603"})
_NOT_FOUND = frozenset({"Ecs.0114", "Ecs.0614"})
_UNAVAILABLE = frozenset({
    "Ecs.0002", "Ecs.0226", "Ecs.0301", "Ecs.0302", "Ecs.0303", "Ecs.0304", "Ecs.0308", "Ecs.0310",
    "Ecs.0311", "Ecs.0320", "Ecs.0322", "Ecs.0501", "Ecs.0502", "Ecs.0503", "Ecs.0507", "Ecs.0615",
    "Ecs.0701", "Ecs.0702", "Ecs.1000", "Ecs.1001", "Ecs.1002", "Ecs.1100", "Ecs.1200", "Ecs.1201",
    "Ecs.1300", "Common.0001", "Common.0020", "Common.0021", "Common.0022", "Common.0025", "Common.0026",
    "Common.0999", "APIGW.0103", "APIGW.0104", "APIGW.0105", "APIGW.0404", "APIGW.0601", "APIGW.0605",
    "APIGW.0606", "APIGW.0608", "APIGW.0609", "APIGW.0610", "APIGW.0611", "APIGW.0613", "APIGW.0705",
    "RequestTimeout", "CallTimeoutException", "RetryOutageException", "ConnectionException",
    "HostUnreachableException", "SslHandShakeException",
})
# Codes whose class is the HTTP status's: at 5xx the gateway's backend failed, below it the request did.
BY_STATUS = frozenset({"APIGW.0201"})

CLASS_SETS: ClassSets = (
    (NoCapacity, _NO_CAPACITY),
    (QuotaExceeded, _QUOTA),
    (BillingStopped, _BILLING),
    (AuthFailed, _AUTH),
    (Throttled, _THROTTLED),
    (ResourceBusy, _BUSY),
    (NotFound, _NOT_FOUND),
    (ProviderUnavailable, _UNAVAILABLE),
)


def all_codes() -> list[str]:
    """Every code in the table (documented and also known), sorted."""
    return codes_of(DOCUMENTED, ALSO_KNOWN)


def documented_class(code: str) -> type[ProviderError] | None:
    """The class of a code this table holds (at a 4xx status); None for a code it does not."""
    return listed_class(code, CLASS_SETS, DOCUMENTED, ALSO_KNOWN)


def classify(code: str, status: int | None) -> type[ProviderError]:
    """Our class for a Huawei code (the table's first, then its family) and the answer's HTTP status."""
    if code in BY_STATUS and status is not None and status >= 500:
        return ProviderUnavailable
    known = documented_class(code)
    if known is not None:
        return known
    if status == 429 or code == "429":
        return Throttled  # the SDK's own code when the answer had no error body
    if code.startswith("APIGW.03"):
        return AuthFailed
    if status in (401, 403):
        return AuthFailed
    if status == 404:
        return NotFound
    if status is not None and status >= 500:
        return ProviderUnavailable
    if "." not in code and code.endswith("Exception"):
        return ProviderUnavailable  # not a Huawei code: the SDK could not get an answer
    return InvalidRequest
