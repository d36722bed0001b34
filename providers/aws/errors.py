"""botocore's exceptions as the project's ``ProviderError`` classes, AWS's code and request id kept."""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.parsers import ResponseParserError

from providers.aws.config import NAME
from providers.aws.error_codes import classify
from providers.base import (
    AuthFailed,
    InvalidRequest,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
)
from providers.retry import parse_retry_after

__all__ = ["classify_error", "translate_error"]

_FIXES: dict[type[ProviderError], str] = {
    AuthFailed: (
        "check GPUSCHED_AWS_ACCESS_KEY_ID / GPUSCHED_AWS_SECRET_ACCESS_KEY (or the instance role) "
        "and that the IAM policy allows this EC2 action in this region"
    ),
    QuotaExceeded: (
        "raise the EC2 quota in Service Quotas (Running On-Demand / All Spot Instance Requests "
        "for this family), or terminate unused instances"
    ),
}


def classify_error(code: str, status: int) -> type[ProviderError]:
    """Our error class for an AWS error code (first: ``providers.aws.error_codes``) or HTTP status."""
    return classify(code, status)


def translate_error(exc: Exception, *, operation: str, region: str) -> ProviderError:
    """The ProviderError for a botocore exception raised by ``operation`` in ``region``."""
    where = f"AWS {operation} in {region}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(error.get("Code") or "")
        status = int(meta.get("HTTPStatusCode") or 0)
        detail = str(error.get("Message") or "no message")
        cls = classify_error(code, status)
        if cls is AuthFailed:
            message = f"{where} was refused: AWS did not accept the credentials or permissions ({code}: {detail})"
        else:
            message = f"{where} failed: {code or f'HTTP {status}'}: {detail}"
        headers = {str(k).lower(): v for k, v in (meta.get("HTTPHeaders") or {}).items()}
        retry_after = parse_retry_after(headers.get("retry-after")) if cls.retryable else None
        return cls(message, provider=NAME, code=code, request_id=str(meta.get("RequestId") or ""),
                   fix=_FIXES.get(cls), retry_after=retry_after)
    code = type(exc).__name__
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return AuthFailed(f"{where}: no usable AWS credentials ({exc})", provider=NAME, code=code,
                          fix=_FIXES[AuthFailed])
    if isinstance(exc, (BotoConnectionError, HTTPClientError, ResponseParserError)):
        # Sent, maybe carried out, answer lost or garbled: transient, and safe to
        # retry because launches carry their client token.
        return ProviderUnavailable(f"{where}: no usable answer from EC2 ({exc})", provider=NAME, code=code)
    if isinstance(exc, ParamValidationError):
        return InvalidRequest(f"{where}: botocore refused the parameters: {exc}", provider=NAME, code=code)
    # Any other botocore error happens on our side before anything is sent
    # (unknown region, endpoint, configuration): retrying will not help.
    return InvalidRequest(f"{where}: {exc}", provider=NAME, code=code)
