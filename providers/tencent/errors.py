"""The Tencent SDK's exception as the project's ``ProviderError`` classes, CVM's code and request id kept."""

from __future__ import annotations

from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)

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
from providers.tencent.config import NAME

__all__ = ["translate_error"]

_NO_CAPACITY = frozenset({
    "ResourceInsufficient",
    "ResourceInsufficient.SpecifiedInstanceType",
    "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance",
    "ResourceInsufficient.AvailabilityZoneSoldOut",
    "ResourceInsufficient.InsufficientOfferingMinimum",
    "ResourceInsufficient.CloudDiskSoldOut",
    "ResourceUnavailable.InstanceType",
    "InvalidParameterValue.InsufficientOffering",
    "InvalidParameterValue.InsufficientPrice",
})
_QUOTA = frozenset({"InstancesQuotaLimitExceeded", "InvalidAccount.InsufficientBalance"})
_NOT_FOUND = frozenset({"InvalidInstanceId.NotFound", "ResourceNotFound.InvalidInstanceIdNotFound"})
_UNAVAILABLE = frozenset({"ClientNetworkError", "ServerNetworkError", "InternalServerError"})
_OUR_BUG = frozenset({"ClientError", "ClientParamsError"})
_AUTH_REASONS = {
    "AuthFailure.SignatureFailure": (
        "the secret key does not match the SecretId (the request signature is wrong)",
        "check GPUSCHED_TENCENT_SECRET_KEY: it must be the SecretKey of GPUSCHED_TENCENT_SECRET_ID",
    ),
    "AuthFailure.SecretIdNotFound": (
        "Tencent Cloud knows no such SecretId",
        "check GPUSCHED_TENCENT_SECRET_ID (a CAM API key's SecretId, AKID...)",
    ),
    "AuthFailure.InvalidSecretId": (
        "the SecretId is malformed",
        "check GPUSCHED_TENCENT_SECRET_ID (a CAM API key's SecretId, AKID...)",
    ),
    "AuthFailure.SignatureExpire": (
        "the request's timestamp is more than 5 minutes from Tencent Cloud's time",
        "synchronise this machine's clock (NTP)",
    ),
}
_PERMISSION_FIX = (
    "grant the CAM user the CVM actions gpusched calls (RunInstances, DescribeInstances, "
    "Stop/Start/TerminateInstances, DescribeZoneInstanceConfigInfos)"
)


def translate_error(exc: TencentCloudSDKException, *, action: str, region: str) -> ProviderError:
    """One SDK exception as the project's error, keeping CVM's code and request id."""
    code = str(exc.get_code() or "Unknown")
    vendor = str(exc.get_message() or "").strip()
    request_id = str(exc.get_request_id() or "")
    where = f"Tencent Cloud {action} in {region}"
    if code.startswith(("AuthFailure", "UnauthorizedOperation")):
        reason, fix = _AUTH_REASONS.get(code, (vendor or code, _PERMISSION_FIX))
        if code == "AuthFailure.UnauthorizedOperation":
            fix = _PERMISSION_FIX
        return AuthFailed(f"{where} refused the credentials: {reason} ({code})",
                          provider=NAME, code=code, request_id=request_id, fix=fix)
    kind, fix = _classify(code)
    return kind(f"{where} failed: {code}: {vendor}", provider=NAME, code=code, request_id=request_id, fix=fix)


def _classify(code: str) -> tuple[type[ProviderError], str | None]:
    if code.startswith("RequestLimitExceeded"):
        return Throttled, None
    if code in _NO_CAPACITY or code.startswith("ResourcesSoldOut."):
        return NoCapacity, "try another zone, instance type or capacity type"
    if code.startswith(("LimitExceeded.", "ResourceInsufficient.")) or code in _QUOTA:
        return QuotaExceeded, "raise the quota (or top up the account) in the Tencent Cloud console, or free instances"
    if code in _NOT_FOUND:
        return NotFound, None
    if code in _UNAVAILABLE or code.startswith(("InternalError", "ServiceUnavailable")):
        return ProviderUnavailable, None
    if code in _OUR_BUG:
        return InvalidRequest, None
    if "." not in code and code.endswith(("Error", "Exception")):
        # Not a CVM code: the SDK could not read the answer (e.g. JSONDecodeError).
        return ProviderUnavailable, None
    if code == "UnsupportedOperation.StoppedModeStopCharging":
        return InvalidRequest, "this instance cannot stop without charging: terminate it instead"
    return InvalidRequest, None
