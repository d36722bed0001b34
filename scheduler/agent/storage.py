"""Object storage for the on-instance agent: s3://, oss:// and cos:// through each cloud's Python SDK.

One small interface, ``ObjectStore``, with one implementation per cloud; ``store_for(uri)``
picks by scheme. The agent signs with the machine's role and nothing else: no key ever
reaches the instance's user-data, this module reads none from the environment itself, and
the defaults are

* S3: boto3's default credential chain (on EC2: the instance profile, through IMDS);
* OSS: oss2's ``EcsRamRoleCredentialsProvider`` (the ECS instance's RAM role, read from
  the metadata service at 100.100.100.200), signing with V4 (``ProviderAuthV4``);
* COS: tencentcloud-sdk-python-common's ``CVMRoleCredential`` (the CVM's CAM role, read
  from metadata.tencentyun.com). cos-python-sdk-v5 takes such an object as
  ``CredentialInstance`` but then signs with its id and key and never sends its token
  (``x-cos-security-token`` comes from ``CosConfig(Token=...)`` alone; 1.9.44), which role
  credentials need; so ``CosRoleClient`` reads the three together and builds the client
  with ``SecretId``/``SecretKey``/``Token``, again whenever the role's credentials rotate.

Each store takes its SDK client (or bucket factory) as an argument, so tests inject one;
the SDKs are imported inside the default factories only, so this module imports without
them (``pip install 'gpusched[agent]'`` brings them). Large files go through the SDKs'
managed transfers: boto3's ``download_file``/``upload_file``, oss2's
``resumable_download``/``resumable_upload``, COS's ``download_file``/``upload_file``.

Errors: the SDKs' error types (botocore's client, credential and connection errors; oss2's
``OssError`` family; COS's ``CosServiceError``/``CosClientError``) do not leave a store.
Each becomes one of ``scheduler.errors``' existing classes (none is added): ``NotFound``
(no such object or bucket, or nothing under a prefix), ``AuthFailed`` (no role
credentials, or the role may not do this: 401/403),
``Throttled`` (SlowDown, 429), ``ProviderUnavailable`` (connection failures, timeouts,
5xx), ``InvalidRequest`` (another 4xx), ``ProviderError`` (anything else); ``UserError``
for what the job file or the bucket's contents got wrong (a malformed URI, a key that would
land outside the local folder). A local file that cannot be read or written raises the
usual ``OSError``. The messages carry the operation, the URI, the vendor's error code, the
HTTP status and the request id, never the vendor's message body: for a signature error OSS
and S3 echo the string they signed, which can hold the session token. For the same reason
the vendor exception is not chained onto ours, and the default factories set the SDKs'
loggers (which log signed requests, token included, at DEBUG) to WARNING.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from scheduler.errors import (
    AuthFailed,
    GpuschedError,
    InvalidRequest,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    Throttled,
    UserError,
)

__all__ = [
    "SCHEMES",
    "ObjectStore",
    "parse_uri",
    "S3Store",
    "OssStore",
    "CosStore",
    "OssRoleBuckets",
    "CosRoleClient",
    "s3_client",
    "store_for",
]

SCHEMES = ("s3", "oss", "cos")
PROVIDERS = {"s3": "aws", "oss": "alibaba", "cos": "tencent"}  # the ``provider`` field of our errors
ALIBABA_METADATA = "http://100.100.100.200"
TENCENT_METADATA = "http://metadata.tencentyun.com"
_URI_EXAMPLE = "s3://bucket/path/to/object, oss://bucket/path or cos://bucket-1250000000/path"
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")
_LABEL = {"s3": "S3", "oss": "OSS", "cos": "COS"}
_ROLE_FIX = {
    "s3": "give the instance profile's role s3:GetObject, s3:PutObject and s3:ListBucket on this bucket "
          "(S3 answers 403, not 404, for a missing key when the role may not list the bucket)",
    "oss": "attach a RAM role to the ECS instance that allows oss:GetObject, oss:PutObject and "
           "oss:ListObjects on this bucket",
    "cos": "bind a CAM role to the CVM that allows cos:GetObject, cos:PutObject, cos:HeadObject and "
           "cos:GetBucket on this bucket",
}
_NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket", "NotFound", "404", "NoSuchResource"}
_AUTH_CODES = {
    "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "InvalidSecurityToken", "SecurityTokenExpired", "TokenRefreshRequired", "AccountProblem",
}
_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
_UNAVAILABLE_CODES = {"InternalError", "ServiceUnavailable", "RequestTimeout"}
_SDK_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "oss2", "qcloud_cos")


@runtime_checkable
class ObjectStore(Protocol):
    """Objects in one cloud's object storage, addressed by ``scheme://bucket/key`` URIs."""

    def download(self, uri: str, local_path: str | Path) -> Path:
        """Copy one object to ``local_path`` (its folder is made); returns that path."""
        ...

    def download_tree(self, prefix_uri: str, local_dir: str | Path) -> list[Path]:
        """Copy every object under the prefix into ``local_dir``, keeping the keys' relative paths.

        The prefix is a folder: ``s3://b/ds`` means the keys under ``ds/``. Refuses (before
        writing anything) a key that would land outside ``local_dir``; raises ``NotFound``
        when nothing is under the prefix.
        """
        ...

    def upload(self, local_path: str | Path, uri: str) -> str:
        """Copy one local file to ``uri``; returns the URI."""
        ...

    def upload_tree(self, local_dir: str | Path, prefix_uri: str) -> list[str]:
        """Copy every file under ``local_dir`` to the prefix, keeping relative paths; returns their URIs."""
        ...

    def exists(self, uri: str) -> bool:
        """Whether the object exists. Other failures (no permission) raise; a missing bucket raises
        where the cloud tells it from a missing key (OSS), and is False where a HEAD cannot (S3, COS)."""
        ...


# --- URIs --------------------------------------------------------------------------


def parse_uri(uri: str) -> tuple[str, str, str]:
    """``"s3://bucket/a/b.pt"`` -> ``("s3", "bucket", "a/b.pt")``; the key may be empty.

    Raises ``UserError`` for anything else. A URI with ``@`` or ``:`` in its bucket part
    (``s3://KEY:SECRET@bucket/...``) is refused without being repeated in the message.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise UserError("an empty object-store URI", fix=f"write it as {_URI_EXAMPLE}")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise UserError(f"{uri!r} is not an object-store URI", fix=f"write it as {_URI_EXAMPLE}")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise UserError(f"object-store scheme {scheme!r} is not supported (only {', '.join(SCHEMES)})",
                        fix=f"write it as {_URI_EXAMPLE}")
    bucket, _, key = rest.partition("/")
    if "@" in bucket or ":" in bucket:
        raise UserError(f"the bucket part of a {scheme}:// URI may not hold '@' or ':' (credentials or a port)",
                        fix="name the bucket only; the instance's role signs the requests")
    if not _BUCKET.match(bucket):
        raise UserError(f"{uri!r} names no valid bucket", fix=f"write it as {_URI_EXAMPLE}")
    return scheme, bucket, key


def _join(scheme: str, bucket: str, key: str) -> str:
    return f"{scheme}://{bucket}/{key}"


def _object_key(uri: str, scheme: str) -> tuple[str, str]:
    """(bucket, key) of a URI that must name one object of this store's scheme."""
    got, bucket, key = parse_uri(uri)
    if got != scheme:
        raise UserError(f"{uri!r} is a {got}:// URI; this store reads {scheme}://")
    if not key or key.endswith("/"):
        raise UserError(f"{uri!r} names a folder, not an object", fix="give the object's full key")
    return bucket, key


def _prefix_key(uri: str, scheme: str) -> tuple[str, str]:
    """(bucket, prefix) of a folder URI: the prefix is empty or ends with one '/'."""
    got, bucket, key = parse_uri(uri)
    if got != scheme:
        raise UserError(f"{uri!r} is a {got}:// URI; this store reads {scheme}://")
    key = key.rstrip("/")
    return bucket, f"{key}/" if key else ""


def _plan_download(scheme: str, prefix_uri: str, prefix: str, keys: list[str],
                   local_dir: Path) -> list[tuple[str, Path]]:
    """(key, local path) for each object under ``prefix``; refuses keys that leave ``local_dir``."""
    root = local_dir.resolve()
    plan: list[tuple[str, Path]] = []
    refused: list[str] = []
    for key in keys:
        rel = key[len(prefix):]
        if not rel or rel.endswith("/"):  # the folder markers consoles create
            continue
        parts = rel.split("/")
        dest = root.joinpath(*parts).resolve()
        if rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts) \
                or not dest.is_relative_to(root):
            refused.append(key)
            continue
        plan.append((key, dest))
    if refused:
        shown = ", ".join(repr(k) for k in refused[:5]) + (f" and {len(refused) - 5} more" if len(refused) > 5 else "")
        raise UserError(f"{prefix_uri}: {len(refused)} key(s) would land outside {local_dir}: {shown}",
                        fix="rename those objects: no '..', '.' or empty path segments in keys")
    if not plan:
        raise NotFound(f"nothing under {prefix_uri}", provider=PROVIDERS[scheme],
                       fix="check the URI: a folder of objects is expected here")
    files = {dest for _, dest in plan}
    clashes = sorted(str(d) for d in files if any(p in files for p in d.parents))
    if clashes:
        raise UserError(f"{prefix_uri}: objects are both files and folders here: {clashes[:5]}",
                        fix="rename the objects so no key is another key's folder")
    return plan


def _local_files(local_dir: str | Path) -> list[tuple[Path, str]]:
    root = Path(local_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no folder {root} to upload")
    return [(p, p.relative_to(root).as_posix()) for p in sorted(root.rglob("*")) if p.is_file()]


# --- errors ------------------------------------------------------------------------


def _classify(code: str, status: int) -> type[ProviderError]:
    if code in _NOT_FOUND_CODES or status == 404:
        return NotFound
    if code in _AUTH_CODES or status in (401, 403):
        return AuthFailed
    if code in _THROTTLE_CODES or status == 429:
        return Throttled
    if code in _UNAVAILABLE_CODES or status >= 500:
        return ProviderUnavailable
    if 400 <= status < 500:
        return InvalidRequest
    return ProviderError


def _service_error(scheme: str, op: str, uri: str, code: str, status: int, request_id: str) -> ProviderError:
    cls = _classify(code, status)
    where = f"HTTP {status}" + (f", request {request_id}" if request_id else "")
    fix = _ROLE_FIX[scheme] if cls is AuthFailed else (
        "check the URI: the object or bucket does not exist" if cls is NotFound else None)
    return cls(f"{_LABEL[scheme]} {op} {uri}: {code or 'error'} ({where})",
               provider=PROVIDERS[scheme], code=code, request_id=request_id, fix=fix)


def _client_error(scheme: str, op: str, uri: str, cls: type[ProviderError], what: str) -> ProviderError:
    fix = _ROLE_FIX[scheme] if cls is AuthFailed else None
    return cls(f"{_LABEL[scheme]} {op} {uri}: {what}", provider=PROVIDERS[scheme], fix=fix)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (boto3 wraps upload errors)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


@contextlib.contextmanager
def _vendor_errors(translate: Callable[[BaseException, str, str], GpuschedError | None], op: str,
                   uri: str) -> Iterator[None]:
    try:
        yield
    except GpuschedError:
        raise
    except Exception as exc:
        ours = translate(exc, op, uri)
        if ours is None:
            raise
        raise ours from None  # not chained: the vendor's text can echo what was signed


def _quiet_sdk_loggers() -> None:
    """Set the SDKs' loggers to WARNING unless someone set them higher.

    botocore, oss2 and cos log signed requests (the session token in them) at DEBUG, and
    oss2 logs each error response, echoed string-to-sign included, at INFO. An explicit
    level is needed: an inherited one follows the root logger down when the agent turns
    on DEBUG for itself.
    """
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:  # NOTSET (0) too
            logger.setLevel(logging.WARNING)


def _metadata_text(url: str, *, what: str, scheme: str, timeout: float = 2.0) -> str:
    """One line from the cloud's instance metadata service (a role name, a region)."""
    try:
        # No proxy: the metadata service answers on the instance's own link only.
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=timeout) as resp:
            text = resp.read().decode("utf-8").strip()
    except OSError as exc:
        raise AuthFailed(f"{_LABEL[scheme]}: cannot read the instance's {what} from {url} ({type(exc).__name__})",
                         provider=PROVIDERS[scheme], fix=_ROLE_FIX[scheme]) from None
    line = text.splitlines()[0].strip() if text else ""
    if not line:
        raise AuthFailed(f"{_LABEL[scheme]}: the instance metadata at {url} names no {what}",
                         provider=PROVIDERS[scheme], fix=_ROLE_FIX[scheme])
    return line


# --- S3 ----------------------------------------------------------------------------


def s3_client(*, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A boto3 S3 client on the default credential chain (on EC2: the instance profile).

    ``endpoint_url`` points it elsewhere (a test's moto server, a VPC endpoint).
    """
    import boto3
    from botocore.config import Config

    _quiet_sdk_loggers()
    config = Config(retries={"mode": "standard", "max_attempts": 5})
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


def _s3_translate(exc: BaseException, op: str, uri: str) -> GpuschedError | None:
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - a fake client without botocore installed
        return None
    for e in _chain(exc):
        if isinstance(e, bx.ClientError):
            error = e.response.get("Error", {})
            meta = e.response.get("ResponseMetadata", {})
            status = int(meta.get("HTTPStatusCode") or 0)
            code = str(error.get("Code") or "")
            return _service_error("s3", op, uri, code, status, str(meta.get("RequestId") or ""))
        if isinstance(e, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
            return _client_error("s3", op, uri, AuthFailed, f"no credentials from the instance role "
                                                            f"({type(e).__name__})")
        if isinstance(e, (bx.ConnectionError, bx.HTTPClientError)):
            return _client_error("s3", op, uri, ProviderUnavailable, str(e))
    return None


class S3Store:
    """S3 through boto3. ``client``: a boto3 S3 client; default ``s3_client(endpoint_url=..., region=...)``."""

    scheme = "s3"

    def __init__(self, client: Any = None, *, endpoint_url: str | None = None, region: str | None = None) -> None:
        self._client = client if client is not None else s3_client(endpoint_url=endpoint_url, region=region)

    def download(self, uri: str, local_path: str | Path) -> Path:
        bucket, key = _object_key(uri, self.scheme)
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _vendor_errors(_s3_translate, "download", uri):
            self._client.download_file(bucket, key, str(dest))
        return dest

    def download_tree(self, prefix_uri: str, local_dir: str | Path) -> list[Path]:
        bucket, prefix = _prefix_key(prefix_uri, self.scheme)
        with _vendor_errors(_s3_translate, "list", prefix_uri):
            keys = [obj["Key"]
                    for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                    for obj in page.get("Contents", [])]
        plan = _plan_download(self.scheme, prefix_uri, prefix, keys, Path(local_dir))
        for key, dest in plan:
            self.download(_join(self.scheme, bucket, key), dest)
        return [dest for _, dest in plan]

    def upload(self, local_path: str | Path, uri: str) -> str:
        bucket, key = _object_key(uri, self.scheme)
        src = Path(local_path)
        if not src.is_file():
            raise FileNotFoundError(f"no file {src} to upload")
        with _vendor_errors(_s3_translate, "upload", uri):
            self._client.upload_file(str(src), bucket, key)
        return uri

    def upload_tree(self, local_dir: str | Path, prefix_uri: str) -> list[str]:
        bucket, prefix = _prefix_key(prefix_uri, self.scheme)
        return [self.upload(path, _join(self.scheme, bucket, prefix + rel)) for path, rel in _local_files(local_dir)]

    def exists(self, uri: str) -> bool:
        bucket, key = _object_key(uri, self.scheme)
        try:
            with _vendor_errors(_s3_translate, "exists", uri):
                self._client.head_object(Bucket=bucket, Key=key)
        except NotFound:
            return False
        return True


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
            _quiet_sdk_loggers()
            roles = f"{self.metadata_base}/latest/meta-data/ram/security-credentials/"
            if not self.region:
                self.region = _metadata_text(f"{self.metadata_base}/latest/meta-data/region-id", what="region",
                                             scheme="oss")
            if not self.role_name:
                self.role_name = _metadata_text(roles, what="RAM role", scheme="oss")
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
        return _client_error("oss", op, uri, ProviderUnavailable, "the request did not get through")
    if isinstance(exc, ox.InconsistentError):
        return _client_error("oss", op, uri, ProviderUnavailable, "the CRC of the transfer did not match")
    if isinstance(exc, ox.ClientError):
        # The SDK's own refusals: the RAM role's credentials could not be fetched, a bad bucket name...
        text = str(getattr(exc, "body", "") or "")
        cls = AuthFailed if "credential" in text.lower() else InvalidRequest
        return _client_error("oss", op, uri, cls, text[:300])
    if isinstance(exc, ox.OssError):
        return _service_error("oss", op, uri, str(exc.code or ""), int(exc.status or 0), str(exc.request_id or ""))
    return None


class OssStore:
    """OSS through oss2. ``bucket_factory(name) -> oss2.Bucket``; default ``OssRoleBuckets(...)``."""

    scheme = "oss"

    def __init__(self, bucket_factory: Callable[[str], Any] | None = None, *, region: str | None = None,
                 endpoint: str | None = None, role_name: str | None = None) -> None:
        self._factory = bucket_factory or OssRoleBuckets(region, endpoint=endpoint, role_name=role_name)
        self._buckets: dict[str, Any] = {}

    def _bucket(self, name: str, op: str, uri: str) -> Any:
        if name not in self._buckets:
            with _vendor_errors(_oss_translate, op, uri):
                self._buckets[name] = self._factory(name)
        return self._buckets[name]

    def download(self, uri: str, local_path: str | Path) -> Path:
        import oss2

        name, key = _object_key(uri, self.scheme)
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        bucket = self._bucket(name, "download", uri)
        with _vendor_errors(_oss_translate, "download", uri):
            oss2.resumable_download(bucket, key, str(dest))
        return dest

    def download_tree(self, prefix_uri: str, local_dir: str | Path) -> list[Path]:
        name, prefix = _prefix_key(prefix_uri, self.scheme)
        bucket = self._bucket(name, "list", prefix_uri)
        keys: list[str] = []
        token = ""
        with _vendor_errors(_oss_translate, "list", prefix_uri):
            while True:
                result = bucket.list_objects_v2(prefix=prefix, continuation_token=token, max_keys=1000)
                keys += [obj.key for obj in result.object_list]
                if not result.is_truncated:
                    break
                token = result.next_continuation_token
        plan = _plan_download(self.scheme, prefix_uri, prefix, keys, Path(local_dir))
        for key, dest in plan:
            self.download(_join(self.scheme, name, key), dest)
        return [dest for _, dest in plan]

    def upload(self, local_path: str | Path, uri: str) -> str:
        import oss2

        name, key = _object_key(uri, self.scheme)
        src = Path(local_path)
        if not src.is_file():
            raise FileNotFoundError(f"no file {src} to upload")
        bucket = self._bucket(name, "upload", uri)
        with _vendor_errors(_oss_translate, "upload", uri):
            oss2.resumable_upload(bucket, key, str(src))
        return uri

    def upload_tree(self, local_dir: str | Path, prefix_uri: str) -> list[str]:
        name, prefix = _prefix_key(prefix_uri, self.scheme)
        return [self.upload(path, _join(self.scheme, name, prefix + rel)) for path, rel in _local_files(local_dir)]

    def exists(self, uri: str) -> bool:
        name, key = _object_key(uri, self.scheme)
        bucket = self._bucket(name, "exists", uri)
        with _vendor_errors(_oss_translate, "exists", uri):
            return bool(bucket.object_exists(key))


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
                             provider=PROVIDERS["cos"], fix=_ROLE_FIX["cos"])
        fingerprint = hashlib.sha256(f"{secret_id}\0{secret_key}\0{token}".encode()).hexdigest()
        if self._client is None or fingerprint != self._fingerprint:
            if not self.region:
                self.region = _metadata_text(f"{self.metadata_base}/latest/meta-data/placement/region",
                                             what="region", scheme="cos")
            _quiet_sdk_loggers()
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
        return _service_error("cos", op, uri, str(code or ""), int(exc.get_status_code() or 0), str(request_id or ""))
    if isinstance(exc, cx.CosClientError):
        # Raised after the SDK's retries for timeouts and refused connections, with the requests error's text.
        return _client_error("cos", op, uri, ProviderUnavailable, str(exc)[:300])
    return None


class CosStore:
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
        with _vendor_errors(_cos_translate, op, uri):
            return self._client_for()

    def download(self, uri: str, local_path: str | Path) -> Path:
        bucket, key = _object_key(uri, self.scheme)
        dest = Path(local_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        client = self._client("download", uri)
        with _vendor_errors(_cos_translate, "download", uri):
            client.download_file(Bucket=bucket, Key=key, DestFilePath=str(dest))
        return dest

    def download_tree(self, prefix_uri: str, local_dir: str | Path) -> list[Path]:
        bucket, prefix = _prefix_key(prefix_uri, self.scheme)
        client = self._client("list", prefix_uri)
        keys: list[str] = []
        marker = ""
        with _vendor_errors(_cos_translate, "list", prefix_uri):
            while True:
                page = client.list_objects(Bucket=bucket, Prefix=prefix, Marker=marker, MaxKeys=1000)
                contents = page.get("Contents", [])
                keys += [obj["Key"] for obj in contents]
                if str(page.get("IsTruncated", "false")).lower() != "true" or not contents:
                    break
                marker = page.get("NextMarker") or contents[-1]["Key"]
        plan = _plan_download(self.scheme, prefix_uri, prefix, keys, Path(local_dir))
        for key, dest in plan:
            self.download(_join(self.scheme, bucket, key), dest)
        return [dest for _, dest in plan]

    def upload(self, local_path: str | Path, uri: str) -> str:
        bucket, key = _object_key(uri, self.scheme)
        src = Path(local_path)
        if not src.is_file():
            raise FileNotFoundError(f"no file {src} to upload")
        client = self._client("upload", uri)
        with _vendor_errors(_cos_translate, "upload", uri):
            client.upload_file(Bucket=bucket, Key=key, LocalFilePath=str(src))
        return uri

    def upload_tree(self, local_dir: str | Path, prefix_uri: str) -> list[str]:
        bucket, prefix = _prefix_key(prefix_uri, self.scheme)
        return [self.upload(path, _join(self.scheme, bucket, prefix + rel)) for path, rel in _local_files(local_dir)]

    def exists(self, uri: str) -> bool:
        bucket, key = _object_key(uri, self.scheme)
        client = self._client("exists", uri)
        with _vendor_errors(_cos_translate, "exists", uri):
            return bool(client.object_exists(Bucket=bucket, Key=key))


# --- choosing ----------------------------------------------------------------------

_DEFAULT_STORES: dict[str, Callable[[], ObjectStore]] = {"s3": S3Store, "oss": OssStore, "cos": CosStore}


def store_for(uri: str, **factories: Callable[[], ObjectStore]) -> ObjectStore:
    """The store for ``uri``'s scheme: ``factories[scheme]()`` if given (keys s3, oss, cos), else the role default."""
    unknown = set(factories) - set(SCHEMES)
    if unknown:
        raise TypeError(f"store_for() takes factories for {', '.join(SCHEMES)}, not {', '.join(sorted(unknown))}")
    scheme, _, _ = parse_uri(uri)
    return (factories.get(scheme) or _DEFAULT_STORES[scheme])()
