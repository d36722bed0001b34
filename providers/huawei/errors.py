"""Huawei Cloud's errors as the project's ``ProviderError`` classes, the vendor's code and request id kept.

Huawei answers in two shapes, both read by the SDK into ``error_code`` / ``error_msg``:
the API gateway's ``{"error_code": "APIGW.0301", "error_msg": ..., "request_id": ...}``
(signature, throttling) and ECS's ``{"error": {"code": "Ecs.0114", "message": ...}}``.
A create job that fails later reports its code in the job (``Ecs.0319`` for a sold-out
flavor), which ``job_error`` turns into the same classes. The codes are those of ECS's
API reference (appendix "Error Codes") and the gateway's.
"""

from __future__ import annotations

from huaweicloudsdkcore.exceptions.exceptions import (
    RequestTimeoutException,
    SdkException,
    ServiceResponseException,
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
from providers.huawei.config import NAME

__all__ = ["CODES", "classify", "job_error", "translate_error"]

_QUOTA_FIX = "raise the quota in the Huawei Cloud console (My Quotas), or delete servers you no longer need"
_BALANCE_FIX = "top up the Huawei Cloud account, or raise the department's budget"
_CREDENTIALS_FIX = (
    "check GPUSCHED_HUAWEI_ACCESS_KEY / GPUSCHED_HUAWEI_SECRET_KEY (or HUAWEICLOUD_SDK_AK / HUAWEICLOUD_SDK_SK): "
    "the secret key must belong to the access key, and this machine's clock must be right (NTP)"
)
_PERMISSION_FIX = (
    "grant the IAM user the ECS actions gpusched calls (ecs:cloudServers:create, list, delete, start, stop, "
    "ecs:flavors:get, ecs:cloudServers:get) in the project of that region"
)
_PROJECT_FIX = "check GPUSCHED_HUAWEI_PROJECT_IDS: each region needs the id of its own project"

# Vendor code -> (our class, fix). Anything else falls to the rules in ``classify``.
CODES: dict[str, tuple[type[ProviderError], str | None]] = {
    # Sold out: the flavor, or a disk type the server needs.
    "Ecs.0319": (NoCapacity, "try another zone, flavor or capacity type"),
    "Ecs.0044": (NoCapacity, "try another zone or root_volume_type"),
    # Quotas and money.
    "Ecs.0001": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0013": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0021": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0022": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0104": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0118": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0913": (QuotaExceeded, _QUOTA_FIX),
    "Ecs.0067": (QuotaExceeded, _BALANCE_FIX),
    "Ecs.0070": (QuotaExceeded, _BALANCE_FIX),
    # Credentials, permissions, account state.
    "APIGW.0301": (AuthFailed, _CREDENTIALS_FIX),
    "Common.0013": (AuthFailed, _CREDENTIALS_FIX),
    "Ecs.0003": (AuthFailed, _PERMISSION_FIX + "; or the account's balance is insufficient"),
    "Ecs.0004": (AuthFailed, _PERMISSION_FIX),
    "Ecs.0110": (AuthFailed, _PERMISSION_FIX),
    "Pdp.0001": (AuthFailed, _PERMISSION_FIX),
    "Ecs.0066": (AuthFailed, "complete the account's real-name authentication"),
    "Ecs.0068": (AuthFailed, None),
    "Ecs.0069": (AuthFailed, "add a payment method to the Huawei Cloud account"),
    "Ecs.0071": (AuthFailed, None),
    "Ecs.0023": (AuthFailed, _PROJECT_FIX),
    "Common.0018": (AuthFailed, _PROJECT_FIX),
    # Gone.
    "Ecs.0114": (NotFound, None),
    "Ecs.0614": (NotFound, None),
    # Busy: the gateway's and ECS's flow control, a command still running on the server.
    "APIGW.0308": (Throttled, None),
    "Common.1503": (Throttled, None),
    "Common.0024": (Throttled, None),
    "Ecs.0603": (Throttled, None),
    # The cloud's own failures: safe to retry the same request.
    "Common.0001": (ProviderUnavailable, None),
    "Ecs.0002": (ProviderUnavailable, None),
    "Ecs.1000": (ProviderUnavailable, None),
    "Ecs.1001": (ProviderUnavailable, None),
    "Ecs.1002": (ProviderUnavailable, None),
    "Ecs.1100": (ProviderUnavailable, None),
    "Ecs.1200": (ProviderUnavailable, None),
    "Ecs.1201": (ProviderUnavailable, None),
    "Ecs.1300": (ProviderUnavailable, None),
    # Requests Huawei will never carry out as sent.
    "Ecs.0122": (InvalidRequest, "derive the client token from everything that defines the request"),
    "Ecs.0123": (InvalidRequest, None),
    "Ecs.0029": (InvalidRequest, "the flavor does not exist in that region: check the catalog's instance type"),
    "Ecs.0031": (InvalidRequest, "check GPUSCHED_HUAWEI_IMAGE_ID (an IMS image id in that region)"),
    "Ecs.0014": (InvalidRequest, "check GPUSCHED_HUAWEI_VPC_ID, _SUBNET_IDS and _SECURITY_GROUP_IDS"),
    "Ecs.0038": (InvalidRequest, "check GPUSCHED_HUAWEI_SUBNET_IDS"),
    "Ecs.0314": (InvalidRequest, "check GPUSCHED_HUAWEI_KEY_NAME"),
    "Ecs.0100": (InvalidRequest, None),
    "Ecs.0605": (InvalidRequest, "unlock the server in the console"),
    "APIGW.0101": (InvalidRequest, "check GPUSCHED_HUAWEI_ENDPOINT and the region"),
}


def classify(code: str, status: int | None) -> tuple[type[ProviderError], str | None]:
    """Our class for a vendor ``code`` (and HTTP ``status`` when the code says nothing)."""
    if code in CODES:
        return CODES[code]
    if status == 429 or code == "429":
        return Throttled, None  # the SDK's own code when urllib3 gave up on a 429
    if code.startswith("APIGW.03"):
        return AuthFailed, _CREDENTIALS_FIX
    if status in (401, 403):
        return AuthFailed, _PERMISSION_FIX
    if status == 404:
        return NotFound, None
    if status is not None and status >= 500:
        return ProviderUnavailable, None
    return InvalidRequest, None


def translate_error(exc: SdkException, *, action: str, region: str) -> ProviderError:
    """An SDK exception as the project's error; the connection errors (no answer at all) are unavailable."""
    where = f"Huawei Cloud ECS {action} in {region}"
    if isinstance(exc, ServiceResponseException):
        code = str(exc.error_code or "")
        message = str(exc.error_msg or "").strip()
        cls, fix = classify(code, exc.status_code)
        text = (f"{where} refused the credentials: {message} ({code})" if cls is AuthFailed
                else f"{where} failed: {message} ({code})")
        return cls(text, provider=NAME, code=code, request_id=str(exc.request_id or ""), fix=fix)
    code = "RequestTimeout" if isinstance(exc, RequestTimeoutException) else type(exc).__name__
    return ProviderUnavailable(f"{where} got no answer: {exc.error_msg}", provider=NAME, code=code)


def job_error(code: str, reason: str, *, job_id: str, region: str) -> ProviderError:
    """A failed asynchronous job (``GET /v1/{project_id}/jobs/{job_id}`` said FAIL) as the project's error."""
    cls, fix = classify(code, None)
    if cls is InvalidRequest and not code:
        cls = ProviderUnavailable  # a job that failed without saying why: the same request may succeed
    return cls(f"Huawei Cloud ECS job {job_id} in {region} failed: {reason or 'no reason given'} ({code or '-'})",
               provider=NAME, code=code, request_id=job_id, fix=fix)
