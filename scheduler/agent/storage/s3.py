"""s3:// through boto3, signed by the instance profile (boto3's default credential chain)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.agent.storage.base import (
    TreeCopies,
    chain,
    client_error,
    object_key,
    quiet_sdk_loggers,
    service_error,
    upload_source,
    vendor_errors,
)
from scheduler.errors import (
    AuthFailed,
    GpuschedError,
    NotFound,
    ProviderUnavailable,
)

# --- S3 ----------------------------------------------------------------------------


def s3_client(*, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A boto3 S3 client on the default credential chain (on EC2: the instance profile).

    ``endpoint_url`` points it elsewhere (a test's moto server, a VPC endpoint).
    """
    import boto3
    from botocore.config import Config

    quiet_sdk_loggers()
    config = Config(retries={"mode": "standard", "max_attempts": 5})
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _s3_translate(exc: BaseException, op: str, uri: str) -> GpuschedError | None:
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - a fake client without botocore installed
        return None
    for e in chain(exc):
        if isinstance(e, bx.ClientError):
            error = e.response.get("Error", {})
            meta = e.response.get("ResponseMetadata", {})
            status = int(meta.get("HTTPStatusCode") or 0)
            code = str(error.get("Code") or "")
            return service_error("s3", op, uri, code, status, str(meta.get("RequestId") or ""))
        if isinstance(e, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
            return client_error("s3", op, uri, AuthFailed, f"no credentials from the instance role "
                                                            f"({type(e).__name__})")
        if isinstance(e, (bx.ConnectionError, bx.HTTPClientError)):
            return client_error("s3", op, uri, ProviderUnavailable, str(e))
    return None


class S3Store(TreeCopies):
    """S3 through boto3. ``client``: a boto3 S3 client; default ``s3_client(endpoint_url=..., region=...)``."""

    scheme = "s3"

    def __init__(self, client: Any = None, *, endpoint_url: str | None = None, region: str | None = None) -> None:
        self._client = client if client is not None else s3_client(endpoint_url=endpoint_url, region=region)

    def download(self, uri: str, local_path: str | Path) -> Path:
        bucket, key = object_key(uri, self.scheme)
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with vendor_errors(_s3_translate, "download", uri):
            self._client.download_file(bucket, key, str(dest))
        return dest

    def _keys(self, bucket: str, prefix: str, prefix_uri: str) -> list[str]:
        with vendor_errors(_s3_translate, "list", prefix_uri):
            return [obj["Key"]
                    for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                    for obj in page.get("Contents", [])]

    def upload(self, local_path: str | Path, uri: str) -> str:
        bucket, key = object_key(uri, self.scheme)
        src = upload_source(local_path)
        with vendor_errors(_s3_translate, "upload", uri):
            self._client.upload_file(str(src), bucket, key)
        return uri

    def exists(self, uri: str) -> bool:
        bucket, key = object_key(uri, self.scheme)
        try:
            with vendor_errors(_s3_translate, "exists", uri):
                self._client.head_object(Bucket=bucket, Key=key)
        except NotFound:
            return False
        return True
