"""The Alibaba SDK's exceptions as the project's ``ProviderError`` classes, ECS's code and request id kept."""

from __future__ import annotations

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException

from providers.alibaba.config import NAME
from providers.base import (
    AuthFailed,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.redact import without_credentials

__all__ = ["translate_error"]

_CREDENTIALS_FIX = (
    "check GPUSCHED_ALIBABA_ACCESS_KEY_ID and GPUSCHED_ALIBABA_ACCESS_KEY_SECRET, and that the key's RAM "
    "policy allows ecs:RunInstances, DescribeInstances, StopInstances, StartInstances, DeleteInstances, "
    "DescribePrice, DescribeSpotPriceHistory and DescribeAvailableResource"
)


def _classify(code: str, status: int | None) -> tuple[type[ProviderError], str | None]:
    if (
        code in ("SignatureDoesNotMatch", "InvalidAccessKeySecret", "IncompleteSignature", "SDK.InvalidCredential")
        or code.startswith(("InvalidAccessKeyId", "Forbidden", "InvalidSecurityToken", "NoPermission"))
    ):
        return AuthFailed, _CREDENTIALS_FIX
    if code.endswith(".NoStock") or code in (
        "InvalidResourceType.NotSupported", "Zone.NotOnSale",
        "InvalidSpotPriceLimit.LowerThanPublicPrice", "OperationDenied.SpotPriceLowerThanPublicPrice",
    ):
        return NoCapacity, None
    if code.startswith("QuotaExceed") or ".QuotaExceed" in code:
        return QuotaExceeded, "raise the quota in Alibaba Cloud's Quota Center, or release unused instances"
    if code in ("Account.Arrearage", "InvalidAccountStatus.NotEnoughBalance"):
        return QuotaExceeded, "top up the Alibaba Cloud account"
    if code.startswith("Throttling"):
        return Throttled, None
    if code in ("InvalidInstanceId.NotFound", "InvalidInstanceIds.NotFound"):
        return NotFound, None
    if code in ("SDK.HttpError", "SDK.ServerUnreachable", "ServiceUnavailable", "InternalError", "UnknownError") or (
        status is not None and status >= 500
    ):
        return ProviderUnavailable, None
    if code in ("SDK.InvalidRegionId", "SDK.EndpointResolvingError", "InvalidRegionId.NotFound"):
        return InvalidRequest, "check GPUSCHED_ALIBABA_REGIONS (and GPUSCHED_ALIBABA_ENDPOINT)"
    if code.startswith("InvalidTimeStamp"):
        return InvalidRequest, "synchronise this machine's clock (NTP): requests are signed with its time"
    return InvalidRequest, None


def translate_error(exc: ServerException | ClientException, action: str) -> ProviderError:
    """An SDK exception as the project's error, vendor code and request id kept."""
    if isinstance(exc, ServerException):
        code, message = exc.get_error_code() or "", exc.get_error_msg() or ""
        status, request_id = exc.get_http_status(), exc.get_request_id() or ""
    else:
        code, message, status, request_id = exc.get_error_code() or "", exc.get_error_msg() or "", None, ""
    message = without_credentials(message)  # an HTTP error quotes the signed URL: key id and signature
    cls, fix = _classify(code, status)
    if cls is AuthFailed:
        text = f"Alibaba Cloud refused the credentials on {action}: {message} ({code})"
    else:
        text = f"Alibaba Cloud {action} failed: {message} ({code})"
    return cls(text, provider=NAME, code=code, request_id=request_id, fix=fix)
