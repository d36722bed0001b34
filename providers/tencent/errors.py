"""The Tencent SDK's exception as the project's ``ProviderError`` classes, CVM's code and request id kept.

Which class each CVM code is lives in ``providers.tencent.error_codes`` (every code Tencent documents
for the calls this adapter makes; docs/error-codes.md is written from it).
"""

from __future__ import annotations

from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)

from providers.base import (
    AuthFailed,
    BillingStopped,
    NoCapacity,
    ProviderError,
    QuotaExceeded,
)
from providers.tencent.config import NAME
from providers.tencent.error_codes import classify

__all__ = ["translate_error", "vendor_error"]

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
_FIXES: dict[type[ProviderError], str] = {
    NoCapacity: "try another zone, instance type or capacity type",
    QuotaExceeded: "raise the quota in the Tencent Cloud console, or free instances",
    BillingStopped: "top up the Tencent Cloud account (or pay the open order); nothing launches there until then",
}


def translate_error(exc: TencentCloudSDKException, *, action: str, region: str,
                    retry_after: float | None = None) -> ProviderError:
    """One SDK exception as the project's error, keeping CVM's code and request id."""
    return vendor_error(str(exc.get_code() or "Unknown"), str(exc.get_message() or ""),
                        str(exc.get_request_id() or ""), action=action, region=region, retry_after=retry_after)


def vendor_error(code: str, message: str, request_id: str, *, action: str, region: str,
                 retry_after: float | None = None) -> ProviderError:
    """CVM's ``Response.Error`` (code, message) as the project's error."""
    vendor = message.strip()
    where = f"Tencent Cloud {action} in {region}"
    kind = classify(code)
    if kind is AuthFailed:
        reason, fix = _AUTH_REASONS.get(code, (vendor or code, _PERMISSION_FIX))
        if code == "AuthFailure.UnauthorizedOperation":
            fix = _PERMISSION_FIX
        return AuthFailed(f"{where} refused the credentials: {reason} ({code})",
                          provider=NAME, code=code, request_id=request_id, fix=fix)
    fix = _FIXES.get(kind)
    if code == "UnsupportedOperation.StoppedModeStopCharging":
        fix = "this instance cannot stop without charging: terminate it instead"
    return kind(f"{where} failed: {code}: {vendor}", provider=NAME, code=code, request_id=request_id, fix=fix,
                retry_after=retry_after if kind.retryable else None)
