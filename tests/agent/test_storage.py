"""The agent's object stores and its data.yaml rewriting.

S3 runs over real HTTP: boto3 (on its default credential chain, fed from the
environment here) against moto in server mode on 127.0.0.1, started once for this
module. moto keeps its state in this process and the contract suite shares it, so
every test makes a bucket of its own and nothing here resets moto.

No OSS or COS emulator exists yet. Their tests hand the stores a fake bucket / client
that keeps objects in a dict and raises the SDKs' real exception classes: they check
our side of the SDK calls (which calls, with which arguments, how paging and errors
are handled), not the services. Two more tests run the real SDKs against a local HTTP
server that plays the metadata service and records requests, to check that the role's
session token is what signs them (COS needs our workaround for that).

Every SDK here comes with the ``test`` extra (``gpusched[agent]``); nothing skips.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from oss2 import exceptions as oss_errors
from qcloud_cos.cos_exception import CosClientError, CosServiceError

from scheduler.agent.dataset import localize_data_yaml, stage_dataset
from scheduler.agent.storage.base import ObjectStore, parse_uri
from scheduler.agent.storage.choose import store_for
from scheduler.agent.storage.cos import CosRoleClient, CosStore
from scheduler.agent.storage.oss import OssRoleBuckets, OssStore
from scheduler.agent.storage.s3 import S3Store
from scheduler.errors import (
    AuthFailed,
    InvalidRequest,
    NotFound,
    ProviderUnavailable,
    Throttled,
    UserError,
)

SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLE-session-token-never-logged"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


# --- helpers -------------------------------------------------------------------------


def make_tree(root: Path) -> dict[str, bytes]:
    """A small folder of nested files (one over boto3's 8 MiB multipart threshold); relative path -> bytes."""
    files = {
        "data.yaml": b"train: images/train\nval: images/val\nnames: [helmet]\n",
        "images/train/0001.jpg": os.urandom(70_000),
        "images/train/0002.jpg": os.urandom(1),
        "labels/train/0001.txt": b"0 0.5 0.5 0.2 0.2\n",
        "deep/er/still/x.bin": b"",
        "with space/and-ü.txt": "ünïcode".encode(),
        "big/weights.pt": os.urandom(9 * 1024 * 1024),
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- URIs and choosing a store --------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("s3://bucket/a/b.pt", ("s3", "bucket", "a/b.pt")),
        ("S3://bucket/a", ("s3", "bucket", "a")),
        ("oss://my-bucket/", ("oss", "my-bucket", "")),
        ("oss://my-bucket", ("oss", "my-bucket", "")),
        ("cos://helmet-1250000000/runs/x y?#.txt", ("cos", "helmet-1250000000", "runs/x y?#.txt")),
    ],
)
def test_parse_uri(uri, parsed):
    assert parse_uri(uri) == parsed


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("", "empty"),
        ("/local/path", "not an object-store URI"),
        ("gs://bucket/x", "'gs' is not supported"),
        ("s3:///key", "no valid bucket"),
        ("s3://b/key", "no valid bucket"),
        ("s3://bucket name/key", "no valid bucket"),
    ],
)
def test_parse_uri_refuses(uri, says):
    with pytest.raises(UserError, match=says) as err:
        parse_uri(uri)
    assert err.value.fix


def test_parse_uri_refuses_credentials_without_repeating_them():
    with pytest.raises(UserError) as err:
        parse_uri(f"s3://AKIAEXAMPLE:{SECRET_KEY}@bucket/key")
    assert SECRET_KEY not in str(err.value)
    assert "AKIAEXAMPLE" not in str(err.value)


def test_store_for_picks_by_scheme(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    fake = CosStore(client=FakeCos())
    assert store_for("cos://b-1250000000/x", cos=lambda: fake) is fake
    # The defaults build their SDK clients without a network call (the role is read on first use).
    assert isinstance(store_for("s3://bucket/x"), S3Store)
    assert isinstance(store_for("oss://bucket/x"), OssStore)
    assert isinstance(store_for("cos://bucket-1250000000/x"), CosStore)
    for store in (store_for("s3://bucket/x"), store_for("oss://bucket/x"), fake):
        assert isinstance(store, ObjectStore)
    with pytest.raises(UserError):
        store_for("gs://bucket/x")
    with pytest.raises(TypeError, match="gs"):
        store_for("s3://bucket/x", gs=lambda: fake)


# --- S3 over moto -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(moto_endpoint, monkeypatch, tmp_path) -> tuple[S3Store, str, Any]:
    """(store on the default credential chain, a fresh bucket, a raw boto3 client for setting up)."""
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIAGPUSCHEDAGENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    bucket = f"gpusched-{uuid.uuid4().hex[:12]}"
    raw = boto3.client("s3", endpoint_url=moto_endpoint)
    raw.create_bucket(Bucket=bucket)
    return S3Store(endpoint_url=moto_endpoint), bucket, raw


def test_s3_tree_round_trip_is_byte_equal(s3, tmp_path):
    store, bucket, _ = s3
    files = make_tree(tmp_path / "out")
    uris = store.upload_tree(tmp_path / "out", f"s3://{bucket}/runs/helmet/")
    assert uris == [f"s3://{bucket}/runs/helmet/{rel}" for rel in sorted(read_tree(tmp_path / "out"))]
    assert sorted(uris) == sorted(f"s3://{bucket}/runs/helmet/{rel}" for rel in files)

    got = store.download_tree(f"s3://{bucket}/runs/helmet", tmp_path / "back")
    assert read_tree(tmp_path / "back") == files
    assert sorted(got) == sorted((tmp_path / "back" / rel).resolve() for rel in files)


def test_s3_prefix_is_a_folder_and_nested_keys_keep_their_paths(s3, tmp_path):
    store, bucket, raw = s3
    for key in ("ds/a.txt", "ds/sub/b.txt", "ds/sub/deeper/c.txt", "ds2/not-mine.txt", "ds/", "ds/sub/"):
        raw.put_object(Bucket=bucket, Key=key, Body=key.encode())
    got = store.download_tree(f"s3://{bucket}/ds", tmp_path / "local")
    assert read_tree(tmp_path / "local") == {
        "a.txt": b"ds/a.txt", "sub/b.txt": b"ds/sub/b.txt", "sub/deeper/c.txt": b"ds/sub/deeper/c.txt"}
    assert len(got) == 3
    store.download_tree(f"s3://{bucket}/ds/sub/", tmp_path / "sub")
    assert read_tree(tmp_path / "sub") == {"b.txt": b"ds/sub/b.txt", "deeper/c.txt": b"ds/sub/deeper/c.txt"}


def test_s3_single_object_both_ways_and_exists(s3, tmp_path):
    store, bucket, _ = s3
    src = tmp_path / "last.pt"
    src.write_bytes(os.urandom(4096))
    uri = f"s3://{bucket}/runs/helmet/weights/last.pt"
    assert not store.exists(uri)
    assert store.upload(src, uri) == uri
    assert store.exists(uri)
    dest = store.download(uri, tmp_path / "new" / "folder" / "last.pt")
    assert dest.read_bytes() == src.read_bytes()
    with pytest.raises(UserError, match="folder"):
        store.exists(f"s3://{bucket}/runs/")


def test_s3_missing_things_are_not_found(s3, tmp_path):
    store, bucket, _ = s3
    with pytest.raises(NotFound) as err:
        store.download(f"s3://{bucket}/no/such.pt", tmp_path / "x.pt")
    assert err.value.provider == "aws" and err.value.code == "404"
    assert f"s3://{bucket}/no/such.pt" in str(err.value)
    assert not (tmp_path / "x.pt").exists()
    with pytest.raises(NotFound, match="nothing under"):
        store.download_tree(f"s3://{bucket}/no-such-folder", tmp_path / "empty")
    with pytest.raises(NotFound) as err:
        store.download_tree("s3://gpusched-no-such-bucket-here/ds", tmp_path / "empty")
    assert err.value.code == "NoSuchBucket"
    with pytest.raises(FileNotFoundError):
        store.upload(tmp_path / "never-written.pt", f"s3://{bucket}/x.pt")


@pytest.mark.parametrize("bad", ["../escape.txt", "a/../../escape.txt", "a/../b.txt", "./x.txt", "a//b.txt"])
def test_s3_keys_that_would_leave_the_folder_are_refused_before_anything_is_written(s3, tmp_path, bad):
    store, bucket, raw = s3
    raw.put_object(Bucket=bucket, Key="ds/fine.txt", Body=b"fine")
    raw.put_object(Bucket=bucket, Key=f"ds/{bad}", Body=b"evil")
    local = tmp_path / "deep" / "local"
    with pytest.raises(UserError, match="outside") as err:
        store.download_tree(f"s3://{bucket}/ds/", local)
    assert repr(f"ds/{bad}") in str(err.value)
    assert not local.exists()
    assert not list(tmp_path.rglob("escape.txt"))


def test_s3_keys_that_are_both_file_and_folder_are_refused(s3, tmp_path):
    store, bucket, raw = s3
    raw.put_object(Bucket=bucket, Key="ds/a", Body=b"file")
    raw.put_object(Bucket=bucket, Key="ds/a/b", Body=b"inside")
    with pytest.raises(UserError, match="both files and folders"):
        store.download_tree(f"s3://{bucket}/ds", tmp_path / "local")


def test_s3_default_client_keeps_the_session_token_out_of_the_logs(s3, tmp_path, caplog):
    store, bucket, _ = s3
    src = tmp_path / "f.txt"
    src.write_text("x")
    with caplog.at_level(logging.DEBUG):
        store.upload(src, f"s3://{bucket}/f.txt")
        with pytest.raises(NotFound):
            store.download(f"s3://{bucket}/missing.txt", tmp_path / "m.txt")
    assert SESSION_TOKEN not in caplog.text and SECRET_KEY not in caplog.text
    assert logging.getLogger("botocore").level == logging.WARNING


def test_s3_accepts_an_injected_client(s3, moto_endpoint, tmp_path):
    _, bucket, raw = s3
    raw.put_object(Bucket=bucket, Key="k.txt", Body=b"injected")
    store = S3Store(boto3.client("s3", endpoint_url=moto_endpoint))
    assert store.download(f"s3://{bucket}/k.txt", tmp_path / "k.txt").read_bytes() == b"injected"


class RaisingS3:
    """A boto3-shaped client whose every call raises ``exc``."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def download_file(self, *a: Any, **k: Any) -> None:
        raise self.exc

    def upload_file(self, *a: Any, **k: Any) -> None:
        try:
            raise self.exc
        except ClientError as e:  # boto3 wraps upload errors so, the ClientError as its context
            from boto3.exceptions import S3UploadFailedError

            raise S3UploadFailedError(f"Failed to upload: {e}")

    def head_object(self, **k: Any) -> None:
        raise self.exc


def client_error(code: str, status: int, message: str = "whatever") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "REQ123"}}, "GetObject")


@pytest.mark.parametrize(
    ("exc", "ours"),
    [
        (client_error("AccessDenied", 403), AuthFailed),
        (client_error("ExpiredToken", 400), AuthFailed),
        (client_error("SlowDown", 503), Throttled),
        (client_error("InternalError", 500), ProviderUnavailable),
        (client_error("InvalidRequest", 400), InvalidRequest),
        (client_error("NoSuchKey", 404), NotFound),
        (NoCredentialsError(), AuthFailed),
        (EndpointConnectionError(endpoint_url="https://s3.amazonaws.com"), ProviderUnavailable),
    ],
)
def test_s3_vendor_errors_become_ours(tmp_path, exc, ours):
    store = S3Store(RaisingS3(exc))
    src = tmp_path / "f"
    src.write_text("x")
    for call in (lambda: store.download("s3://bucket/k", tmp_path / "k"), lambda: store.upload(src, "s3://bucket/k")):
        with pytest.raises(ours) as err:
            call()
        assert err.value.provider == "aws"
        assert err.value.__suppress_context__
        if isinstance(exc, ClientError):
            assert err.value.code == exc.response["Error"]["Code"] and err.value.request_id == "REQ123"
        if ours is AuthFailed:
            assert "s3:GetObject" in (err.value.fix or "")


def test_s3_signature_error_text_is_not_repeated():
    store = S3Store(RaisingS3(client_error("SignatureDoesNotMatch", 403, f"StringToSign {SESSION_TOKEN}")))
    with pytest.raises(AuthFailed) as err:
        store.exists("s3://bucket/k")
    assert SESSION_TOKEN not in str(err.value)


# --- OSS: a fake bucket --------------------------------------------------------------------


def oss_error(cls: type, status: int, code: str, **details: str) -> Exception:
    return cls(status, {"x-oss-request-id": "OSSREQ1"}, b"", {"Code": code, "Message": "m", **details})


class FakeOssBucket:
    """The oss2.Bucket calls OssStore (and oss2's resumable helpers, below their thresholds) make."""

    def __init__(self, name: str, objects: dict[str, bytes] | None = None, *, page: int = 2,
                 fail: Exception | None = None) -> None:
        self.bucket_name = name
        self.objects = dict(objects or {})
        self.page = page
        self.fail = fail
        self.calls: list[tuple[str, Any]] = []

    def _check(self, op: str, arg: Any) -> None:
        self.calls.append((op, arg))
        if self.fail is not None:
            raise self.fail

    def _get(self, key: str) -> bytes:
        if key not in self.objects:
            raise oss_error(oss_errors.NoSuchKey, 404, "NoSuchKey")
        return self.objects[key]

    def head_object(self, key, params=None, headers=None):
        self._check("head_object", key)
        return SimpleNamespace(content_length=len(self._get(key)))

    def get_object_to_file(self, key, filename, progress_callback=None, params=None, headers=None):
        self._check("get_object_to_file", key)
        Path(filename).write_bytes(self._get(key))

    def put_object(self, key, data, headers=None, progress_callback=None):
        self._check("put_object", key)
        self.objects[key] = data.read()

    def list_objects_v2(self, prefix="", continuation_token="", max_keys=100, **_):
        self._check("list_objects_v2", (prefix, continuation_token))
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        start = int(continuation_token or 0)
        chunk = keys[start:start + self.page]
        more = start + self.page < len(keys)
        return SimpleNamespace(object_list=[SimpleNamespace(key=k) for k in chunk], is_truncated=more,
                               next_continuation_token=str(start + self.page) if more else "")

    def object_exists(self, key):
        self._check("object_exists", key)
        return key in self.objects


def test_oss_tree_round_trip_through_the_adapter(tmp_path):
    buckets: dict[str, FakeOssBucket] = {}

    def factory(name: str) -> FakeOssBucket:
        buckets[name] = FakeOssBucket(name)
        return buckets[name]

    store = OssStore(factory)
    files = make_tree(tmp_path / "out")
    files.pop("big/weights.pt")
    (tmp_path / "out" / "big" / "weights.pt").unlink()
    uris = store.upload_tree(tmp_path / "out", "oss://helmet-data/runs/r1")
    assert sorted(uris) == sorted(f"oss://helmet-data/runs/r1/{rel}" for rel in files)
    assert set(buckets) == {"helmet-data"}  # one bucket object, reused
    fake = buckets["helmet-data"]
    fake.objects["runs/r1/"] = b""  # a console's folder marker
    fake.objects["runs/r10/other.txt"] = b"not under runs/r1/"

    got = store.download_tree("oss://helmet-data/runs/r1/", tmp_path / "back")
    assert read_tree(tmp_path / "back") == files
    assert len(got) == len(files)
    listing = [arg for op, arg in fake.calls if op == "list_objects_v2"]
    assert listing[0] == ("runs/r1/", "") and len(listing) > 2  # paged with the continuation token
    assert store.exists("oss://helmet-data/runs/r1/data.yaml")
    assert not store.exists("oss://helmet-data/runs/r1/nope")


def test_oss_refuses_escaping_keys_and_finds_missing_ones(tmp_path):
    fake = FakeOssBucket("b-oss", {"ds/ok.txt": b"1", "ds/../../x.txt": b"2"})
    store = OssStore(lambda name: fake)
    with pytest.raises(UserError, match="outside"):
        store.download_tree("oss://b-oss/ds", tmp_path / "local")
    assert not (tmp_path / "local").exists()
    with pytest.raises(NotFound) as err:
        store.download("oss://b-oss/ds/missing.pt", tmp_path / "m.pt")
    assert (err.value.provider, err.value.code, err.value.request_id) == ("alibaba", "NoSuchKey", "OSSREQ1")


@pytest.mark.parametrize(
    ("exc", "ours"),
    [
        (oss_error(oss_errors.AccessDenied, 403, "AccessDenied"), AuthFailed),
        (oss_error(oss_errors.NoSuchBucket, 404, "NoSuchBucket"), NotFound),
        (oss_error(oss_errors.ServerError, 503, "ServiceUnavailable"), ProviderUnavailable),
        (oss_error(oss_errors.ServerError, 503, "SlowDown"), Throttled),
        (oss_errors.RequestError(ConnectionError("connection refused")), ProviderUnavailable),
        (oss_errors.ClientError("Failed to get credentials from ECS metadata service."), AuthFailed),
    ],
)
def test_oss_vendor_errors_become_ours(tmp_path, exc, ours):
    store = OssStore(lambda name: FakeOssBucket(name, {"k": b"v"}, fail=exc))
    src = tmp_path / "f"
    src.write_text("x")
    for call in (lambda: store.download("oss://bkt/k", tmp_path / "k"), lambda: store.upload(src, "oss://bkt/k"),
                 lambda: store.exists("oss://bkt/k"), lambda: store.download_tree("oss://bkt/", tmp_path / "t")):
        with pytest.raises(ours) as err:
            call()
        assert err.value.provider == "alibaba" and err.value.__suppress_context__
        if ours is AuthFailed:
            assert "RAM role" in (err.value.fix or "")


def test_oss_signature_error_details_are_not_repeated(tmp_path):
    exc = oss_error(oss_errors.SignatureDoesNotMatch, 403, "SignatureDoesNotMatch",
                    CanonicalRequest=f"HEAD\n/k\nx-oss-security-token:{SESSION_TOKEN}")
    assert SESSION_TOKEN in str(exc)  # what oss2 would print
    store = OssStore(lambda name: FakeOssBucket(name, fail=exc))
    with pytest.raises(AuthFailed) as err:
        store.exists("oss://bkt/k")
    assert SESSION_TOKEN not in str(err.value) and SESSION_TOKEN not in repr(err.value)


# --- COS: a fake client ---------------------------------------------------------------------


def cos_error(status: int, code: str) -> CosServiceError:
    return CosServiceError("GET", {"code": code, "message": "m", "resource": "r", "requestid": "COSREQ1",
                                   "traceid": "t"}, status)


class FakeCos:
    """The CosS3Client calls CosStore makes, against a dict of bucket -> key -> bytes."""

    def __init__(self, page: int = 2, fail: Exception | None = None) -> None:
        self.buckets: dict[str, dict[str, bytes]] = {}
        self.page = page
        self.fail = fail
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _check(self, op: str, **kw: Any) -> None:
        self.calls.append((op, kw))
        if self.fail is not None:
            raise self.fail

    def _get(self, bucket: str, key: str) -> bytes:
        if key not in self.buckets.get(bucket, {}):
            raise cos_error(404, "NoSuchKey")
        return self.buckets[bucket][key]

    def upload_file(self, Bucket, Key, LocalFilePath, **kw):
        self._check("upload_file", Bucket=Bucket, Key=Key)
        self.buckets.setdefault(Bucket, {})[Key] = Path(LocalFilePath).read_bytes()

    def download_file(self, Bucket, Key, DestFilePath, **kw):
        self._check("download_file", Bucket=Bucket, Key=Key)
        Path(DestFilePath).write_bytes(self._get(Bucket, Key))

    def list_objects(self, Bucket, Prefix="", Marker="", MaxKeys=1000, **kw):
        self._check("list_objects", Bucket=Bucket, Prefix=Prefix, Marker=Marker)
        keys = sorted(k for k in self.buckets.get(Bucket, {}) if k.startswith(Prefix) and k > Marker)
        chunk = keys[:self.page]
        page: dict[str, Any] = {"IsTruncated": "true" if len(keys) > self.page else "false"}
        if chunk:
            page["Contents"] = [{"Key": k, "Size": str(len(self.buckets[Bucket][k]))} for k in chunk]
        return page  # like COS without a delimiter: no NextMarker, the last key is the marker

    def object_exists(self, Bucket, Key):
        self._check("object_exists", Bucket=Bucket, Key=Key)
        return Key in self.buckets.get(Bucket, {})


def test_cos_tree_round_trip_through_the_adapter(tmp_path):
    fake = FakeCos()
    store = CosStore(client=fake)
    files = make_tree(tmp_path / "out")
    files.pop("big/weights.pt")
    (tmp_path / "out" / "big" / "weights.pt").unlink()
    uris = store.upload_tree(tmp_path / "out", "cos://helmet-1250000000/")
    assert sorted(uris) == sorted(f"cos://helmet-1250000000/{rel}" for rel in files)
    got = store.download_tree("cos://helmet-1250000000", tmp_path / "back")
    assert read_tree(tmp_path / "back") == files and len(got) == len(files)
    markers = [kw["Marker"] for op, kw in fake.calls if op == "list_objects"]
    assert markers[0] == "" and len(markers) >= len(files) // 2
    assert store.exists("cos://helmet-1250000000/data.yaml")
    assert not store.exists("cos://helmet-1250000000/nope")
    with pytest.raises(NotFound) as err:
        store.download("cos://helmet-1250000000/nope.pt", tmp_path / "n.pt")
    assert (err.value.provider, err.value.code, err.value.request_id) == ("tencent", "NoSuchKey", "COSREQ1")


def test_cos_refuses_escaping_keys(tmp_path):
    fake = FakeCos()
    fake.buckets["b-1250000000"] = {"ds/ok.txt": b"1", "ds/sub/../../../x.txt": b"2"}
    with pytest.raises(UserError, match="outside"):
        CosStore(client=fake).download_tree("cos://b-1250000000/ds", tmp_path / "local")
    assert not (tmp_path / "local").exists()


@pytest.mark.parametrize(
    ("exc", "ours"),
    [
        (cos_error(403, "AccessDenied"), AuthFailed),
        (cos_error(404, "NoSuchBucket"), NotFound),
        (cos_error(503, "SlowDown"), Throttled),
        (cos_error(500, "InternalError"), ProviderUnavailable),
        (CosClientError("HTTPSConnectionPool(host='x'): Read timed out."), ProviderUnavailable),
    ],
)
def test_cos_vendor_errors_become_ours(tmp_path, exc, ours):
    store = CosStore(client=FakeCos(fail=exc))
    src = tmp_path / "f"
    src.write_text("x")
    for call in (lambda: store.download("cos://b-1250000000/k", tmp_path / "k"),
                 lambda: store.upload(src, "cos://b-1250000000/k"),
                 lambda: store.exists("cos://b-1250000000/k"),
                 lambda: store.download_tree("cos://b-1250000000/", tmp_path / "t")):
        with pytest.raises(ours) as err:
            call()
        assert err.value.provider == "tencent" and err.value.__suppress_context__
        if ours is AuthFailed:
            assert "CAM role" in (err.value.fix or "")


# --- the role's credentials on the wire (real oss2 / cos SDKs, a local recording server) ---


class Recorder(http.server.BaseHTTPRequestHandler):
    """Plays the ECS metadata service and answers every other request 200, recording it."""

    requests: list[tuple[str, str, dict[str, str]]]
    role_json: dict[str, str]

    def _answer(self, body: bytes = b"", status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", "Wed, 02 Dec 2026 09:00:00 GMT")
        self.send_header("ETag", '"0123"')
        self.send_header("x-oss-request-id", "OSSREQ")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        roles = "/latest/meta-data/ram/security-credentials/"
        if self.path == roles:
            return self._answer(b"gpusched-agent-role\n")
        if self.path == roles + "gpusched-agent-role":
            return self._answer(json.dumps(self.role_json).encode())
        self.requests.append((self.command, self.path, dict(self.headers)))
        return self._answer()

    do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, type[Recorder]]]:
    handler = type("R", (Recorder,), {"requests": [], "role_json": {}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_oss_default_signs_with_the_ecs_ram_role(recorder, caplog):
    addr, handler = recorder
    now = datetime.now(UTC).replace(microsecond=0)
    handler.role_json = {
        "Code": "Success", "AccessKeyId": "STS.agentid", "AccessKeySecret": SECRET_KEY,
        "SecurityToken": SESSION_TOKEN, "Expiration": (now + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "LastUpdated": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    buckets = OssRoleBuckets("cn-hangzhou", endpoint=f"http://{addr}", metadata_base=f"http://{addr}")
    with caplog.at_level(logging.DEBUG):
        assert OssStore(buckets).exists("oss://helmet-data/runs/last.pt")
    assert SESSION_TOKEN not in caplog.text and SECRET_KEY not in caplog.text
    assert buckets.role_name == "gpusched-agent-role"
    (method, path, headers), = handler.requests
    assert method == "HEAD" and unquote(path).startswith("/helmet-data/runs/last.pt?")
    headers = {k.lower(): v for k, v in headers.items()}
    assert headers["x-oss-security-token"] == SESSION_TOKEN
    assert headers["authorization"].startswith("OSS4-HMAC-SHA256 Credential=STS.agentid/")
    assert SECRET_KEY not in json.dumps(headers)


class RotatingCredential:
    """What CVMRoleCredential offers: ``get_credential_info() -> (id, key, token)``."""

    def __init__(self) -> None:
        self.n = 1

    def get_credential_info(self) -> tuple[str | None, str | None, str | None]:
        if self.n == 0:
            return None, None, None
        return f"AKIDtmp{self.n}", f"{SECRET_KEY}{self.n}", f"{SESSION_TOKEN}-{self.n}"


def test_cos_default_sends_the_cam_roles_token_and_follows_its_rotation(recorder, caplog):
    addr, handler = recorder
    cred = RotatingCredential()
    store = CosStore(client_factory=CosRoleClient("ap-guangzhou", credentials=cred, scheme="http", domain=addr))
    with caplog.at_level(logging.DEBUG):
        assert store.exists("cos://helmet-1250000000/runs/last.pt")
        cred.n = 2
        assert store.exists("cos://helmet-1250000000/runs/last.pt")
    assert SESSION_TOKEN not in caplog.text and SECRET_KEY not in caplog.text
    sent = [{k.lower(): v for k, v in h.items()} for _, _, h in handler.requests]
    assert [h["x-cos-security-token"] for h in sent] == [f"{SESSION_TOKEN}-1", f"{SESSION_TOKEN}-2"]
    assert "q-ak=AKIDtmp1" in sent[0]["authorization"] and "q-ak=AKIDtmp2" in sent[1]["authorization"]
    assert SECRET_KEY not in json.dumps(sent)
    cred.n = 0
    with pytest.raises(AuthFailed, match="CAM role") as err:
        store.exists("cos://helmet-1250000000/runs/last.pt")
    assert err.value.fix


def test_metadata_service_out_of_reach_is_an_auth_failure():
    buckets = OssRoleBuckets("cn-hangzhou", endpoint="http://127.0.0.1:9", metadata_base="http://127.0.0.1:9")
    with pytest.raises(AuthFailed, match="RAM role") as err:
        OssStore(buckets).exists("oss://helmet-data/k")
    assert err.value.fix and "RAM role" in err.value.fix


# --- data.yaml ------------------------------------------------------------------------


LOCAL = "/opt/gpusched/work/data"


@pytest.mark.parametrize(
    ("text", "splits"),
    [
        # relative path: the staged folder replaces it
        ("path: ../datasets/coco\ntrain: images/train2017\nval: images/val2017\ntest: \nnames: {0: person}\n",
         {"train": "images/train2017", "val": "images/val2017", "test": None}),
        # no path at all
        ("train: images/train\nval: ./images/val/\nnc: 2\nnames: [helmet, head]\n",
         {"train": "images/train", "val": "images/val"}),
        # an absolute path on the author's machine; entries absolute under it are rebased
        ("path: /datasets/helmet\ntrain: /datasets/helmet/images/train\nval: images/val\n"
         "test: /datasets/helmet\nnames: [helmet]\n",
         {"train": "images/train", "val": "images/val", "test": "."}),
        # lists, and a .txt of image paths
        ("path: /datasets/x\ntrain: [a/images, /datasets/x/b/images, c/../d/images]\nval: val.txt\nnames: [x]\n",
         {"train": ["a/images", "b/images", "d/images"], "val": "val.txt"}),
    ],
)
def test_localize_data_yaml(text, splits):
    out = yaml.safe_load(localize_data_yaml(text, LOCAL))
    original = yaml.safe_load(text)
    assert out["path"] == LOCAL
    for split, want in splits.items():
        assert out[split] == want
        for entry in (want if isinstance(want, list) else [want] if want else []):
            assert os.path.normpath(os.path.join(LOCAL, entry)).startswith(LOCAL)
    for key in ("names", "nc"):
        assert out.get(key) == original.get(key)
    assert list(out)[0] == "path"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("train: ../outside/images\nval: images/val\n", "leaves the dataset folder"),
        ("train: images/../../x\nval: images/val\n", "leaves the dataset folder"),
        ("path: /datasets/x\ntrain: [ok, ../../etc]\nval: v\n", "leaves the dataset folder"),
        ("train: https://example.com/coco.zip\nval: v\n", "is a URL"),
        ("train: s3://bucket/images\nval: v\n", "is a URL"),
        ("train: //nas/share/images\nval: v\n", "another host"),
        ("train: 'C:\\data\\images'\nval: v\n", "another machine"),
        ("path: /datasets/x\ntrain: /other/images\nval: v\n", "outside the dataset's path"),
        ("train: /datasets/x/images\nval: v\n", "outside the dataset's path"),
        ("path: relative/x\ntrain: /relative/x/images\nval: v\n", "outside the dataset's path"),
        ("train: 123\nval: v\n", "is not a path"),
        ("- just\n- a list\n", "must be a mapping"),
        ("train: [unclosed\n", "not valid YAML"),
    ],
)
def test_localize_data_yaml_refuses(text, says):
    with pytest.raises(UserError, match=says) as err:
        localize_data_yaml(text, LOCAL)
    assert err.value.fix


def test_localize_data_yaml_wants_an_absolute_folder():
    with pytest.raises(ValueError):
        localize_data_yaml("train: a\nval: b\n", "relative/dir")


def test_stage_dataset_over_s3(s3, tmp_path):
    store, bucket, raw = s3
    raw.put_object(Bucket=bucket, Key="helmet/data.yaml",
                   Body=b"path: /datasets/helmet\ntrain: images/train\nval: /datasets/helmet/images/val\n"
                        b"names: {0: helmet, 1: head}\n")
    for key in ("helmet/images/train/1.jpg", "helmet/images/val/2.jpg"):
        raw.put_object(Bucket=bucket, Key=key, Body=b"jpg")
    data_yaml = stage_dataset(store, f"s3://{bucket}/helmet", tmp_path / "work" / "data")
    doc = yaml.safe_load(data_yaml.read_text())
    assert doc["path"] == str((tmp_path / "work" / "data").resolve())
    assert doc["names"] == {0: "helmet", 1: "head"}
    for split in ("train", "val"):
        assert (Path(doc["path"]) / doc[split]).is_dir()
    raw.put_object(Bucket=bucket, Key="no-yaml/images/1.jpg", Body=b"jpg")
    with pytest.raises(UserError, match="no data.yaml"):
        stage_dataset(store, f"s3://{bucket}/no-yaml", tmp_path / "other")

