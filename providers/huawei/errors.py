"""Huawei Cloud's errors as the project's ``ProviderError`` classes, the vendor's code and request id kept.

Huawei answers in two shapes, both read by the SDK into ``error_code`` / ``error_msg``:
the API gateway's ``{"error_code": "APIGW.0301", "error_msg": ..., "request_id": ...}``
(signature, throttling) and ECS's ``{"error": {"code": "Ecs.0114", "message": ...}}``.
A create job that fails later reports its code in the job (``Ecs.0319`` for a sold-out
flavor), which ``job_error`` turns into the same classes. Which class each code is lives in
``providers.huawei.error_codes`` (every code ECS's and the gateway's references document for
the calls this adapter makes; docs/error-codes.md is written from it); this module adds the fix
each one needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from huaweicloudsdkcore.exceptions.exceptions import (
    RequestTimeoutException,
    SdkException,
    ServiceResponseException,
)

from providers.base import (
    AuthFailed,
    BillingStopped,
    InvalidRequest,
    NoCapacity,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
)
from providers.huawei import error_codes
from providers.huawei.config import NAME

__all__ = ["FIXES", "answer_error", "classify", "job_error", "translate_error"]

_QUOTA_FIX = "raise the quota in the Huawei Cloud console (My Quotas), or delete servers you no longer need"
_BALANCE_FIX = "top up the Huawei Cloud account, or raise the department's budget; nothing launches there until then"
_CREDENTIALS_FIX = (
    "check GPUSCHED_HUAWEI_ACCESS_KEY / GPUSCHED_HUAWEI_SECRET_KEY (or HUAWEICLOUD_SDK_AK / HUAWEICLOUD_SDK_SK): "
    "the secret key must belong to the access key, and this machine's clock must be right (NTP)"
)
_PERMISSION_FIX = (
    "grant the IAM user the ECS actions gpusched calls (ecs:cloudServers:create, list, delete, start, stop, "
    "ecs:flavors:get, ecs:cloudServers:get) in the project of that region"
)
# The classes that refuse a launch for good (the daemon avoids the offer and plans again).
_REFUSALS = (NoCapacity, QuotaExceeded, BillingStopped, InvalidRequest)
_PROJECT_FIX = "check GPUSCHED_HUAWEI_PROJECT_IDS: each region needs the id of its own project"

# What to do about a class, unless the code has a fix of its own below.
_CLASS_FIXES: Mapping[type[ProviderError], str] = {
    NoCapacity: "try another zone, flavor or capacity type",
    QuotaExceeded: _QUOTA_FIX,
    BillingStopped: _BALANCE_FIX,
    AuthFailed: _PERMISSION_FIX,
}
# Vendor code -> the fix for it, where the class's is not the right one.
FIXES: Mapping[str, str] = {
    "Ecs.0044": "try another zone or GPUSCHED_HUAWEI_ROOT_VOLUME_TYPE",
    "Ecs.0012": "free addresses in that zone's subnet (GPUSCHED_HUAWEI_SUBNET_IDS), or try another zone",
    "Ecs.0703": "raise the spot bid (the job's max price) or launch on demand",
    "Ecs.0069": "add a payment method to the Huawei Cloud account",
    "Ecs.7000": "pay or cancel the account's pending orders, and check its balance",
    "APIGW.0301": _CREDENTIALS_FIX,
    "APIGW.0303": _CREDENTIALS_FIX,
    "APIGW.0305": _CREDENTIALS_FIX,
    "Common.0013": _CREDENTIALS_FIX,
    "Ecs.0003": _PERMISSION_FIX + "; or the account is restricted (balance, frozen): see the message",
    "Ecs.0066": "complete the account's real-name authentication",
    "Ecs.0023": _PROJECT_FIX,
    "Common.0018": _PROJECT_FIX,
    "APIGW.0310": _PROJECT_FIX,
    "APIGW.0307": "call the region's own endpoint (GPUSCHED_HUAWEI_ENDPOINT and GPUSCHED_HUAWEI_REGIONS)",
    "Ecs.0122": "derive the client token from everything that defines the request",
    "Ecs.0016": "ask Huawei for the flavor's open-beta permission, or take the flavor out of the catalog",
    "Ecs.0027": "take the flavor out of the catalog: the account may not use it",
    "Ecs.0028": "take the flavor out of the catalog: the account may not use it",
    "Ecs.0029": "the flavor does not exist in that region: check the catalog's instance type",
    "Ecs.0031": "check GPUSCHED_HUAWEI_IMAGE_ID (an IMS image id in that region)",
    "Ecs.0032": "check GPUSCHED_HUAWEI_IMAGE_ID: the image is not active",
    "Ecs.0014": "check GPUSCHED_HUAWEI_VPC_ID, _SUBNET_IDS and _SECURITY_GROUP_IDS",
    "Ecs.0064": "check GPUSCHED_HUAWEI_VPC_ID: each subnet in GPUSCHED_HUAWEI_SUBNET_IDS must be in it",
    "Ecs.0038": "check GPUSCHED_HUAWEI_SUBNET_IDS",
    "Ecs.0015": "check GPUSCHED_HUAWEI_ROOT_VOLUME_TYPE: the flavor does not take that disk type",
    "Ecs.0909": "check GPUSCHED_HUAWEI_ROOT_VOLUME_TYPE: the flavor does not take that disk type",
    "Ecs.0043": "check GPUSCHED_HUAWEI_ROOT_VOLUME_TYPE",
    "Ecs.0314": "check GPUSCHED_HUAWEI_KEY_NAME",
    "Ecs.0605": "unlock the server in the console",
    "Ecs.0513": "a yearly/monthly server is unsubscribed in the console, not deleted",
    "APIGW.0101": "check GPUSCHED_HUAWEI_ENDPOINT and the region",
}


def classify(code: str, status: int | None) -> tuple[type[ProviderError], str | None]:
    """Our class for a vendor ``code`` (and HTTP ``status``), with the fix to suggest."""
    cls = error_codes.classify(code, status)
    return cls, FIXES.get(code) or _CLASS_FIXES.get(cls)


def translate_error(exc: SdkException, *, action: str, region: str) -> ProviderError:
    """An SDK exception as the project's error; the connection errors (no answer at all) are unavailable.

    ``exc.retry_after`` (set by ``providers.huawei.client``'s exception handler from the answer's
    ``Retry-After``) rides on a retryable error for the retry helper to honour.
    """
    if isinstance(exc, ServiceResponseException):
        return _vendor(str(exc.error_code or ""), str(exc.error_msg or ""), exc.status_code,
                       str(exc.request_id or ""), action=action, region=region,
                       retry_after=getattr(exc, "retry_after", None))
    code = "RequestTimeout" if type(exc) is RequestTimeoutException else type(exc).__name__
    return ProviderUnavailable(f"Huawei Cloud ECS {action} in {region} got no answer: {exc.error_msg}",
                               provider=NAME, code=code)


def answer_error(answer: Mapping[str, Any], status: int | None, *, action: str, region: str) -> ProviderError | None:
    """The error an answer the SDK took for a success carries in its body, if any.

    ECS documents flow control (``Common.0024``) with HTTP 202, which the SDK passes as a success; the
    body is ECS's error shape all the same. An empty listing read from it would say every server is gone.
    """
    error = answer.get("error")
    if isinstance(error, Mapping) and error.get("code"):
        code, message = str(error["code"]), str(error.get("message") or "")
    elif answer.get("error_code") and "error_msg" in answer:
        code, message = str(answer["error_code"]), str(answer.get("error_msg") or "")
    else:
        return None
    return _vendor(code, message, status, str(answer.get("request_id") or ""), action=action, region=region)


def _vendor(code: str, message: str, status: int | None, request_id: str, *, action: str, region: str,
            retry_after: float | None = None) -> ProviderError:
    where = f"Huawei Cloud ECS {action} in {region}"
    cls, fix = classify(code, status)
    text = (f"{where} refused the credentials: {message.strip()} ({code})" if cls is AuthFailed
            else f"{where} failed: {message.strip()} ({code})")
    return cls(text, provider=NAME, code=code, request_id=request_id, fix=fix,
               retry_after=retry_after if cls.retryable else None)


def job_error(code: str, reason: str, *, job_id: str, region: str) -> ProviderError:
    """A failed create job (``GET /v1/{project_id}/jobs/{job_id}`` said FAIL) as the project's error.

    A failed create made nothing (ECS rolls it back), so the launch is refused, whatever the code: a
    code of another class (a system error inside the job, a permission, or no code at all) is
    NoCapacity here, "not here, now". Anything the daemon would re-issue would loop: the same request
    with the same X-Client-Token is answered with the same failed job.
    """
    cls, fix = classify(code, None)
    if not code or cls not in _REFUSALS:
        cls, fix = NoCapacity, _CLASS_FIXES[NoCapacity]
    return cls(f"Huawei Cloud ECS job {job_id} in {region} failed: {reason or 'no reason given'} ({code or '-'})",
               provider=NAME, code=code, request_id=job_id, fix=fix)
