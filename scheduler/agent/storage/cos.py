"""cos:// through cos-python-sdk-v5, signed with the CVM's CAM role and its session token."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.agent.storage.base import (
    PROVIDERS,
    ROLE_FIX,
    TENCENT_METADATA,
    TreeCopies,
    client_error,
    metadata_text,
    object_key,
    quiet_sdk_loggers,
    service_error,
    upload_source,
    vendor_errors,
)
from scheduler.errors import (
    AuthFailed,
    GpuschedError,
    ProviderUnavailable,
)

# --- COS ---------------------------------------------------------------------------


class CosRoleClient:
    """Callable giving a ``CosS3Client`` signed with the CVM's CAM role (see the module docstring).

    ``credentials``: anything with ``get_credential_info() -> (secret_id, secret_key, token)``;
    default tencentcloud-sdk-python-common's ``CVMRoleCredential()``, which reads the role
    from the metadata service and renews it 5 minutes before it expires. The client is rebuilt
    when the credentials change. The region comes from the metadata service unless given;
    ``scheme``/``domain`` point it elsewhere (tests).
    """

    def __init__(self, region: str | None = None, *, credentials: Any = None, scheme: str = "https",
                 domain: str | None = None, metadata_base: str = TENCENT_METADATA) -> None:
        self.region = region
        self.scheme = scheme
        self.domain = domain
        self.metadata_base = metadata_base.rstrip("/")
        self._credentials = credentials
        self._client: Any = None
        self._fingerprint = ""

    def __call__(self) -> Any:
        from qcloud_cos import CosConfig, CosS3Client

        if self._credentials is None:
            from tencentcloud.common.credential import CVMRoleCredential

            self._credentials = CVMRoleCredential()
        secret_id, secret_key, token = self._credentials.get_credential_info()
        if not (secret_id and secret_key and token):
            raise AuthFailed("COS: no credentials from the CVM's CAM role (the metadata service gave none)",
                             provider=PROVIDERS["cos"], fix=ROLE_FIX["cos"])
        fingerprint = hashlib.sha256(f"{secret_id}\0{secret_key}\0{token}".encode()).hexdigest()
        if self._client is None or fingerprint != self._fingerprint:
            if not self.region:
                self.region = metadata_text(f"{self.metadata_base}/latest/meta-data/placement/region",
                                             what="region", scheme="cos")
            quiet_sdk_loggers()
            config = CosConfig(Region=self.region, SecretId=secret_id, SecretKey=secret_key, Token=token,
                               Scheme=self.scheme, Domain=self.domain)
            self._client = CosS3Client(config, retry=3)
            self._fingerprint = fingerprint
        return self._client


def _cos_translate(exc: BaseException, op: str, uri: str) -> GpuschedError | None:
    try:
        from qcloud_cos import cos_exception as cx
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, cx.CosServiceError):
        code = exc.get_error_code() if isinstance(exc.get_digest_msg(), dict) else ""
        request_id = exc.get_request_id() if isinstance(exc.get_digest_msg(), dict) else ""
        return service_error("cos", op, uri, str(code or ""), int(exc.get_status_code() or 0), str(request_id or ""))
    if isinstance(exc, cx.CosClientError):
        # Raised after the SDK's retries for timeouts and refused connections, with the requests error's text.
        return client_error("cos", op, uri, ProviderUnavailable, str(exc)[:300])
    return None


class CosStore(TreeCopies):
    """COS through cos-python-sdk-v5.

    ``client``: a ``CosS3Client`` used for every call; or ``client_factory() -> CosS3Client``
    asked before each call (so rotating credentials take effect); default ``CosRoleClient(region)``.
    COS bucket names carry the APPID: ``cos://name-1250000000/key``.
    """

    scheme = "cos"

    def __init__(self, client: Any = None, *, client_factory: Callable[[], Any] | None = None,
                 region: str | None = None) -> None:
        if client is not None:
            self._client_for: Callable[[], Any] = lambda: client
        else:
            self._client_for = client_factory or CosRoleClient(region)

    def _client(self, op: str, uri: str) -> Any:
        with vendor_errors(_cos_translate, op, uri):
            return self._client_for()

    def download(self, uri: str, local_path: str | Path) -> Path:
        bucket, key = object_key(uri, self.scheme)
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        client = self._client("download", uri)
        with vendor_errors(_cos_translate, "download", uri):
            client.download_file(Bucket=bucket, Key=key, DestFilePath=str(dest))
        return dest

    def _keys(self, bucket: str, prefix: str, prefix_uri: str) -> list[str]:
        client = self._client("list", prefix_uri)
        keys: list[str] = []
        marker = ""
        with vendor_errors(_cos_translate, "list", prefix_uri):
            while True:
                page = client.list_objects(Bucket=bucket, Prefix=prefix, Marker=marker, MaxKeys=1000)
                contents = page.get("Contents", [])
                keys += [obj["Key"] for obj in contents]
                if str(page.get("IsTruncated", "false")).lower() != "true" or not contents:
                    return keys
                marker = page.get("NextMarker") or contents[-1]["Key"]

    def upload(self, local_path: str | Path, uri: str) -> str:
        bucket, key = object_key(uri, self.scheme)
        src = upload_source(local_path)
        client = self._client("upload", uri)
        with vendor_errors(_cos_translate, "upload", uri):
            client.upload_file(Bucket=bucket, Key=key, LocalFilePath=str(src))
        return uri

    def exists(self, uri: str) -> bool:
        bucket, key = object_key(uri, self.scheme)
        client = self._client("exists", uri)
        with vendor_errors(_cos_translate, "exists", uri):
            return bool(client.object_exists(Bucket=bucket, Key=key))
