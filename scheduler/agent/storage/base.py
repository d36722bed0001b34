"""The interface every store meets, URIs, and the error translation the three stores share."""

from __future__ import annotations

import contextlib
import logging
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

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

SCHEMES = ("s3", "oss", "cos")
PROVIDERS = {"s3": "aws", "oss": "alibaba", "cos": "tencent"}  # the ``provider`` field of our errors
ALIBABA_METADATA = "http://100.100.100.200"
TENCENT_METADATA = "http://metadata.tencentyun.com"
_URI_EXAMPLE = "s3://bucket/path/to/object, oss://bucket/path or cos://bucket-1250000000/path"
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")
_LABEL = {"s3": "S3", "oss": "OSS", "cos": "COS"}
ROLE_FIX = {
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


class TreeCopies:
    """``download_tree``, ``upload_tree`` and the upload's source check, the same for every cloud: a store
    that lists a prefix's keys (``_keys``) and copies one object each way gets the rest from here."""

    scheme: str

    def _keys(self, bucket: str, prefix: str, prefix_uri: str) -> list[str]:
        """Every key under ``prefix`` in ``bucket``, all pages of the listing."""
        raise NotImplementedError

    def download(self, uri: str, local_path: str | Path) -> Path:
        raise NotImplementedError

    def upload(self, local_path: str | Path, uri: str) -> str:
        raise NotImplementedError

    def download_tree(self, prefix_uri: str, local_dir: str | Path) -> list[Path]:
        bucket, prefix = prefix_key(prefix_uri, self.scheme)
        plan = plan_download(self.scheme, prefix_uri, prefix, self._keys(bucket, prefix, prefix_uri), Path(local_dir))
        for key, dest in plan:
            self.download(join(self.scheme, bucket, key), dest)
        return [dest for _, dest in plan]

    def upload_tree(self, local_dir: str | Path, prefix_uri: str) -> list[str]:
        bucket, prefix = prefix_key(prefix_uri, self.scheme)
        return [self.upload(path, join(self.scheme, bucket, prefix + rel)) for path, rel in local_files(local_dir)]


def upload_source(local_path: str | Path) -> Path:
    """The file an upload reads; a missing one is the usual ``FileNotFoundError``, before any cloud call."""
    src = Path(local_path)
    if not src.is_file():
        raise FileNotFoundError(f"no file {src} to upload")
    return src


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


def join(scheme: str, bucket: str, key: str) -> str:
    return f"{scheme}://{bucket}/{key}"


def object_key(uri: str, scheme: str) -> tuple[str, str]:
    """(bucket, key) of a URI that must name one object of this store's scheme."""
    got, bucket, key = parse_uri(uri)
    if got != scheme:
        raise UserError(f"{uri!r} is a {got}:// URI; this store reads {scheme}://")
    if not key or key.endswith("/"):
        raise UserError(f"{uri!r} names a folder, not an object", fix="give the object's full key")
    return bucket, key


def prefix_key(uri: str, scheme: str) -> tuple[str, str]:
    """(bucket, prefix) of a folder URI: the prefix is empty or ends with one '/'."""
    got, bucket, key = parse_uri(uri)
    if got != scheme:
        raise UserError(f"{uri!r} is a {got}:// URI; this store reads {scheme}://")
    key = key.rstrip("/")
    return bucket, f"{key}/" if key else ""


def plan_download(scheme: str, prefix_uri: str, prefix: str, keys: list[str],
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


def local_files(local_dir: str | Path) -> list[tuple[Path, str]]:
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


def service_error(scheme: str, op: str, uri: str, code: str, status: int, request_id: str) -> ProviderError:
    cls = _classify(code, status)
    where = f"HTTP {status}" + (f", request {request_id}" if request_id else "")
    fix = ROLE_FIX[scheme] if cls is AuthFailed else (
        "check the URI: the object or bucket does not exist" if cls is NotFound else None)
    return cls(f"{_LABEL[scheme]} {op} {uri}: {code or 'error'} ({where})",
               provider=PROVIDERS[scheme], code=code, request_id=request_id, fix=fix)


def client_error(scheme: str, op: str, uri: str, cls: type[ProviderError], what: str) -> ProviderError:
    fix = ROLE_FIX[scheme] if cls is AuthFailed else None
    return cls(f"{_LABEL[scheme]} {op} {uri}: {what}", provider=PROVIDERS[scheme], fix=fix)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (boto3 wraps upload errors)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


@contextlib.contextmanager
def vendor_errors(translate: Callable[[BaseException, str, str], GpuschedError | None], op: str,
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


def quiet_sdk_loggers() -> None:
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


def metadata_text(url: str, *, what: str, scheme: str, timeout: float = 2.0) -> str:
    """One line from the cloud's instance metadata service (a role name, a region)."""
    try:
        # No proxy: the metadata service answers on the instance's own link only.
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=timeout) as resp:
            text = resp.read().decode("utf-8").strip()
    except OSError as exc:
        raise AuthFailed(f"{_LABEL[scheme]}: cannot read the instance's {what} from {url} ({type(exc).__name__})",
                         provider=PROVIDERS[scheme], fix=ROLE_FIX[scheme]) from None
    line = text.splitlines()[0].strip() if text else ""
    if not line:
        raise AuthFailed(f"{_LABEL[scheme]}: the instance metadata at {url} names no {what}",
                         provider=PROVIDERS[scheme], fix=ROLE_FIX[scheme])
    return line
