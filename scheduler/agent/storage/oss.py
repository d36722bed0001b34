"""oss:// through oss2, signed with the ECS instance's RAM role (V4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from scheduler.agent.storage.base import (
    ALIBABA_METADATA,
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
    InvalidRequest,
    ProviderUnavailable,
)

# --- OSS ---------------------------------------------------------------------------


class OssRoleBuckets:
    """``oss2.Bucket`` objects signed (V4) with the ECS instance's RAM role.

    The role's name and the region come from the ECS metadata service unless given;
    ``endpoint`` defaults to the region's internal endpoint (no traffic charge inside the
    region). ``metadata_base`` is for tests. oss2's fetcher asks the metadata service in
    normal mode (no IMDSv2 token), so an instance set to hardened-only metadata cannot use it.
    """

    def __init__(self, region: str | None = None, *, endpoint: str | None = None, role_name: str | None = None,
                 metadata_base: str = ALIBABA_METADATA) -> None:
        self.region = region
        self.endpoint = endpoint
        self.role_name = role_name
        self.metadata_base = metadata_base.rstrip("/")
        self._auth: Any = None

    def __call__(self, bucket_name: str) -> Any:
        import oss2

        if self._auth is None:
            quiet_sdk_loggers()
            roles = f"{self.metadata_base}/latest/meta-data/ram/security-credentials/"
            if not self.region:
                self.region = metadata_text(f"{self.metadata_base}/latest/meta-data/region-id", what="region",
                                             scheme="oss")
            if not self.role_name:
                self.role_name = metadata_text(roles, what="RAM role", scheme="oss")
            provider = oss2.EcsRamRoleCredentialsProvider(roles + quote(self.role_name, safe=""))
            self.endpoint = self.endpoint or f"https://oss-{self.region}-internal.aliyuncs.com"
            self._auth = oss2.ProviderAuthV4(provider)
        return oss2.Bucket(self._auth, self.endpoint, bucket_name, region=self.region)


def _oss_translate(exc: BaseException, op: str, uri: str) -> GpuschedError | None:
    try:
        from oss2 import exceptions as ox
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, ox.RequestError):
        return client_error("oss", op, uri, ProviderUnavailable, "the request did not get through")
    if isinstance(exc, ox.InconsistentError):
        return client_error("oss", op, uri, ProviderUnavailable, "the CRC of the transfer did not match")
    if isinstance(exc, ox.ClientError):
        # The SDK's own refusals: the RAM role's credentials could not be fetched, a bad bucket name...
        text = str(getattr(exc, "body", "") or "")
        cls = AuthFailed if "credential" in text.lower() else InvalidRequest
        return client_error("oss", op, uri, cls, text[:300])
    if isinstance(exc, ox.OssError):
        return service_error("oss", op, uri, str(exc.code or ""), int(exc.status or 0), str(exc.request_id or ""))
    return None


class OssStore(TreeCopies):
    """OSS through oss2. ``bucket_factory(name) -> oss2.Bucket``; default ``OssRoleBuckets(...)``."""

    scheme = "oss"

    def __init__(self, bucket_factory: Callable[[str], Any] | None = None, *, region: str | None = None,
                 endpoint: str | None = None, role_name: str | None = None) -> None:
        self._factory = bucket_factory or OssRoleBuckets(region, endpoint=endpoint, role_name=role_name)
        self._buckets: dict[str, Any] = {}

    def _bucket(self, name: str, op: str, uri: str) -> Any:
        if name not in self._buckets:
            with vendor_errors(_oss_translate, op, uri):
                self._buckets[name] = self._factory(name)
        return self._buckets[name]

    def download(self, uri: str, local_path: str | Path) -> Path:
        import oss2

        name, key = object_key(uri, self.scheme)
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        bucket = self._bucket(name, "download", uri)
        with vendor_errors(_oss_translate, "download", uri):
            oss2.resumable_download(bucket, key, str(dest))
        return dest

    def _keys(self, bucket: str, prefix: str, prefix_uri: str) -> list[str]:
        oss_bucket = self._bucket(bucket, "list", prefix_uri)
        keys: list[str] = []
        token = ""
        with vendor_errors(_oss_translate, "list", prefix_uri):
            while True:
                result = oss_bucket.list_objects_v2(prefix=prefix, continuation_token=token, max_keys=1000)
                keys += [obj.key for obj in result.object_list]
                if not result.is_truncated:
                    return keys
                token = result.next_continuation_token

    def upload(self, local_path: str | Path, uri: str) -> str:
        import oss2

        name, key = object_key(uri, self.scheme)
        src = upload_source(local_path)
        bucket = self._bucket(name, "upload", uri)
        with vendor_errors(_oss_translate, "upload", uri):
            oss2.resumable_upload(bucket, key, str(src))
        return uri

    def exists(self, uri: str) -> bool:
        name, key = object_key(uri, self.scheme)
        bucket = self._bucket(name, "exists", uri)
        with vendor_errors(_oss_translate, "exists", uri):
            return bool(bucket.object_exists(key))
