"""The Alibaba SDK's exceptions as the project's ``ProviderError`` classes, ECS's code and request id kept.

Which class each ECS code is lives in ``providers.alibaba.error_codes`` (every code the ECS reference
names for the calls this adapter makes; docs/error-codes.md is written from it).
"""

from __future__ import annotations

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException

from providers.alibaba.config import NAME
from providers.alibaba.error_codes import classify
from providers.base import (
    AuthFailed,
    BillingStopped,
    ProviderError,
    QuotaExceeded,
)
from providers.redact import without_credentials

__all__ = ["translate_error"]

_CREDENTIALS_FIX = (
    "check GPUSCHED_ALIBABA_ACCESS_KEY_ID and GPUSCHED_ALIBABA_ACCESS_KEY_SECRET, and that the key's RAM "
    "policy allows ecs:RunInstances, DescribeInstances, StopInstances, StartInstances, DeleteInstances, "
    "DescribePrice, DescribeSpotPriceHistory and DescribeAvailableResource"
)
_FIXES: dict[str, str] = {
    "InvalidUser.PassRoleForbidden": (
        "the key may not pass GPUSCHED_ALIBABA_RAM_ROLE_NAME to an instance: grant it ram:PassRole on that role"
    ),
    "InvalidRamRole.NotFound": "GPUSCHED_ALIBABA_RAM_ROLE_NAME names no RAM role of this account",
    "InvalidRamRole.NotEcsRole": (
        "GPUSCHED_ALIBABA_RAM_ROLE_NAME must be a role ECS may assume (trusting ecs.aliyuncs.com)"
    ),
    "RealNameAuthenticationError": "complete the account's real-name verification in the Alibaba Cloud console",
    "SDK.InvalidRegionId": "check GPUSCHED_ALIBABA_REGIONS (and GPUSCHED_ALIBABA_ENDPOINT)",
    "SDK.EndpointResolvingError": "check GPUSCHED_ALIBABA_REGIONS (and GPUSCHED_ALIBABA_ENDPOINT)",
    "InvalidRegionId.NotFound": "check GPUSCHED_ALIBABA_REGIONS (and GPUSCHED_ALIBABA_ENDPOINT)",
}
_CLASS_FIXES: dict[type[ProviderError], str] = {
    AuthFailed: _CREDENTIALS_FIX,
    QuotaExceeded: "raise the quota in Alibaba Cloud's Quota Center, or release unused instances",
    BillingStopped: (
        "top up the Alibaba Cloud account (or settle the overdue payment); nothing launches there until then"
    ),
}


def _fix(code: str, cls: type[ProviderError]) -> str | None:
    if code in _FIXES:
        return _FIXES[code]
    if code.startswith("InvalidTimeStamp") or code == "IllegalTimestamp":
        return "synchronise this machine's clock (NTP): requests are signed with its time"
    return _CLASS_FIXES.get(cls)


def translate_error(exc: ServerException | ClientException, action: str, *,
                    retry_after: float | None = None) -> ProviderError:
    """An SDK exception as the project's error, vendor code and request id kept."""
    if isinstance(exc, ServerException):
        code, message = exc.get_error_code() or "", exc.get_error_msg() or ""
        status, request_id = exc.get_http_status(), exc.get_request_id() or ""
    else:
        code, message, status, request_id = exc.get_error_code() or "", exc.get_error_msg() or "", None, ""
    message = without_credentials(message)  # an HTTP error quotes the signed URL: key id and signature
    cls = classify(code, status)
    if cls is AuthFailed:
        text = f"Alibaba Cloud refused the credentials on {action}: {message} ({code})"
    else:
        text = f"Alibaba Cloud {action} failed: {message} ({code})"
    return cls(text, provider=NAME, code=code, request_id=request_id, fix=_fix(code, cls),
               retry_after=retry_after if cls.retryable else None)
