"""The AWS adapter under the contract suite: real boto3, real HTTP, a local moto server.

moto (server mode, in a thread on 127.0.0.1, one per test session) plays EC2.
What moto does not do, ``AwsWire`` adds at the HTTP layer through botocore's
``before-send`` event on each client: a handler there sees the signed request
and may answer it itself, so the adapter and the SDK run unchanged while the
wire behaves like AWS where moto does not:

* ClientToken idempotency (moto launches a second instance for a repeated
  token): the wire remembers token -> instance and answers a repeat with that
  instance, or with ``IdempotentParameterMismatch`` when the type, zone or
  market differ, as AWS does;
* stock-outs: ``InsufficientInstanceCapacity`` for RunInstances of a sold-out
  type / zone / market;
* faults: AWS XML error bodies with AWS's codes and HTTP status;
* a lost launch response: the launch reaches moto, then the caller gets a read
  timeout;
* credentials: moto accepts any; the wire refuses requests signed with an
  access key it was not told about (AuthFailure, 401). This tests the
  adapter's translation of AWS's refusal, not AWS's authentication;
* random faults (``faults``, a ``providers.emulators.faults.FaultPlan``), the
  same switch the Alibaba and Tencent emulators have: ``RequestLimitExceeded``
  (503, with ``Retry-After``), ``Unavailable`` (503), no answer (the request
  never reaches moto), or no answer after moto carried the call out.

A spot reclaim is made in moto's in-process backend: the instance is
terminated with the state reason AWS gives (``Server.SpotInstanceTermination``).
moto changes states at once, so the harness clock only drives the adapter
(retry back-off, price dates).

Harnesses share the session's moto and are kept apart by a cluster tag of
their own (see ``AwsHarness``); ``tests/providers/test_aws.py`` reuses all of this.
"""

from __future__ import annotations

import atexit
import http.client
import importlib.util
import itertools
import logging
import os
import threading
import xml.etree.ElementTree as ET
from collections import Counter, deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit
from xml.sax.saxutils import escape

from providers.base import (
    AuthFailed,
    Instance,
    InvalidRequest,
    NoCapacity,
    NotFound,
    Provider,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.catalog import load_catalog
from providers.emulators.faults import FaultPlan
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer
from tests.optional import missing

if TYPE_CHECKING:
    from botocore.awsrequest import AWSPreparedRequest, AWSResponse

    from providers.aws.adapter import AwsProvider
    from providers.aws.client import EC2Client
    from providers.aws.config import AwsConfig

# The AWS cases need the aws and test extras; without them they skip, saying so.
# boto3 and moto are imported where used: the contract suite imports every
# harness, and moto alone takes a second to import.
_MISSING = [m for m in ("boto3", "moto") if importlib.util.find_spec(m) is None]

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
REGIONS = ("us-east-1", "us-west-2")
GOOD_KEY = "AKIAGPUSCHEDHARNESS1"
WRONG_KEY = "AKIAGPUSCHEDWRONGKEY"
SECRET = "harness-secret-not-a-real-one"
SPOT_RECLAIM_CODE = "Server.SpotInstanceTermination"

# The contract's operation names -> the EC2 action that does the work.
ACTIONS = {
    "offers": "DescribeSpotPriceHistory",
    "launch": "RunInstances",
    "instances": "DescribeInstances",
    "stop": "StopInstances",
    "start": "StartInstances",
    "terminate": "TerminateInstances",
}
# How AWS says each of our errors: code and HTTP status.
_AWS_FACES: dict[type[ProviderError], tuple[str, int]] = {
    Throttled: ("RequestLimitExceeded", 503),
    NoCapacity: ("InsufficientInstanceCapacity", 500),
    QuotaExceeded: ("VcpuLimitExceeded", 400),
    AuthFailed: ("AuthFailure", 401),
    NotFound: ("InvalidInstanceID.NotFound", 400),
    InvalidRequest: ("InvalidParameterValue", 400),
    ProviderUnavailable: ("Unavailable", 503),
}


# --- the moto server: one per session ---------------------------------------------

_server_lock = threading.Lock()
_server: Any = None


def moto_endpoint() -> str:
    """``http://127.0.0.1:<port>`` of this session's moto server, started (empty) on first use."""
    from moto.server import ThreadedMotoServer

    global _server
    with _server_lock:
        if _server is None:
            # Werkzeug logs every request at INFO: thousands of lines per run.
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            # moto otherwise loads ~1,300 public AMIs and scans them on every
            # launch; the adapter launches whatever AMI id it is given.
            os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            atexit.register(server.stop)
            host, port = server.get_host_and_port()
            _server = server
            # moto's state lives in this process: start from nothing, whatever ran before.
            reset_moto(f"http://{host}:{port}")
        host, port = _server.get_host_and_port()
    return f"http://{host}:{port}"


def reset_moto(endpoint: str) -> None:
    """Forget every instance, volume and tag moto holds."""
    status, _ = _post(endpoint, "/moto-api/reset", b"", {})
    if status != 200:
        raise RuntimeError(f"moto reset answered HTTP {status}")


def moto_instance_count() -> int:
    """How many instances (any state) moto holds in the harness's regions."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    return sum(len(ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances()) for region in REGIONS)


def _post(url: str, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
    parts = urlsplit(url)
    if parts.hostname != "127.0.0.1":
        raise RuntimeError(f"the AWS wire only talks to 127.0.0.1, not {parts.hostname}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=dict(headers))
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# --- the wire ---------------------------------------------------------------------


class _Body:
    """The raw-body interface AWSResponse reads (``stream()``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data


class AwsWire:
    """AWS behaviour moto lacks, played on the HTTP requests of the clients it is attached to."""

    def __init__(self, endpoint: str, known_keys: set[str], faults: FaultPlan | None = None) -> None:
        self.endpoint = endpoint
        self.known_keys = set(known_keys)
        self.faults = (faults or FaultPlan()).dice()
        self.calls: Counter[str] = Counter()  # EC2 action -> requests seen
        self.last_params: dict[str, dict[str, str]] = {}  # EC2 action -> its last query parameters
        self._lock = threading.Lock()
        self._faults: dict[str, deque[tuple[str, int, str]]] = {}
        self._sold_out: set[tuple[str, str, str]] = set()
        self._tokens: dict[str, tuple[str, tuple[str, str, str]]] = {}
        self._lose_next_launch = False
        self._request_ids = itertools.count(1)

    def attach(self, client: EC2Client) -> EC2Client:
        client.meta.events.register("before-send.ec2", self._before_send)  # type: ignore[attr-defined]
        return client

    # --- levers ---------------------------------------------------------------

    def fail_next(self, action: str, code: str, status: int, message: str = "injected fault", times: int = 1) -> None:
        """The next ``times`` requests of ``action`` get this AWS error instead of an answer."""
        with self._lock:
            self._faults.setdefault(action, deque()).extend([(code, status, message)] * times)

    def fail_next_like(self, action: str, error: ProviderError, times: int = 1) -> None:
        """Say ``error`` the way AWS would: its own code when AWS uses it for that class, else AWS's usual one."""
        from providers.aws.errors import classify_error

        code, status = _AWS_FACES.get(type(error), ("InternalError", 500))
        if error.code and classify_error(error.code, status) is type(error):
            code = error.code
        self.fail_next(action, code, status, error.message, times)

    def sell_out(self, instance_type: str, zone: str, market: str) -> None:
        with self._lock:
            self._sold_out.add((instance_type, zone, market))

    def lose_next_launch_response(self) -> None:
        with self._lock:
            self._lose_next_launch = True

    # --- the hook ---------------------------------------------------------------

    def _before_send(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        body = request.body or b""
        raw = body if isinstance(body, bytes) else body.encode()
        params = {k: v[0] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()}
        action = params.get("Action", "")
        with self._lock:
            self.calls[action] += 1
            self.last_params[action] = params
            if _access_key(request) not in self.known_keys:
                return self._error(request, "AuthFailure", 401,
                                   "AWS was not able to validate the provided access credentials")
            queue = self._faults.get(action)
            if queue:
                code, status, message = queue.popleft()
                return self._error(request, code, status, message)
            fault = self.faults.draw(action)
        if fault == "throttle":
            return self._error(request, "RequestLimitExceeded", 503, "Request limit exceeded (injected).",
                               {"Retry-After": f"{self.faults.plan.retry_after_seconds:g}"})
        if fault == "5xx":
            return self._error(request, "Unavailable", 503, "The server is overloaded (injected).")
        if fault == "timeout":
            from botocore.exceptions import ReadTimeoutError

            raise ReadTimeoutError(endpoint_url=request.url)
        if action == "RunInstances":
            return self._run_instances(request, raw, params, lose=fault == "lost")
        if fault == "lost":
            from botocore.exceptions import ReadTimeoutError

            _post(request.url, "/", raw, _headers(request))  # carried out; the answer never arrives
            raise ReadTimeoutError(endpoint_url=request.url)
        return None

    def _run_instances(self, request: AWSPreparedRequest, body: bytes, params: dict[str, str], *,
                       lose: bool = False) -> AWSResponse:
        from botocore.exceptions import ReadTimeoutError

        market = "spot" if params.get("InstanceMarketOptions.MarketType") == "spot" else "on-demand"
        shape = (params.get("InstanceType", ""), params.get("Placement.AvailabilityZone", ""), market)
        token = params.get("ClientToken", "")
        with self._lock:
            known = self._tokens.get(token)
            sold_out = shape in self._sold_out
        if known is not None:
            instance_id, first_shape = known
            if first_shape != shape:
                return self._error(
                    request, "IdempotentParameterMismatch", 400,
                    f"The client token {token} was used with different parameters ({' '.join(first_shape)})",
                )
            if lose:
                raise ReadTimeoutError(endpoint_url=request.url)
            return self._replay(request, params, instance_id)
        if sold_out:
            return self._error(
                request, "InsufficientInstanceCapacity", 500,
                f"We currently do not have sufficient {shape[0]} capacity in the Availability Zone you "
                f"requested ({shape[1]}).",
            )
        status, answer = _post(request.url, "/", body, _headers(request))
        if status == 200 and token:
            instance_id = _first_text(answer, "instanceId")
            with self._lock:
                self._tokens[token] = (instance_id, shape)
                lose, self._lose_next_launch = lose or self._lose_next_launch, False
            if lose:
                # The instance exists at the cloud; the caller never hears of it.
                raise ReadTimeoutError(endpoint_url=request.url)
        return _response(request, status, answer)

    def _replay(self, request: AWSPreparedRequest, params: dict[str, str], instance_id: str) -> AWSResponse:
        """AWS's answer to a repeated token: the first launch's reservation, as it is now."""
        query = {"Action": "DescribeInstances", "Version": params.get("Version", ""), "InstanceId.1": instance_id}
        status, answer = _post(request.url, "/", urlencode(query).encode(), _headers(request))
        if status != 200:
            return _response(request, status, answer)
        described = ET.fromstring(answer)
        namespace = described.tag.split("}")[0] + "}" if described.tag.startswith("{") else ""
        reservation = described.find(f"{namespace}reservationSet/{namespace}item")
        if reservation is None:
            return self._error(request, "InternalError", 500, f"{instance_id} vanished")
        ET.register_namespace("", namespace.strip("{}"))
        replayed = ET.Element(f"{namespace}RunInstancesResponse")
        request_id = ET.SubElement(replayed, f"{namespace}requestId")
        request_id.text = self._request_id()
        replayed.extend(list(reservation))
        return _response(request, 200, ET.tostring(replayed, xml_declaration=True, encoding="utf-8"))

    def _error(self, request: AWSPreparedRequest, code: str, status: int, message: str,
               headers: Mapping[str, str] | None = None) -> AWSResponse:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error></Errors><RequestID>{self._request_id()}</RequestID></Response>"
        )
        return _response(request, status, body.encode(), headers)

    def _request_id(self) -> str:
        return f"wire-{next(self._request_ids):08d}"


def _access_key(request: AWSPreparedRequest) -> str:
    auth = request.headers.get("Authorization", "")
    auth = auth.decode() if isinstance(auth, bytes) else str(auth)
    marker = "Credential="
    return auth.split(marker, 1)[1].split("/", 1)[0] if marker in auth else ""


def _headers(request: AWSPreparedRequest) -> dict[str, str]:
    # moto routes on the signed headers (service and region from the credential
    # scope); it does not check the signature, so a changed body may keep them.
    out = {}
    for key, value in request.headers.items():
        if key.lower() != "content-length":
            out[key] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def _response(request: AWSPreparedRequest, status: int, body: bytes,
              headers: Mapping[str, str] | None = None) -> AWSResponse:
    from botocore.awsrequest import AWSResponse

    return AWSResponse(request.url, status, {"Content-Type": "text/xml;charset=UTF-8", **(headers or {})},
                       _Body(body))


def _first_text(xml: bytes, tag: str) -> str:
    found = ET.fromstring(xml).find(f".//{{*}}{tag}")
    if found is None or not found.text:
        raise RuntimeError(f"no <{tag}> in the RunInstances answer")
    return found.text


# --- the harness ------------------------------------------------------------------


_session: Any = None


def shared_session() -> Any:
    """One boto3 session for the whole run: it loads the EC2 service model once."""
    import boto3

    global _session
    with _server_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session


def harness_config(endpoint: str, access_key: str = GOOD_KEY, **overrides: Any) -> AwsConfig:
    from providers.aws.config import AwsConfig

    fields: dict[str, Any] = {
        "access_key_id": access_key,
        "secret_access_key": SECRET,
        "regions": REGIONS,
        "image_ids": {region: "ami-0123456789abcdef0" for region in REGIONS},
        "endpoint_url": endpoint,
        "page_size": 100,
    }
    fields.update(overrides)
    return AwsConfig(**fields)


_clusters = itertools.count(1)


# moto looks tags up by scanning every tag it holds, so each call slows down as
# instances pile up; past this many, the next harness starts from an empty moto.
CROWDED = 60


class AwsHarness:
    """AwsProvider against the session's moto, with the wire's levers.

    Harnesses share one moto and are kept apart by their cluster tag (every
    contract case lists by it and derives its client tokens from it). moto is
    reset only once it is crowded: a reset makes the next call rebuild moto's
    EC2 backend (about half a second), too slow to pay for every case.
    """

    def __init__(self, *, faults: FaultPlan | None = None, **config_overrides: Any) -> None:
        self.endpoint = moto_endpoint()
        if moto_instance_count() > CROWDED:
            reset_moto(self.endpoint)
        self.clock = SimClock(START)
        self.currency = "USD"
        self.cluster = f"contract-{next(_clusters)}"
        self.wire = AwsWire(self.endpoint, {GOOD_KEY}, faults)
        self.config = harness_config(self.endpoint, **config_overrides)
        self.catalog: tuple[Offer, ...] = tuple(o for o in load_catalog() if o.provider == "aws")
        self.provider: Provider = self.build(self.config)

    def build(self, config: AwsConfig) -> AwsProvider:
        """An AwsProvider on ``config`` whose clients go through this harness's wire."""
        from providers.aws.adapter import AwsProvider
        from providers.aws.client import make_ec2_client

        session = shared_session()
        return AwsProvider(lambda region: self.wire.attach(make_ec2_client(region, config, session)), config,
                           self.clock, self.catalog)

    def advance(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def sell_out(self, offer: Offer, capacity: Capacity) -> None:
        market = "spot" if capacity is Capacity.spot else "on-demand"
        self.wire.sell_out(offer.instance_type, offer.zone, market)

    def preempt(self, instance: Instance) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends
        from moto.ec2.models.instances import StateReason

        machine = ec2_backends[DEFAULT_ACCOUNT_ID][instance.ref.region].get_instance(instance.ref.instance_id)
        machine.terminate()
        machine.state_reason = StateReason(f"{SPOT_RECLAIM_CODE}: Spot instance termination", SPOT_RECLAIM_CODE)

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        if operation not in ACTIONS:
            raise ValueError(f"unknown operation {operation!r}; use one of {', '.join(ACTIONS)}")
        self.wire.fail_next_like(ACTIONS[operation], error, times)

    def lose_next_launch_response(self) -> None:
        self.wire.lose_next_launch_response()

    def offer(self, gpu: str | None = None) -> Offer:
        for o in self.provider.offers():
            if (gpu is None or o.gpu == gpu) and o.on_demand is not None and o.spot is not None:
                return o
        raise LookupError(f"the aws catalog has no offer with gpu={gpu!r} in {', '.join(REGIONS)}")

    def provider_with_wrong_secret(self) -> Provider | None:
        return self.build(harness_config(self.endpoint, access_key=WRONG_KEY))

    def machines(self) -> list[tuple[Mapping[str, str], str]]:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        found = []
        for region in REGIONS:
            for machine in ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances():
                tags = {t["key"]: t["value"] for t in machine.get_tags()}
                if tags.get("gpusched:cluster") == self.cluster:
                    found.append((tags, str(machine.state)))
        return found

    def faults_dealt(self) -> dict[str, int]:
        return dict(self.wire.faults.drawn)

    def close(self) -> None:
        pass  # the server is the session's; what this harness launched stays under its own cluster tag


def _make_harness(faults: FaultPlan | None = None) -> AwsHarness:
    if _MISSING:
        missing(f"the AWS cases need {' and '.join(_MISSING)}: pip install '.[test]' (from the checkout)")
    return AwsHarness(faults=faults)


HARNESSES: dict[str, Callable[..., Any]] = {"aws": _make_harness}
