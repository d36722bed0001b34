"""Huawei Cloud ECS (REST API v1) over real HTTP, backed by the sandbox cloud.

One file on purpose: it is one cloud's wire protocol (signing, routes, bodies, answers
and error shapes) in one place, to be read side by side with ECS's API reference.

``HuaweiEcsEmulator`` listens on 127.0.0.1 (port 0: the OS picks; the HTTP plumbing is
``providers.emulators.local_http``) and answers what ``huaweicloudsdkecs`` sends, under
``/v1/{project_id}``:

| route | SDK call |
|---|---|
| ``POST /cloudservers`` | CreatePostPaidServers (``X-Client-Token`` dedupe) |
| ``GET /cloudservers/detail`` | ListServersDetails (``offset`` = page number, ``limit``, ``tags``, ``server_id`` ...) |
| ``POST /cloudservers/delete`` | DeleteServers |
| ``POST /cloudservers/action`` | BatchStopServers (``os-stop``), BatchStartServers (``os-start``) |
| ``GET /jobs/{job_id}`` | ShowJob |
| ``GET /cloudservers/flavors`` | ListFlavors (stock in ``os_extra_specs``) |
| ``GET /cloudservers/{id}/tags``, ``POST .../tags/action`` | ShowServerTags, BatchCreate/DeleteServerTags |

Every request must carry Huawei's AK/SK signature, verified exactly as the gateway does
it: ``Authorization: SDK-HMAC-SHA256 Access=AK, SignedHeaders=a;b, Signature=hex`` over the
canonical request (method; the path, each segment percent-encoded, with a trailing ``/``;
the query sorted by name and value; the signed headers as ``name:value`` lines; their
names; the body's SHA-256), string to sign ``SDK-HMAC-SHA256\\n<X-Sdk-Date>\\n<sha256 hex>``,
key the secret key itself. A mismatch, an unknown AK or an ``X-Sdk-Date`` more than 15
minutes off is the gateway's HTTP 401 ``{"error_code": "APIGW.0301", "error_msg": ...}``.
ECS's own errors are ``{"error": {"code": "Ecs.XXXX", "message": ...}}`` with ECS's status.

The market behind it (stock, boot and stop delays, spot reclaims, quotas, scripted
faults) is a ``providers.sandbox.provider.SandboxCloud``; this module only translates
the wire format and the vendor's codes. Behaviours picked where the reference is silent:

* A create job is decided at once: SUCCESS with the server, or FAIL with the code ECS gives
  (``Ecs.0319`` for a sold-out flavor, the server id it answered never appearing: the v1 API
  rolls a failed create back). ``hold_next_jobs`` keeps the next create job at INIT without
  a server for some polls, as a busy region does.
* ``X-Client-Token`` must be a UUID (else ``Ecs.0123``); the same token with the same body
  answers the first answer again, with another body ``Ecs.0122``. Tokens are never forgotten.
* Server tags list as ``"key=value"``; the ``tags`` query matches one whole element.
* A deleted server (deleted, or a spot server Huawei released) leaves the listing when the
  sandbox has it terminated; while the delete runs it shows task state ``deleting``. Asked
  by ``server_id``, an unknown id answers ``{"id": ..., "fault": {...}}`` and nothing else.
  A spot release is announced nowhere in the API (only its disappearance shows).
* The first boot is BUILD; a start after a stop is SHUTOFF with task ``powering-on``; a
  stop in progress is ACTIVE with task ``powering-off``.
* A lost answer (``SandboxCloud.lose_next_launch_response``, or a scripted
  ``ProviderUnavailable`` with code ``RequestTimeout``) closes the connection without one.
* Faults. ``faults`` (``providers.emulators.faults.FaultPlan``) fails a seeded share of calls,
  once signed right: the gateway's throttling answer (HTTP 429 ``APIGW.0308``) with
  ``Retry-After``, the gateway's "Backend unavailable" (HTTP 502 ``APIGW.0201``), no answer, or
  no answer after acting. A plan's ``actions`` name ECS's calls (``CreatePostPaidServers`` ...)
  or the names the other clouds' emulators use for the same work (``RunInstances``,
  ``DescribeInstances``, ``TerminateInstances``, ``StopInstances``, ``StartInstances``), so one
  plan narrows every emulator to its launches. Whether Huawei's gateway sends ``Retry-After`` is
  not documented; the emulator sends it, as a fault plan's throttling answer does everywhere.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import random
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from providers.base import (
    AuthFailed,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.emulators.faults import FaultPlan
from providers.emulators.local_http import Answer, LocalServer, Request, Served
from providers.sandbox.provider import SandboxCloud, SandboxInstance
from scheduler.clock import Clock, SystemClock
from scheduler.models import Capacity, Offer, Stock

__all__ = [
    "ALGORITHM",
    "Call",
    "EcsError",
    "HuaweiEcsEmulator",
    "canonical_request",
    "sign",
    "string_to_sign",
]

ALGORITHM = "SDK-HMAC-SHA256"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
SIGNATURE_TTL = timedelta(minutes=15)
EMPTY_HASH = hashlib.sha256(b"").hexdigest()
JSON_TYPE = "application/json;charset=UTF-8"
MAX_LIMIT = 1000
DEFAULT_LIMIT = 25
MAX_TAGS = 10
MAX_USER_DATA = 32 * 1024
MAX_BATCH = 1000

_AUTHORIZATION = re.compile(
    r"^SDK-HMAC-SHA256\s+Access=(?P<ak>[^,\s]+),\s*SignedHeaders=(?P<signed>[a-z0-9\-;]+),"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})$"
)
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_ROUTE = re.compile(r"^/v1/(?P<project>[^/]+)(?P<rest>/.*)$")
_TAG_KEY_BAD = re.compile(r'[\x00-\x1f=*<>\\,|/]')
_TAG_VALUE_BAD = re.compile(r'[\x00-\x1f=*<>\\,|]')
_TIME = "%Y-%m-%dT%H:%M:%SZ"

# ECS call -> the name the other emulators give the same work, so one fault plan's ``actions`` fits all.
_FAULT_ALIASES = {
    "CreatePostPaidServers": "RunInstances",
    "ListServersDetails": "DescribeInstances",
    "DeleteServers": "TerminateInstances",
    "BatchStopServers": "StopInstances",
    "BatchStartServers": "StartInstances",
    "ListFlavors": "DescribePrice",
}
_THROTTLING = (429, "APIGW.0308", "The throttling threshold has been reached: policy user over ratelimit")
_BACKEND_UNAVAILABLE = (502, "APIGW.0201", "Backend unavailable")

_S = InstanceState
_CHARGING = {Capacity.on_demand: "0", Capacity.spot: "2"}
_SALE = {Stock.available: "normal", Stock.low: "normal", Stock.unknown: "normal", Stock.sold_out: "sellout"}


class EcsError(Exception):
    """One error answer. ``gateway``: the API gateway's shape (``error_code``), else ECS's (``error``)."""

    def __init__(self, status: int, code: str, message: str, *, gateway: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.gateway = gateway
        self.retry_after = retry_after  # seconds, sent as Retry-After


class _DropConnection(Exception):
    """The call took effect but its answer is lost."""


@dataclass(frozen=True)
class Call:
    """One request as the emulator answered it, for tests to assert on."""

    method: str
    route: str  # the SDK call's name, e.g. ListServersDetails
    target: str  # the path and query as they arrived, to replay
    query: Mapping[str, str]
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    status: int  # 0: the connection was dropped without an answer
    code: str  # "" on success


@dataclass
class _Server:
    """What ECS keeps about a server that the sandbox does not."""

    server_id: str
    sandbox_id: str
    project: str
    charging_mode: str
    tags: dict[str, str]
    body: dict[str, Any]
    spot_price: str = ""
    restarted: bool = False


@dataclass
class _Job:
    job_id: str
    job_type: str
    status: str
    begin: str
    server_ids: list[str]
    error_code: str | None = None
    fail_reason: str | None = None
    hold: int = 0  # polls left before an INIT job shows its outcome
    sub_type: str = "createSingleServer"
    end: str | None = field(default=None)


# --- SDK-HMAC-SHA256 ------------------------------------------------------------------


def _encode(text: str) -> str:
    return quote(text, safe="~")


def canonical_request(method: str, path: str, query: str, headers: Mapping[str, str], signed: list[str],
                      payload_hash: str) -> str:
    """The canonical request Huawei's signer builds (header names lower-cased, values trimmed, not lowered)."""
    uri = "/".join(_encode(segment) for segment in unquote(path).split("/"))
    if not uri.endswith("/"):
        uri += "/"
    pairs = sorted(parse_qsl(query, keep_blank_values=True))
    canonical_query = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in pairs)
    lines = "".join(f"{name}:{headers.get(name, '').strip()}\n" for name in signed)
    return f"{method.upper()}\n{uri}\n{canonical_query}\n{lines}\n{';'.join(signed)}\n{payload_hash}"


def string_to_sign(canonical: str, sdk_date: str) -> str:
    return f"{ALGORITHM}\n{sdk_date}\n{hashlib.sha256(canonical.encode('utf-8')).hexdigest()}"


def sign(secret_key: str, to_sign: str) -> str:
    """Hex HMAC-SHA256 of the string to sign, keyed with the secret key itself."""
    return hmac.new(secret_key.encode("utf-8"), to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


# --- the emulator -----------------------------------------------------------------------


class HuaweiEcsEmulator(Served):
    """ECS's REST API v1 on 127.0.0.1 over one SandboxCloud. Use as a context manager, or call ``close()``.

    ``clock`` is the clock the cloud runs on (job times). ``credentials`` maps AK -> SK;
    ``projects`` maps project id -> the region it is in (a project is regional on Huawei).
    ``signing_clock`` judges X-Sdk-Date (the SDK stamps it with the real time, whatever clock
    the sandbox runs on). ``faults`` fails a seeded share of calls (see the module docstring).
    """

    def __init__(
        self,
        cloud: SandboxCloud,
        clock: Clock,
        credentials: Mapping[str, str],
        projects: Mapping[str, str],
        *,
        seed: int = 0,
        signing_clock: Clock | None = None,
        port: int = 0,
        faults: FaultPlan | None = None,
    ) -> None:
        if not credentials or not projects:
            raise ValueError("the emulator needs at least one AK -> SK pair and one project -> region")
        self.cloud = cloud
        self._clock = clock
        self._credentials = dict(credentials)
        self._projects = dict(projects)
        self._signing_clock = signing_clock or SystemClock()
        self._rng = random.Random(f"{seed}:huawei-ecs")
        self._lock = threading.Lock()
        self._servers: dict[str, _Server] = {}  # server id -> what ECS keeps
        self._by_sandbox: dict[str, str] = {}  # sandbox id -> server id
        self._tokens: dict[str, tuple[str, dict[str, Any]]] = {}  # X-Client-Token -> (body fingerprint, answer)
        self._jobs: dict[str, _Job] = {}
        self._hold_next = 0
        self._job_failures: list[tuple[str, str]] = []  # (code, reason) of the next create jobs to fail
        self._scripted: dict[str, list[EcsError]] = {}
        self._calls: list[Call] = []
        self.faults = (faults or FaultPlan()).dice()
        self._routes: list[tuple[str, re.Pattern[str], str, Callable[..., tuple[int, dict[str, Any] | None]]]] = [
            ("POST", re.compile(r"^/cloudservers$"), "CreatePostPaidServers", self._create),
            ("GET", re.compile(r"^/cloudservers/detail$"), "ListServersDetails", self._list),
            ("POST", re.compile(r"^/cloudservers/delete$"), "DeleteServers", self._delete),
            ("POST", re.compile(r"^/cloudservers/action$"), "BatchServersAction", self._action),
            ("GET", re.compile(r"^/jobs/(?P<job_id>[^/]+)$"), "ShowJob", self._show_job),
            ("GET", re.compile(r"^/cloudservers/flavors$"), "ListFlavors", self._flavors),
            ("GET", re.compile(r"^/cloudservers/(?P<server_id>[^/]+)/tags$"), "ShowServerTags", self._show_tags),
            ("POST", re.compile(r"^/cloudservers/(?P<server_id>[^/]+)/tags/action$"), "ServerTagsAction",
             self._tags_action),
        ]
        self._server = LocalServer(self._answer, port=port, name="huawei-ecs-emulator")

    # --- lifetime -------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: what the adapter's endpoint setting takes."""
        return f"http://127.0.0.1:{self.port}"

    # --- scripting and looking, for tests -----------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def calls_of(self, route: str) -> list[Call]:
        return [c for c in self.calls if c.route == route]

    def sell_out(self, offer: Offer | str, capacity: Capacity) -> None:
        self.cloud.sell_out(offer, capacity)

    def preempt(self, server_id: str) -> None:
        """Release this spot server now, as Huawei does when it takes the capacity back."""
        with self._lock:
            self.cloud.preempt(self._servers[server_id].sandbox_id)

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        """Fault a sandbox operation (``providers.sandbox.provider.OPERATIONS``); it reaches the wire as ECS's code."""
        self.cloud.fail_next(operation, error, times)

    def lose_next_launch_response(self) -> None:
        """The next create makes its server, then the connection closes without an answer."""
        self.cloud.lose_next_launch_response()

    def fail_next_jobs(self, code: str, reason: str = "scripted", times: int = 1) -> None:
        """The next ``times`` creates are accepted, then their jobs FAIL with ``code`` and make nothing."""
        with self._lock:
            self._job_failures.extend([(code, reason)] * times)

    def hold_next_jobs(self, polls: int) -> None:
        """The next create job stays INIT, naming no server (nor does its answer), for ``polls`` ShowJob calls."""
        with self._lock:
            self._hold_next = polls

    def script_error(self, route: str, status: int, code: str, message: str = "scripted", times: int = 1,
                     *, gateway: bool = False, retry_after: float | None = None) -> None:
        """The next ``times`` calls of ``route`` (e.g. ``ListServersDetails``) answer this error, once signed
        right; ``retry_after`` adds a ``Retry-After`` header."""
        if route not in {r[2] for r in self._routes}:
            raise ValueError(f"unknown route {route!r}; the emulator speaks {', '.join(r[2] for r in self._routes)}")
        error = EcsError(status, code, message, gateway=gateway, retry_after=retry_after)
        with self._lock:
            self._scripted.setdefault(route, []).extend([error] * times)

    def sandbox_id(self, server_id: str) -> str:
        with self._lock:
            return self._servers[server_id].sandbox_id

    def create_body(self, server_id: str) -> dict[str, Any]:
        """The ``server`` object of the create that made this server, as it arrived."""
        with self._lock:
            return json.loads(json.dumps(self._servers[server_id].body))

    # --- one request ----------------------------------------------------------------

    def _answer(self, request: Request) -> Answer | None:
        request_id = uuid.UUID(int=self._rng.getrandbits(128), version=4).hex
        with self._lock:
            route_name = ""
            try:
                project, rest = self._project(request.path)
                route_name, handler, params = self._route(request.method, rest)
                self._authenticate(request, project)
                scripted = self._scripted.get(route_name)
                if scripted:
                    raise scripted.pop(0)
                fault = self.faults.draw(self._fault_action(route_name, request))
                if fault == "throttle":
                    raise EcsError(*_THROTTLING, gateway=True, retry_after=self.faults.plan.retry_after_seconds)
                if fault == "5xx":
                    raise EcsError(*_BACKEND_UNAVAILABLE, gateway=True)
                if fault == "timeout":
                    raise _DropConnection()
                status, payload = handler(request, project, **params)
                if fault == "lost":
                    raise _DropConnection()
            except _DropConnection:
                self._record(request, route_name, 0, "RequestTimeout")
                return None
            except EcsError as exc:
                self._record(request, route_name, exc.status, exc.code)
                body: dict[str, Any] = (
                    {"error_code": exc.code, "error_msg": exc.message, "request_id": request_id} if exc.gateway
                    else {"error": {"code": exc.code, "message": exc.message}}
                )
                headers = _headers(request_id)
                if exc.retry_after is not None:
                    headers["Retry-After"] = f"{exc.retry_after:g}"
                return Answer(exc.status, json.dumps(body).encode(), headers)
            except Exception as exc:  # noqa: BLE001 - an emulator bug reaches the test as ECS's system error
                self._record(request, route_name, 500, "Common.0001")
                body = {"error": {"code": "Common.0001", "message": f"emulator fault: {exc!r}"}}
                return Answer(500, json.dumps(body).encode(), _headers(request_id))
            self._record(request, route_name, status, "")
            data = b"" if payload is None else json.dumps(payload).encode()
            return Answer(status, data, _headers(request_id) if payload is not None else {"X-Request-Id": request_id})

    def _fault_action(self, route: str, request: Request) -> str:
        """The name ``route`` is drawn under: ECS's call, or its alias when the plan names that instead."""
        if route == "BatchServersAction":  # one route, two calls: the body says which
            route = "BatchStopServers" if b'"os-stop"' in request.body else "BatchStartServers"
        actions = self.faults.plan.actions
        alias = _FAULT_ALIASES.get(route)
        return alias if actions and route not in actions and alias in actions else route

    def _record(self, request: Request, route: str, status: int, code: str) -> None:
        target = f"{request.path}?{request.query}" if request.query else request.path
        self._calls.append(Call(request.method, route, target, dict(parse_qsl(request.query, keep_blank_values=True)),
                                dict(request.headers), request.body, status, code))

    def _project(self, path: str) -> tuple[str, str]:
        found = _ROUTE.match(path)
        if found is None:
            raise EcsError(404, "APIGW.0101", "The API does not exist or has not been published in the environment",
                           gateway=True)
        return found["project"], found["rest"]

    def _route(self, method: str, rest: str) -> tuple[str, Callable[..., tuple[int, dict[str, Any] | None]],
                                                      dict[str, str]]:
        for verb, pattern, name, handler in self._routes:
            found = pattern.match(rest)
            if found is not None and verb == method:
                return name, handler, found.groupdict()
        raise EcsError(404, "APIGW.0101", "The API does not exist or has not been published in the environment",
                       gateway=True)

    def _authenticate(self, request: Request, project: str) -> None:
        headers = request.headers
        found = _AUTHORIZATION.match(headers.get("authorization", "").strip())
        if found is None:
            raise _auth("the Authorization header is not SDK-HMAC-SHA256 Access=..., SignedHeaders=..., Signature=...")
        signed = found["signed"].split(";")
        if "host" not in signed or "x-sdk-date" not in signed:
            raise _auth("SignedHeaders must include host and x-sdk-date")
        secret = self._credentials.get(found["ak"])
        if secret is None:
            raise _auth("the access key does not exist")
        try:
            stamped = datetime.strptime(headers.get("x-sdk-date", ""), DATE_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            raise _auth("X-Sdk-Date is not a time like 20261102T090000Z") from None
        if abs(self._signing_clock.now() - stamped) > SIGNATURE_TTL:
            raise _auth("the request has expired: X-Sdk-Date is more than 15 minutes off")
        payload_hash = headers.get("x-sdk-content-sha256") or (
            hashlib.sha256(request.body).hexdigest() if request.body else EMPTY_HASH)
        canonical = canonical_request(request.method, request.path, request.query, headers, signed, payload_hash)
        expected = sign(secret, string_to_sign(canonical, headers["x-sdk-date"]))
        if not hmac.compare_digest(expected, found["signature"]):
            raise _auth("verify aksk signature fail")
        if project not in self._projects or headers.get("x-project-id", project) != project:
            raise EcsError(400, "Ecs.0023", "project_id in token mismatches with project_id in url.")

    # --- routes -------------------------------------------------------------------------

    def _create(self, request: Request, project: str) -> tuple[int, dict[str, Any]]:
        region = self._projects[project]
        body = _json_body(request)
        token = request.headers.get("x-client-token")
        fingerprint = json.dumps(body, sort_keys=True)
        if token is not None:
            if not _UUID.match(token):
                raise EcsError(400, "Ecs.0123", "X-Client-Token must be a UUID (8-4-4-4-12 hex digits).")
            if token in self._tokens:
                seen, answer = self._tokens[token]
                if seen != fingerprint:
                    raise EcsError(400, "Ecs.0122", "The idempotency token was used with different parameters.")
                return 200, answer
        server = body.get("server")
        if not isinstance(server, dict):
            raise EcsError(400, "Ecs.0005", "Invalid request body: server is required.")
        spec = _server_spec(server, region)
        job_id = self._new_job_id()
        server_id = self._new_server_id()
        hold, self._hold_next = self._hold_next, 0
        if self._job_failures:
            code, reason = self._job_failures.pop(0)
            answer = self._failed_job(job_id, server_id, code, reason)
            if token is not None:
                self._tokens[token] = (fingerprint, answer)
            return 200, answer
        try:
            made = self.cloud.launch(
                region=region, zone=spec["zone"], instance_type=spec["flavor"], capacity=spec["capacity"],
                client_token=token, tags=spec["tags"], name=spec["name"], image=spec["image"],
                user_data=spec["user_data"], max_price=spec["spot_price"],
            )
        except ProviderUnavailable as exc:
            if exc.code != "RequestTimeout":
                raise _vendor_error(exc) from None
            # Created at the cloud, answer lost: it exists, and the same token answers it later.
            lost = next(m for m in self.cloud.all_instances() if m.client_token == token) if token else None
            if lost is not None:
                answer = self._made(lost, server_id, job_id, project, spec, server, hold=0)
                self._tokens[token] = (fingerprint, answer)  # type: ignore[index]
            raise _DropConnection() from None
        except NoCapacity as exc:
            # Decided by the job, as ECS decides capacity after accepting the request; rolled back.
            answer = self._failed_job(job_id, server_id, "Ecs.0319",
                                      f"Insufficient resources for this flavor: {exc.message}")
        except ProviderError as exc:
            raise _vendor_error(exc) from None
        else:
            answer = self._made(made, server_id, job_id, project, spec, server, hold=hold)
        if token is not None:
            self._tokens[token] = (fingerprint, answer)
        return 200, answer

    def _failed_job(self, job_id: str, server_id: str, code: str, reason: str) -> dict[str, Any]:
        """A create job that failed and was rolled back: the server id it answered never appears."""
        now = _stamp(self._clock.now())
        self._jobs[job_id] = _Job(job_id, "createServer", "FAIL", now, [server_id], error_code=code,
                                  fail_reason=reason, end=now)
        return {"job_id": job_id, "serverIds": [server_id]}

    def _made(self, machine: SandboxInstance, server_id: str, job_id: str, project: str, spec: dict[str, Any],
              server: dict[str, Any], *, hold: int) -> dict[str, Any]:
        self._servers[server_id] = _Server(
            server_id=server_id, sandbox_id=machine.instance_id, project=project,
            charging_mode=_CHARGING[spec["capacity"]], tags=dict(spec["tags"]), body=server,
            spot_price=str(spec["spot_price"] or ""),
        )
        self._by_sandbox[machine.instance_id] = server_id
        now = _stamp(self._clock.now())
        status = "INIT" if hold else "SUCCESS"
        self._jobs[job_id] = _Job(job_id, "createServer", status, now, [server_id], hold=hold,
                                  end=None if hold else now)
        return {"job_id": job_id, "serverIds": [] if hold else [server_id]}

    def _list(self, request: Request, project: str) -> tuple[int, dict[str, Any]]:
        region = self._projects[project]
        q = dict(parse_qsl(request.query, keep_blank_values=True))
        if q.get("server_id"):
            ids = [i for i in q["server_id"].split(",") if i]
            return 200, {"count": len(ids), "servers": [self._by_id(region, project, i) for i in ids]}
        page = _integer(q, "offset", 1, low=0) or 1
        limit = _integer(q, "limit", DEFAULT_LIMIT, low=1)
        if limit > MAX_LIMIT:
            raise EcsError(400, "Ecs.0005", f"limit must be at most {MAX_LIMIT}.")
        try:
            machines, _ = self.cloud.instances(regions=[region])
        except ProviderError as exc:
            raise _vendor_error(exc) from None
        servers = [s for s in (self._listed(m, project) for m in machines) if s is not None]
        keep = [s for s in servers if _matches(s, q)]
        start = (page - 1) * limit
        return 200, {"count": len(keep), "servers": keep[start:start + limit]}

    def _delete(self, request: Request, project: str) -> tuple[int, dict[str, Any]]:
        body = _json_body(request)
        targets = self._targets(body.get("servers"), project)
        for server in targets:
            machine = self._machine(server)
            if machine.state is _S.terminating:
                continue  # already being deleted: nothing more to do
            try:
                self.cloud.terminate(server.sandbox_id)
            except ProviderError as exc:
                raise _vendor_error(exc) from None
        return 200, {"job_id": self._done_job("deleteServer", [s.server_id for s in targets])}

    def _action(self, request: Request, project: str) -> tuple[int, dict[str, Any]]:
        body = _json_body(request)
        if "os-stop" in body:
            option = body["os-stop"] or {}
            if option.get("type", "SOFT") not in ("SOFT", "HARD"):
                raise EcsError(400, "Ecs.0005", "os-stop.type must be SOFT or HARD.")
            targets = self._targets(option.get("servers"), project)
            for server in targets:
                if self._state(server) != ("ACTIVE", None):
                    raise EcsError(400, "Ecs.0100", f"The ECS {server.server_id} status does not meet requirements.")
            for server in targets:
                try:
                    self.cloud.stop(server.sandbox_id)
                except ProviderError as exc:
                    raise _vendor_error(exc) from None
            return 200, {"job_id": self._done_job("batchStopServer", [s.server_id for s in targets])}
        if "os-start" in body:
            targets = self._targets((body["os-start"] or {}).get("servers"), project)
            for server in targets:
                if self._state(server) != ("SHUTOFF", None):
                    raise EcsError(400, "Ecs.0100", f"The ECS {server.server_id} status does not meet requirements.")
            for server in targets:
                try:
                    self.cloud.start(server.sandbox_id)
                except ProviderError as exc:
                    raise _vendor_error(exc) from None
                server.restarted = True
            return 200, {"job_id": self._done_job("batchStartServer", [s.server_id for s in targets])}
        raise EcsError(400, "Ecs.0005", "Invalid request body: os-stop or os-start is required.")

    def _show_job(self, request: Request, project: str, job_id: str) -> tuple[int, dict[str, Any]]:
        job = self._jobs.get(job_id)
        if job is None:
            raise EcsError(400, "Common.0011", "Failed to query system tasks: invalid job ID.")
        if job.status == "INIT":
            if job.hold > 0:
                job.hold -= 1
                return 200, _job_json(job, with_servers=False)
            job.status, job.end = "SUCCESS", _stamp(self._clock.now())
        return 200, _job_json(job, with_servers=True)

    def _flavors(self, request: Request, project: str) -> tuple[int, dict[str, Any]]:
        region = self._projects[project]
        q = dict(parse_qsl(request.query, keep_blank_values=True))
        try:
            offers = self.cloud.offers([region])
        except ProviderError as exc:
            raise _vendor_error(exc) from None
        by_type: dict[str, list[Offer]] = {}
        for offer in offers:
            by_type.setdefault(offer.instance_type, []).append(offer)
        flavors = []
        for flavor_id, rows in sorted(by_type.items()):
            if q.get("flavor_id") and q["flavor_id"] != flavor_id:
                continue
            if q.get("availability_zone") and q["availability_zone"] not in {o.zone for o in rows}:
                continue
            flavors.append(_flavor_json(flavor_id, rows))
        return 200, {"flavors": flavors}

    def _show_tags(self, request: Request, project: str, server_id: str) -> tuple[int, dict[str, Any]]:
        server = self._targets([{"id": server_id}], project)[0]
        return 200, {"tags": [{"key": k, "value": v} for k, v in server.tags.items()]}

    def _tags_action(self, request: Request, project: str, server_id: str) -> tuple[int, None]:
        server = self._targets([{"id": server_id}], project)[0]
        body = _json_body(request)
        tags = body.get("tags")
        if body.get("action") not in ("create", "delete") or not isinstance(tags, list):
            raise EcsError(400, "Ecs.0005", "action must be create or delete, with a list of tags.")
        if body["action"] == "create":
            server.tags.update(_tag_pairs(tags))
            if len(server.tags) > MAX_TAGS:
                raise EcsError(400, "Ecs.0905", "The number of tags exceeds the maximum allowed limit.")
        else:
            for tag in tags:
                server.tags.pop(str((tag or {}).get("key")), None)
        return 204, None

    # --- inside -----------------------------------------------------------------------

    def _new_job_id(self) -> str:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4).hex

    def _new_server_id(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _done_job(self, job_type: str, server_ids: list[str]) -> str:
        job_id = self._new_job_id()
        now = _stamp(self._clock.now())
        self._jobs[job_id] = _Job(job_id, job_type, "SUCCESS", now, server_ids, sub_type=job_type, end=now)
        return job_id

    def _targets(self, raw: object, project: str) -> list[_Server]:
        if not isinstance(raw, list) or not raw or not all(isinstance(s, dict) and s.get("id") for s in raw):
            raise EcsError(400, "Ecs.0005", "Invalid request body: servers must be a list of {\"id\": ...}.")
        if len(raw) > MAX_BATCH:
            raise EcsError(400, "Ecs.0118", f"At most {MAX_BATCH} ECSs per request.")
        found = []
        for item in raw:
            server = self._servers.get(str(item["id"]))
            if server is None or server.project != project or self._gone(server):
                raise EcsError(404, "Ecs.0114", f"Instance[{item['id']}] could not be found.")
            found.append(server)
        return found

    def _machine(self, server: _Server) -> SandboxInstance:
        return self.cloud.get(server.sandbox_id)

    def _gone(self, server: _Server) -> bool:
        try:
            return self._machine(server).state is _S.terminated
        except NotFound:
            return True

    def _state(self, server: _Server) -> tuple[str, str | None]:
        """(status, task state) as ECS shows the server now."""
        machine = self._machine(server)
        state = machine.state
        if state is _S.pending:
            return ("SHUTOFF", "powering-on") if server.restarted else ("BUILD", "spawning")
        return {
            _S.running: ("ACTIVE", None),
            _S.stopping: ("ACTIVE", "powering-off"),
            _S.stopped: ("SHUTOFF", None),
            _S.terminating: ("ACTIVE", "deleting"),
            _S.terminated: ("DELETED", None),
        }[state]

    def _listed(self, machine: SandboxInstance, project: str) -> dict[str, Any] | None:
        server_id = self._by_sandbox.get(machine.instance_id)
        if server_id is None or machine.state is _S.terminated:
            return None  # launched past this face, or deleted: ECS lists neither
        server = self._servers[server_id]
        return self._server_json(server, machine) if server.project == project else None

    def _by_id(self, region: str, project: str, server_id: str) -> dict[str, Any]:
        server = self._servers.get(server_id)
        if server is not None and server.project == project and not self._gone(server):
            return self._server_json(server, self._machine(server))
        return {"id": server_id, "fault": {"code": 404, "message": f"Instance[{server_id}] could not be found.",
                                           "created": _stamp(self._clock.now())}}

    def _server_json(self, server: _Server, machine: SandboxInstance) -> dict[str, Any]:
        status, task = self._state(server)
        offer = machine.offer
        created = _stamp(machine.launched_at)
        metadata = {"charging_mode": server.charging_mode, "vpc_id": str(server.body.get("vpcid", "")),
                    "metering.image_id": machine.image, "metering.imagetype": "gold"}
        agency = (server.body.get("metadata") or {}).get("agency_name")
        if agency:
            metadata["agency_name"] = str(agency)
        vm_state = {"BUILD": "building", "ACTIVE": "active", "SHUTOFF": "stopped"}.get(status, "active")
        return {
            "id": server.server_id,
            "name": machine.name,
            "status": status,
            "OS-EXT-STS:task_state": task,
            "OS-EXT-STS:vm_state": vm_state,
            "OS-EXT-STS:power_state": 1 if status == "ACTIVE" else 4,
            "OS-EXT-AZ:availability_zone": machine.zone,
            "flavor": {"id": offer.instance_type, "name": offer.instance_type, "disk": "0",
                       "vcpus": str(offer.vcpus), "ram": str(int(offer.mem_gib * 1024))},
            "image": {"id": machine.image},
            "metadata": metadata,
            "tags": [f"{k}={v}" for k, v in server.tags.items()],
            "created": created,
            "updated": created,
            "OS-SRV-USG:launched_at": machine.launched_at.strftime("%Y-%m-%dT%H:%M:%S.000000"),
            "tenant_id": server.project,
            "user_id": "0" * 32,
            "hostId": hashlib.sha256(machine.zone.encode()).hexdigest()[:56],
            "key_name": str(server.body.get("key_name", "")),
            "addresses": {},
            "security_groups": [{"id": str(g.get("id")), "name": str(g.get("id"))}
                                for g in server.body.get("security_groups") or []],
            "locked": False,
            "progress": 0,
            "config_drive": "",
            "description": "",
            "host_status": "UP",
            "enterprise_project_id": "0",
            "auto_terminate_time": "",
            "os-extended-volumes:volumes_attached": [],
            "sys_tags": [{"key": "_sys_enterprise_project_id", "value": "0"}],
        }


# --- request pieces ------------------------------------------------------------------


def _auth(message: str) -> EcsError:
    return EcsError(401, "APIGW.0301", f"Incorrect IAM authentication information: {message}", gateway=True)


def _headers(request_id: str) -> dict[str, str]:
    return {"Content-Type": JSON_TYPE, "X-Request-Id": request_id}


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime(_TIME)


def _json_body(request: Request) -> dict[str, Any]:
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise EcsError(400, "Ecs.0005", "The body must be application/json.")
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        raise EcsError(400, "Ecs.0005", "Invalid request body: not JSON.") from None
    if not isinstance(body, dict):
        raise EcsError(400, "Common.0002", "The request body cannot be left blank.")
    return body


def _integer(q: Mapping[str, str], name: str, default: int, *, low: int) -> int:
    raw = q.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)  # type: ignore[arg-type]
    except ValueError:
        raise EcsError(400, "Ecs.0005", f"{name} must be an integer.") from None
    if value < low:
        raise EcsError(400, "Ecs.0005", f"{name} must be at least {low}.")
    return value


def _server_spec(server: Mapping[str, Any], region: str) -> dict[str, Any]:
    """What a create asks for, checked as ECS checks it."""
    for name in ("flavorRef", "imageRef", "name", "vpcid"):
        if not isinstance(server.get(name), str) or not server[name]:
            raise EcsError(400, "Ecs.0005", f"Invalid request body: {name} is required.")
    nics = server.get("nics")
    if not isinstance(nics, list) or not nics or not all(isinstance(n, dict) and n.get("subnet_id") for n in nics):
        raise EcsError(400, "Ecs.0005", "Invalid request body: nics with a subnet_id are required.")
    root = server.get("root_volume")
    if not isinstance(root, dict) or root.get("volumetype") not in ("SATA", "SAS", "SSD", "GPSSD", "ESSD"):
        raise EcsError(400, "Ecs.0005", "Invalid request body: root_volume.volumetype is required.")
    zone = server.get("availability_zone")
    if not isinstance(zone, str) or not zone.startswith(region):
        raise EcsError(400, "Ecs.0005", f"availability_zone {zone!r} is not in region {region}.")
    if server.get("count", 1) != 1:
        raise EcsError(400, "Ecs.0005", "the emulator creates one server per request (count 1).")
    extend = server.get("extendparam") or {}
    if extend.get("chargingMode", 0) not in (0, "0", "postPaid"):
        raise EcsError(400, "Ecs.0005", "chargingMode must be 0 (pay-per-use) on /v1/{project_id}/cloudservers.")
    capacity, spot_price = Capacity.on_demand, None
    if extend.get("marketType") is not None:
        if extend["marketType"] != "spot":
            raise EcsError(400, "Ecs.0005", "marketType must be spot.")
        capacity = Capacity.spot
        if extend.get("spotPrice") not in (None, ""):
            try:
                spot_price = Decimal(str(extend["spotPrice"]))
            except InvalidOperation:
                raise EcsError(400, "Ecs.0005", "spotPrice must be a number.") from None
            if not spot_price.is_finite() or spot_price <= 0:
                raise EcsError(400, "Ecs.0005", "spotPrice must be positive.")
    elif extend.get("spotPrice") not in (None, ""):
        raise EcsError(400, "Ecs.0005", "spotPrice goes with marketType spot.")
    return {
        "flavor": server["flavorRef"], "image": server["imageRef"], "name": server["name"], "zone": zone,
        "capacity": capacity, "spot_price": spot_price, "tags": _tag_pairs(server.get("server_tags") or []),
        "user_data": _user_data(server.get("user_data")),
    }


def _tag_pairs(raw: object) -> dict[str, str]:
    if not isinstance(raw, list):
        raise EcsError(400, "Ecs.0906", "Invalid tag attribute.")
    if len(raw) > MAX_TAGS:
        raise EcsError(400, "Ecs.0905", "The number of tags exceeds the maximum allowed limit.")
    tags: dict[str, str] = {}
    for tag in raw:
        key, value = (tag.get("key"), tag.get("value", "")) if isinstance(tag, dict) else (None, None)
        if not isinstance(key, str) or not key or len(key) > 36 or _TAG_KEY_BAD.search(key):
            raise EcsError(400, "Ecs.0907", "Invalid tag character set.")
        if not isinstance(value, str) or len(value) > 43 or _TAG_VALUE_BAD.search(value):
            raise EcsError(400, "Ecs.0907", "Invalid tag character set.")
        if key in tags:
            raise EcsError(400, "Ecs.0908", "The tag key cannot be duplicate.")
        tags[key] = value
    return tags


def _user_data(raw: object) -> str:
    if raw in (None, ""):
        return ""
    try:
        data = base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise EcsError(400, "Ecs.0005", "user_data must be base64.") from None
    if len(data) > MAX_USER_DATA:
        raise EcsError(400, "Ecs.0005", "user_data is larger than 32 KB.")
    return data.decode("utf-8", errors="replace")


def _matches(server: Mapping[str, Any], q: Mapping[str, str]) -> bool:
    if q.get("tags") and q["tags"] not in server["tags"]:
        return False
    if q.get("not-tags") and q["not-tags"] in server["tags"]:
        return False
    if q.get("name") and q["name"] not in server["name"]:
        return False
    if q.get("flavor") and q["flavor"] != server["flavor"]["id"]:
        return False
    return not q.get("status") or q["status"] == server["status"]


def _job_json(job: _Job, *, with_servers: bool) -> dict[str, Any]:
    subs = []
    if with_servers:
        for server_id in job.server_ids:
            subs.append({
                "status": job.status, "job_id": uuid.uuid5(uuid.NAMESPACE_OID, job.job_id + server_id).hex,
                "job_type": job.sub_type, "begin_time": job.begin, "end_time": job.end,
                "entities": {"server_id": server_id}, "error_code": job.error_code, "fail_reason": job.fail_reason,
            })
    return {
        "status": job.status, "job_id": job.job_id, "job_type": job.job_type, "begin_time": job.begin,
        "end_time": job.end or "", "error_code": job.error_code, "fail_reason": job.fail_reason,
        "entities": {"sub_jobs_total": len(subs), "sub_jobs": subs},
    }


def _flavor_json(flavor_id: str, rows: list[Offer]) -> dict[str, Any]:
    first = rows[0]
    on_demand = ",".join(f"{o.zone}({_SALE[o.on_demand_stock]})" for o in rows if o.on_demand is not None)
    spot = ",".join(f"{o.zone}({_SALE[o.spot_stock]})" for o in rows if o.spot is not None)
    specs = {
        "ecs:performancetype": "gpu",
        "resource_type": "IOoptimized",
        "cond:operation:status": "abandon",  # on sale only where cond:operation:az says
        "cond:operation:az": on_demand,
        "pci_passthrough:alias": f"nvidia-{first.gpu.lower()}:{first.gpu_count}",
        "info:gpus": json.dumps([{"name": first.gpu, "memory_mb": int(first.gpu_mem_gib * 1024),
                                  "count": first.gpu_count}]),
    }
    if spot:
        specs["cond:spot:operation:status"] = "abandon"
        specs["cond:spot:operation:az"] = spot
    return {
        "id": flavor_id, "name": flavor_id, "vcpus": str(first.vcpus), "ram": int(first.mem_gib * 1024),
        "disk": "0", "swap": "", "OS-FLV-EXT-DATA:ephemeral": 0, "OS-FLV-DISABLED:disabled": False,
        "rxtx_factor": 1.0, "os-flavor-access:is_public": True, "links": [], "os_extra_specs": specs,
    }


def _vendor_error(exc: ProviderError) -> EcsError | _DropConnection:
    """A sandbox refusal as the answer ECS gives for it."""
    if isinstance(exc, ProviderUnavailable) and exc.code == "RequestTimeout":
        return _DropConnection()
    if exc.code and "." in exc.code:
        # A scripted fault that already names a Huawei code keeps it.
        return EcsError(429 if isinstance(exc, Throttled) else 400, exc.code, exc.message,
                        gateway=exc.code.startswith("APIGW."))
    if isinstance(exc, Throttled):
        return EcsError(*_THROTTLING, gateway=True, retry_after=exc.retry_after)
    if isinstance(exc, NoCapacity):
        return EcsError(400, "Ecs.0319", f"Insufficient resources for this flavor: {exc.message}")
    if isinstance(exc, QuotaExceeded):
        return EcsError(400, "Ecs.0001", "Insufficient ECS quota.")
    if isinstance(exc, AuthFailed):
        return EcsError(403, "Ecs.0003", "You do not have permission to perform this operation.")
    if isinstance(exc, NotFound):
        return EcsError(404, "Ecs.0114", exc.message)
    if isinstance(exc, InvalidRequest):
        code = {"InvalidInstanceType": "Ecs.0029", "IncorrectInstanceState": "Ecs.0100",
                "IdempotentParameterMismatch": "Ecs.0122"}.get(exc.code, "Ecs.0005")
        return EcsError(400, code, exc.message)
    return EcsError(500, "Common.0001", f"A system exception occurred: {exc.message}")
